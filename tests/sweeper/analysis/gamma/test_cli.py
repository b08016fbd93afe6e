"""`sweeper gamma`: outputs, and exit 2 with a clear message (and nothing written) on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.cli import main

L, D = 12, 32


@pytest.fixture
def two_models(ckpt, planted, tmp_path: Path) -> list[Path]:
    llama = ckpt.llama(tmp_path / "llama", attn_in=planted.gains("noise", L, D), mlp_in=planted.gains("rising", L, D))
    bert = ckpt.bert_bin(tmp_path / "bert", attn_out=planted.gains("steady", L, D), mlp_out=planted.gains("falling", L, D))
    return [llama, bert]


def _sweeper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], check=False, capture_output=True, text=True, timeout=120)


def test_json_on_stdout(two_models, capsys) -> None:
    assert main(["gamma", *map(str, two_models), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in results["models"]] == ["llama", "bert"]
    assert set(results["models"][0]["sites"]) == {"mlp_in"}
    assert set(results["models"][1]["sites"]) == {"mlp_out"}
    assert results["models"][0]["sites"]["mlp_in"]["trend"]["mean"]["spearman"] > 0.95


def test_site_selection(two_models, capsys) -> None:
    assert main(["gamma", *map(str, two_models), "--site", "attn", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert set(results["models"][0]["sites"]) == {"attn_in"}
    assert set(results["models"][1]["sites"]) == {"attn_out"}
    assert main(["gamma", *map(str, two_models), "--site", "all", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert set(results["models"][1]["sites"]) == {"attn_out", "mlp_out"}


def test_table_and_out_dir(two_models, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report"
    assert main(["gamma", *map(str, two_models), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "llama" in printed and "mlp_out" in printed and "BERT post-LN" in printed
    results = json.loads((out / "gamma.json").read_text())
    assert len(results["models"]) == 2
    page = (out / "gamma.html").read_text()
    assert "<script src='plotly.min.js'>" in page
    assert (out / "plotly.min.js").stat().st_size > 1_000_000  # plotly.js itself, for offline use
    assert not list(out.glob(".*.tmp"))


def test_missing_path_exits_2_and_writes_nothing(two_models, tmp_path: Path) -> None:
    out = tmp_path / "never"
    proc = _sweeper("gamma", str(two_models[0]), str(tmp_path / "missing"), "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'missing'}: no such file or directory"
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unknown_layout_exits_2_listing_tensor_names(ckpt, tmp_path: Path, capsys) -> None:
    import numpy as np

    ckpt.named(tmp_path / "cnn", {"stem.conv.weight": np.ones((4, 4)), "stages.0.bn.weight": np.ones(4)},
               {"model_type": "resnet"})
    out = tmp_path / "never"
    assert main(["gamma", str(tmp_path / "cnn"), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines[0].startswith("error: ") and "unknown checkpoint layout (model_type resnet)" in lines[0]
    assert any("stages.0.bn.weight" in line for line in lines)
    assert any("stem.conv.weight" in line for line in lines)
    assert captured.out == ""
    assert not out.exists()


def test_bad_arguments_exit_2(two_models, tmp_path: Path) -> None:
    assert _sweeper("gamma", str(two_models[0]), "--site", "ffn").returncode == 2
    (tmp_path / "file").write_text("x")
    proc = _sweeper("gamma", str(two_models[0]), "--out", str(tmp_path / "file"))
    assert proc.returncode == 2 and "not a directory" in proc.stderr
