"""The plan figures the docs quote are the ones `sweeper launch SWEEP.yaml --dry-run` prints today: every
`$ sweeper launch sweeps/X.yaml --dry-run` output shown, and the `stack: auto` tables of the throughput
page against the memory model. Bench and memory-peak caches are pointed at empty folders, so the plan
uses the documented assumptions, not this machine's measurements."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from sweeper.cli import main
from tests.docs.pages import DOCS, ROOT, blocks, pages, squeeze

GIB = 2**30


@pytest.fixture
def plan(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAYERROPE_SWEEPER_BENCH_CACHE", str(tmp_path / "bench.json"))
    monkeypatch.setenv("LAYERROPE_SWEEPER_CACHE", str(tmp_path / "cache"))

    def run(sweep: str, *overrides: str) -> dict:
        capsys.readouterr()
        assert main(["launch", str(ROOT / "sweeps" / sweep), "--dry-run", "--json", "--out", str(tmp_path / "plan" / sweep), *overrides]) == 0
        return json.loads(capsys.readouterr().out)

    return run


def _expected(totals: dict) -> list[str]:
    unit = totals["unit"]
    hours = totals[f"initial_{unit.lower()}_hours"]
    cap = totals[f"cap_{unit.lower()}_hours"]
    return [
        f"{totals['cells']} cells, {totals['initial_points']} points in the initial grids: "
        f"{totals['initial_flops']:.3g} training FLOPs = {hours:.3g} {unit}-hours; at most {totals['cap_flops']:.3g} "
        f"FLOPs ({cap:.3g} {unit}-hours) if every cell reached its trial cap",
        f"{totals['wall_hours_estimate']:.3g} h (pool-bound {totals['wall_hours_pool_bound']:.3g} h, "
        f"chain-bound {totals['wall_hours_chain_bound']:.3g} h)",
    ]


def _shown_dry_runs() -> list[tuple[str, str, str]]:
    """(where, sweep file, the output shown) for every `$ sweeper launch sweeps/X.yaml --dry-run` in a page."""
    shown = []
    for page in pages():
        for block in blocks(page):
            parts = re.split(r"(?m)^\$ ", block.text)
            for part in parts[1:]:
                command, _, output = part.partition("\n")
                match = re.fullmatch(r"sweeper launch sweeps/([\w-]+\.yaml) --dry-run\s*", command)
                if match and output.strip():
                    shown.append((block.where, match.group(1), output))
    return shown


def test_every_dry_run_shown_matches_the_plan(plan):
    shown = _shown_dry_runs()
    assert {sweep for _, sweep, _ in shown} >= {"depth.yaml", "quickstart.yaml"}
    gpu_machine = shutil.which("nvidia-smi") is not None  # a GPU changes stack: auto, hence the wall-time figures
    for where, sweep, output in shown:
        totals = plan(sweep)["totals"]
        cost, wall = _expected(totals)
        assert cost in squeeze(output), f"{where}: {sweep}'s plan is now: {cost}"
        if not gpu_machine:
            assert wall in squeeze(output), f"{where}: {sweep}'s wall-time estimate is now: {wall}"


def _table_after(text: str, heading: str) -> list[list[str]]:
    rows = []
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|---"):
            continue
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[1:]  # without the header row


@pytest.mark.parametrize(("sweep", "heading"), [
    ("depth.yaml", "`sweeps/depth.yaml` (width 128"),
    ("ladder.yaml", "`sweeps/ladder.yaml` (batch 512"),
])
def test_the_stack_auto_tables_match_the_memory_model(plan, sweep, heading):
    rows = _table_after((DOCS / "throughput.md").read_text(encoding="utf-8"), heading)
    h200 = {c["size"]: c for c in plan(sweep, "resources.gpu_memory_gb=140.4")["cells"] if c["method"] == "layerrope"}
    a100 = {c["size"]: c for c in plan(sweep, "resources.gpu_memory_gb=80")["cells"] if c["method"] == "layerrope"}
    assert len(rows) == len(h200) >= 4
    for size, share, member, h200_cell, a100_stack in rows:
        key = size if size in h200 else f"L{size}"
        auto = h200[key]["stack_auto"]
        gpu = h200[key]["resources"]["GPU"]
        assert share == (f"1/{round(1 / gpu)}" if gpu < 1 else f"{gpu:g}"), (sweep, size, share)
        assert member == f"{auto['member_bytes'] / GIB:.2f}", (sweep, size, member, auto["member_bytes"] / GIB)
        assert h200_cell == (f"{auto['stack']}: {auto['stack_bytes'] / GIB:.1f} of {auto['budget_bytes'] / GIB:.1f}"), (
            sweep, size, h200_cell)
        assert a100_stack == str(a100[key]["stack_auto"]["stack"]), (sweep, size, a100_stack)
