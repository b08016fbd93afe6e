"""Bad sweep files through the real CLI: exit 2, one line per problem, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.cli import main

GOOD = """\
name: good
output: {out}
methods: [pre, post, layerrope]
model: {{width: 32, heads: 2, depths: [2, 4], seq_len: 32}}
train: {{steps: 20, batch_size: 4}}
lr: {{center: 3e-3, points: 3}}
"""


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def good(tmp_path: Path, **replace: str) -> str:
    text = GOOD.format(out=tmp_path / "out")
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def assert_clean_failure(proc: subprocess.CompletedProcess, tmp_path: Path, *needles: str) -> list[str]:
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("error: ") for ln in lines), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)
    assert not (tmp_path / "out").exists(), "a failing command must write nothing"
    return lines


# The list: each case via the real CLI in a subprocess, for both validate and launch.
CASES = {
    "wrong types": (dict(**{"width: 32": "width: wide", "steps: 20": "steps: twenty"}),
                    ["model.width: expected an integer (got 'wide')", "train.steps: expected an integer (got 'twenty')"]),
    "unknown method": (dict(**{"[pre, post, layerrope]": "[pre, postnorm, layerope]"}),
                       ["methods[1]: unknown method 'postnorm'", "did you mean 'post'?",
                        "methods[2]: unknown method 'layerope'; did you mean 'layerrope'?"]),
    "negative and zero depths": (dict(**{"depths: [2, 4]": "depths: [0, -4, 2]"}),
                                 ["model.depths[0]: must be ≥ 1 (got 0)", "model.depths[1]: must be ≥ 1 (got -4)"]),
    "inverted LR bounds": (dict(**{"points: 3}": "points: 3, bounds: [1e-1, 1e-5]}"}),
                           ["lr.bounds: lower bound must be below the upper bound"]),
    "missing data file": (dict(**{"methods:": "data: {source: text, path: /no/such/corpus.txt}\nmethods:"}),
                          ["data.path: no such file or directory: /no/such/corpus.txt"]),
    "unknown keys": (dict(**{"seq_len: 32": "seq_len: 32, widht: 3", "batch_size: 4": "batch_size: 4, warmup: 3"}),
                     ["model.widht: unknown key 'widht'; did you mean 'width'?", "train.warmup: unknown key 'warmup'"]),
}


@pytest.mark.parametrize("command", ["validate", "launch"])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_sweep_files_exit_2_with_one_line_per_problem(tmp_path, case, command):
    replace, needles = CASES[case]
    path = write(tmp_path, good(tmp_path, **replace))
    lines = assert_clean_failure(cli(command, str(path)), tmp_path, *needles)
    if len(needles) > 1:
        assert lines[0].endswith(f"{len(lines) - 1} problems"), lines
    # Each problem line names the file and the line of the offending value.
    assert all(f"{path}:" in ln for ln in lines)


def test_empty_file(tmp_path):
    path = write(tmp_path, "\n  \n")
    assert_clean_failure(cli("validate", str(path)), tmp_path, "empty file")
    assert_clean_failure(cli("launch", str(path)), tmp_path, "empty file")


def test_every_problem_reported_at_once(tmp_path):
    text = good(tmp_path, **{"[pre, post, layerrope]": "[pre, layerope]", "depths: [2, 4]": "depths: [-1]",
                             "steps: 20": "steps: 0", "points: 3}": "points: 3, bounds: [1, 1e-3]}"})
    text += "stack: -2\nresources: {gpu: .nan}\nunknown_top: 1\n"
    lines = assert_clean_failure(cli("validate", str(write(tmp_path, text))), tmp_path)
    assert lines[0].endswith("7 problems"), lines
    joined = "\n".join(lines)
    for needle in ("methods[1]", "model.depths[0]", "train.steps", "lr.bounds", "stack: expected a positive integer",
                   "resources.gpu: nan is not allowed", "unknown key 'unknown_top'"):
        assert needle in joined


def test_good_file_validates_and_writes_nothing(tmp_path):
    path = write(tmp_path, good(tmp_path))
    proc = cli("validate", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "3 methods × 2 sizes × 1 seed = 6 cells" in proc.stdout  # "1 seed", not "1 seeds" (issue 33)
    assert not (tmp_path / "out").exists()


def test_dry_run_writes_nothing_and_reports_flops(tmp_path):
    path = write(tmp_path, good(tmp_path))
    proc = cli("launch", str(path), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert len(plan["cells"]) == 6
    cell = plan["cells"][0]
    assert cell["flops_per_point"] == pytest.approx(cell["tokens_per_point"] * plan["cells"][0]["flops_per_point"]
                                                    / cell["tokens_per_point"])
    assert cell["tokens_per_point"] == 20 * 4 * 32
    assert plan["totals"]["initial_points"] == 18
    totals = plan["totals"]
    if "initial_gpu_hours" in totals:
        assert totals["initial_gpu_hours"] == pytest.approx(totals["initial_flops"] / 2e14 / 3600)
    else:  # a CPU sweep is costed in CPU-hours (tests/sweeper/search/test_cost.py)
        assert totals["initial_cpu_hours"] > 0 and totals["unit"] == "CPU"
    assert not (tmp_path / "out").exists()


def test_schema_command_prints_a_json_schema():
    proc = cli("schema")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"methods", "model", "train", "lr", "resources", "stack"} <= set(schema["properties"])
    assert schema["required"] == ["name", "methods", "model", "train"]


# Hostile inputs (issue 8's list), in-process through `sweeper.cli.main` for speed.
HOSTILE = {
    "binary": b"\x00\x01\x02name: x\n\xff\xfe",
    "not utf-8": b"name: caf\xe9\n",
    "top level list": b"- a\n- b\n",
    "top level scalar": b"just a string\n",
    "duplicate keys": b"name: a\nname: b\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\n",
    "duplicate nested keys": b"name: a\nmethods: [pre]\nmodel: {depths: [2], depths: [3]}\ntrain: {steps: 1}\n",
    "alias bomb": (b'a: &a ["x","x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
                   b'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n'
                   b'e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n'),
    "deep nesting": b"name: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "deep mapping nesting": b"a:\n" + b"".join(b" " * (i + 1) + b"b:\n" for i in range(200)),
    "python tag": b"name: !!python/object/apply:os.system ['echo hi']\n",
    "syntax error": b"name: [unclosed\nmethods: pre\n",
    "two documents": b"name: a\n---\nname: b\n",
    "nan lr": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nlr: {center: .nan}\n",
    "inf bound": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nlr: {bounds: [1e-6, .inf]}\n",
    "absurd depth": b"name: a\nmethods: [pre]\nmodel: {depths: [100000000000]}\ntrain: {steps: 1}\n",
    "absurd width": b"name: a\nmethods: [pre]\nmodel: {width: 99999999, depths: [2]}\ntrain: {steps: 1}\n",
    "zero lr bound": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nlr: {bounds: [0, 1]}\n",
    "negative lr": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nlr: {grid: [-1e-3, 1e-3]}\n",
    "no budget": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {batch_size: 4}\n",
    "two budgets": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 4, tokens: 100}\n",
    "empty methods": b"name: a\nmethods: []\nmodel: {depths: [2]}\ntrain: {steps: 1}\n",
    "method twice": b"name: a\nmethods: [pre, pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\n",
    "bad name": b"name: ../../etc\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\n",
    "depths and sizes": b"name: a\nmethods: [pre]\nmodel: {depths: [2], sizes: [58M]}\ntrain: {steps: 1}\n",
    "unknown size": b"name: a\nmethods: [pre]\nmodel: {sizes: [58m, 13B]}\ntrain: {steps: 1}\n",
    "heads do not divide": b"name: a\nmethods: [pre]\nmodel: {width: 30, heads: 4, depths: [2]}\ntrain: {steps: 1}\n",
    "bool as int": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nstack: true\n",
    "bad ledger": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nledger: ftp://x\n",
    "bad address": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nray: {address: 'not an address'}\n",
    "missing val file": (b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\n"
                         b"data: {source: text, path: /etc/hostname, val_path: /no/val.txt}\n"),
    "text source without path": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\ndata: {source: text}\n",
    "vocab too small": b"name: a\nmethods: [pre]\nmodel: {depths: [2], vocab: 100}\ntrain: {steps: 1}\n",
    "seeds zero": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1}\nseeds: 0\n",
    "cuda without gpu": b"name: a\nmethods: [pre]\nmodel: {depths: [2]}\ntrain: {steps: 1, device: cuda}\n",
    "override error": b"name: a\nmethods: [{name: pre, lr: {center: -1}}]\nmodel: {depths: [2]}\ntrain: {steps: 1}\n",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_inputs_are_rejected_cleanly(tmp_path, capsys, case):
    path = tmp_path / "sweep.yaml"
    path.write_bytes(HOSTILE[case])
    before = set(os.listdir(tmp_path))
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code == 2, (case, out.err, out.out)
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("error: ") for ln in lines), out.err
    assert all(len(ln) < 600 for ln in lines)
    assert "Traceback" not in out.err
    assert set(os.listdir(tmp_path)) == before


def test_cli_argument_errors(tmp_path, capsys):
    assert main(["status", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["optima", str(tmp_path)]) == 2
    assert "not a sweep directory" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(json.dumps({"store_version": 99}))
    assert main(["status", str(tmp_path)]) == 2
    assert "newer layerrope-sweeper" in capsys.readouterr().err
    assert main(["validate", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
