"""Terminal output keeps every character: text with square brackets (an extra's name `[hf]`, an interval
`[0, 1]`, something that looks like rich markup `[bold]`) prints verbatim in warnings, error reasons and
table cells, and `--json` outputs hold no markup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep
from sweeper.cli import main
from sweeper.run.display import LiveDisplay
from tests.sweeper.run.driving import make_sweep

BRACKETED = ("[hf]", "[0, 1]", "[bold]")
MARKUP = ("[/]", "[/bold]", "[yellow]", "[dim]", "[red]", "[green]")


def _sweep_yaml(tmp_path: Path) -> Path:
    raw = {
        "name": "brackets",
        "methods": ["pre"],
        "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
        "data": {"source": "text", "path": str(tmp_path / "corpus [hf]" / "[0, 1]" / "[bold].txt")},
        "train": {"steps": 30, "batch_size": 4},
        "resources": {"cpu": 1, "custom": {"[hf]": 1, "[0, 1]": 1, "[bold]": 1}},
    }
    path = tmp_path / "brackets.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_warning_and_a_table_cell_keep_their_brackets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _sweep_yaml(tmp_path)
    assert main(["launch", str(path), "--dry-run", "--wide"]) == 0  # every column, the resources too
    out = capsys.readouterr().out
    warning = next(line for line in out.splitlines() if line.startswith("warning: "))
    assert "corpus [hf]/[0, 1]/[bold].txt" in warning and "does not read the data" in warning
    resources = next(line for line in out.splitlines() if "CPU=1" in line)  # the plan table's row
    for text in BRACKETED:
        assert f"{text}=1" in resources
    assert not any(tag in out for tag in MARKUP)


def test_an_error_keeps_its_brackets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A storage fault as the live display of `sweeper launch` prints it (the path of the full disk)."""
    raw = {"name": "unit", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
           "train": {"steps": 30, "batch_size": 4}, "lr": {"points": 1, "refine": False}, "stack": 1}
    sweep = make_sweep(tmp_path, raw)
    sweep.load([])
    path = str(tmp_path / "[hf]" / "[0, 1]" / "[bold]" / "store")
    with LiveDisplay(sweep) as display:
        sweep.record_fault(OSError(28, "No space left on device", path))
        display.update(force=True)
    assert f"stopping: {path}: no space left on device" in capsys.readouterr().out


def test_json_outputs_hold_no_markup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "sweep"
    SyntheticSweep(root, SyntheticSpec(methods=("pre",), depths=(4, 8), lrs_per_cell=4, steps=40)).advance(0.7)
    for argv in (["launch", str(_sweep_yaml(tmp_path)), "--dry-run", "--json"], ["status", str(root), "--json"],
                 ["optima", str(root), "--format", "json"]):
        capsys.readouterr()
        assert main(argv) == 0
        out = capsys.readouterr().out
        json.loads(out)
        assert not any(tag in out for tag in MARKUP), argv
