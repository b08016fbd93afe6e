"""A plan of a sweep directory that has results (issue 33): what is done, what a launch would add, at the rate the
sweep's own trials measured. On a simulated sweep (real controller, Ray Tune, ledger and store) whose trials run
at a planted 2e9 FLOP/s: the dry run must find that rate, not the default 2e10 per core."""

from __future__ import annotations

import json
import math

import pytest

import sweeper
from sweeper.cli import main
from sweeper.records.manifest import read_manifest
from sweeper.records.throughput import sweep_state
from tests.sweeper.sim.planted import PLANTED_FLOPS, SWEEP, planted_surface

SURFACE = planted_surface("{E: 2.1, A: 1.2, alpha: 0.4, lr_k: 0.01, lr_b: -0.7, c: 0.05, cliff: 2.0}")
PLANTED = PLANTED_FLOPS


@pytest.mark.slow
def test_a_dry_run_of_a_finished_sweep_uses_its_measured_rate(ray_session, tmp_path, capsys, monkeypatch) -> None:
    sweep, surface, out = tmp_path / "sweep.yaml", tmp_path / "surface.yaml", tmp_path / "out"
    sweep.write_text(SWEEP.format(name="measured", out=out))
    surface.write_text(SURFACE)
    assert main(["launch", str(sweep), "--simulate", str(surface)]) == 0
    capsys.readouterr()
    state = sweep_state(out)
    assert state is not None and all(state.done(cid) for cid in state.statuses) and len(state.statuses) == 4
    for rate in state.rates.values():  # every trial's FLOPs over its seconds: the planted rate
        assert math.isclose(rate.flops_per_s, PLANTED, rel_tol=1e-6)

    # Finished: nothing left to run (and no plan of 4 cells as if nothing had run).
    assert main(["launch", str(sweep), "--dry-run"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "nothing left to run: all 4 cells of this plan are finished" in text

    # Extended by an override: the warning, the new cells only, at the measured rate.
    assert main(["launch", str(sweep), "--dry-run", "seeds=[0, 1]", "model.depths=[2, 4, 8]"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "warning: a launch would extend the finished sweep" in text and "with 8 new cells" in text
    assert "already holds 4 finished cells of this plan" in text and "‡" in text
    assert main(["launch", str(sweep), "--dry-run", "--json", "seeds=[0, 1]", "model.depths=[2, 4, 8]"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["totals"]["done_cells"] == 4 and plan["totals"]["new_cells"] == 8 == len(plan["cells"])
    for row in plan["cells"]:  # a new seed: its size's rate; a new size (L8): its method's
        assert row["throughput"] == "sweep"
        assert math.isclose(row["sweep_flops_per_trial_s"], PLANTED, rel_tol=1e-6)
        stack = min(3, len(row["initial_grid"]))
        assert math.isclose(row["trial_hours"], stack * row["flops_per_point"] / PLANTED / 3600, rel_tol=1e-6)

    # sweeper.open(DIR).points(): each point's share of its stacked trial's training time; the shares sum to the
    # training the launch summed (the store keeps the whole trial's time on every member: trial_train_seconds).
    points = sweeper.open(out).points()
    assert points["train_seconds"].sum() < points["trial_train_seconds"].sum()  # stacks of 3: a third each
    by_trial: dict[str, float] = {}
    for row in points.iter_rows(named=True):
        by_trial[row["trial_id"]] = max(by_trial.get(row["trial_id"], 0.0), row["trial_train_seconds"])
    assert math.isclose(points["train_seconds"].sum(), sum(by_trial.values()), rel_tol=1e-9)
    launched = read_manifest(out).launches[-1].train_seconds
    assert launched is not None and math.isclose(points["train_seconds"].sum(), launched, rel_tol=1e-3)

    # The finished sweep's tables at 80 columns: nothing wider, nothing cut.
    monkeypatch.setenv("COLUMNS", "80")
    for command in ("optima", "status"):
        assert main([command, str(out)]) == 0
        shown = capsys.readouterr().out
        assert max(len(line) for line in shown.splitlines()) <= 80 and "…" not in shown
