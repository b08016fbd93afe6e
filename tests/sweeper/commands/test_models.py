"""`sweeper models [--json]`: every named config with exact counts and FLOPs; bad input exits 2."""

from __future__ import annotations

import json

from models import count_params, flops_per_token, named_config, named_configs
from models.registry import scheme_names
from sweeper.cli import main


def test_json_lists_every_named_config_with_exact_counts(capsys):
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in data["configs"]] == list(named_configs())
    for row in data["configs"]:
        cfg = named_config(row["name"])
        counts = count_params(cfg)
        assert (row["params"], row["params_nonembed"]) == (counts["total"], counts["nonembed"])
        assert row["flops_per_token"] == flops_per_token(cfg)
    assert [s["name"] for s in data["schemes"]] == scheme_names()
    assert data["configs"][0]["params"] == 17_838_208  # w128-L48, Pre-Norm


def test_scheme_and_seq_len_options(capsys):
    assert main(["models", "--json", "--scheme", "layerrope", "--seq-len", "1024"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = next(r for r in data["configs"] if r["name"] == "w128-L512")
    cfg = named_config("w128-L512", scheme="layerrope")
    assert row["params"] == count_params(cfg)["total"] == 111_083_648 - 2 * 512 * 128 + 4 * (128 + 4)
    assert row["flops_per_token"] == flops_per_token(cfg, seq_len=1024) and row["seq_len"] == 1024


def test_table_output(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "w128-L512" in out and "1,340,704,768" in out and "layerrope" in out


def test_bad_scheme_is_a_one_line_error(capsys):
    assert main(["models", "--scheme", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: --scheme: unknown scheme 'bogus' (allowed: " + ", ".join(scheme_names()) + ")"
    ]
