"""Item 2: worker faults. In one sweep (a subprocess driver on the session's Ray), with faults
injected through `trials.faults` (real exceptions and a real stuck process, see its docstring):

- the trial process of one point hangs mid-run and is SIGKILLed by this test (its pid comes
  from the fault log): Ray Tune restarts the trial from its last checkpoint, the point
  finishes with exactly the objective of an uninterrupted run;
- one point's training raises once (a transient crash): retried from its checkpoint, same
  objective as the uninterrupted run;
- one point's training raises every time: tried 1 + `retries` times, then recorded `failed`
  with the exception as its reason (ledger and store), and never an optimum.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from sweeper.records.store import load_curves, load_points

from .conftest import Driver, fired, ledger_trials, objectives, optima_json, wait_for, write_sweep

pytestmark = pytest.mark.slow

RETRIES = 2
WORKER_SWEEP = dict(methods="[pre]", depths="[1]", steps=60, stack=1, concurrency=2, retries=RETRIES,
                    lr="{grid: [3e-3, 1e-2, 3e-2], max_points: 6}")
CELL = "pre/L1/s0"
PERMANENT, TRANSIENT, HUNG = f"{CELL}/lr=0.003", f"{CELL}/lr=0.01", f"{CELL}/lr=0.03"


@pytest.fixture()
def uninterrupted(reference_run: dict[str, Any]) -> Path:
    """The same cell without faults: the session's reference run has it (`pre/L1/s0` of the kill test's sweep:
    the same model, data, seed, steps and learning-rate grid, one LR per trial), and a cell's points and
    objectives depend on that cell alone."""
    assert "pre/L1/s0" in load_points(reference_run["dir"])["cell_id"].to_list()
    return reference_run["dir"]


def test_killed_hung_and_crashing_trials(ray_session, tmp_path, uninterrupted, fault_plan, drivers, figures, capsys):
    capsys.readouterr()
    log = tmp_path / "fired.jsonl"
    fault_plan([
        {"point": PERMANENT, "step": 15, "kind": "raise", "log": str(log)},
        {"point": TRANSIENT, "step": 15, "kind": "raise", "once": str(tmp_path / "transient.once"), "log": str(log)},
        {"point": HUNG, "step": 25, "kind": "hang", "once": str(tmp_path / "hang.once"), "log": str(log)},
    ])
    yaml = write_sweep(tmp_path, "workers", **WORKER_SWEEP)
    sweep = tmp_path / "workers"
    driver = Driver(yaml, ray_session, tmp_path / "logs")
    drivers.append(driver)

    hang = wait_for(lambda: [f for f in fired(log) if f["kind"] == "hang"], 300, "the hung trial")[0]
    os.kill(hang["pid"], signal.SIGKILL)
    killed_at = time.time()
    summary = driver.summary()
    assert summary["counts"] == {"bracketed": 1}, summary

    points = load_points(sweep)
    state = dict(zip(points["point_id"].to_list(), points["state"].to_list()))
    reason = dict(zip(points["point_id"].to_list(), points["reason"].to_list()))
    reference, mine = objectives(uninterrupted), objectives(sweep)

    # The killed worker: its trial continued from its checkpoint (no step at or below it was reported
    # again), and the point ends exactly as in the uninterrupted run.
    hung_curve = load_curves(sweep, point_ids=[HUNG])
    after = hung_curve.filter(pl.col("time") > killed_at)
    steps_before = hung_curve.filter(pl.col("time") <= killed_at)["step"].max()
    assert after.height and after["step"].min() > 20, after  # checkpoints every 10 steps; killed at step 25
    assert after["attempt"].unique().to_list() == [1]
    assert state[HUNG] == "ok" and mine[HUNG] == reference[HUNG]

    # The transient crash: retried once from its checkpoint, same objective as uninterrupted.
    assert [f["point"] for f in fired(log) if f["kind"] == "raise"].count(TRANSIENT) == 1
    assert state[TRANSIENT] == "ok" and mine[TRANSIENT] == reference[TRANSIENT]

    # The permanent crash: 1 + retries attempts, then failed with the exception, in the ledger too.
    attempts = [f["point"] for f in fired(log) if f["kind"] == "raise"].count(PERMANENT)
    assert attempts == 1 + RETRIES
    assert state[PERMANENT] == "failed"
    assert "InjectedFault" in reason[PERMANENT] and "injected fault at step 15" in reason[PERMANENT], reason[PERMANENT]
    ledger = {t["point_id"]: t for t in ledger_trials(sweep)}
    assert ledger[PERMANENT]["state"] == "FAIL" and "injected fault at step 15" in ledger[PERMANENT]["reason"]
    assert all(t["state"] == "COMPLETE" for pid, t in ledger.items() if pid != PERMANENT)

    # Never an optimum: the cell's best is an `ok` point, and the failed point is no bracketing neighbour.
    cell = optima_json(sweep)["cells"][0]
    assert cell["best_lr"] != 3e-3 and cell["n_failed"] == 1 and cell["status"] == "bracketed"
    assert state[f"{CELL}/lr={cell['best_lr']:.6g}"] == "ok"
    common = [p for p in mine if p in reference and mine[p] is not None]
    assert all(mine[p] == reference[p] for p in common)

    figures.record(
        "worker_faults", order=2, title="Worker faults",
        does=("one sweep: a hung trial process SIGKILLed mid-run, a trial that raises once, a trial that raises "
              f"every time (retries: {RETRIES}); compared with the same sweep without faults"),
        worker_kills=1,
        killed_worker_resumed_from_step=int(after["step"].min()) - 10,
        killed_worker_steps_reported_before_kill=int(steps_before or 0),
        killed_and_transient_points_objective_equal_uninterrupted=True,
        permanent_crash_attempts=attempts,
        permanent_crash_state=state[PERMANENT],
        permanent_crash_reason=reason[PERMANENT],
        failed_points_counted_as_optimum=0,
        points_compared_with_uninterrupted=len(common),
        sweep_completed=summary["counts"],
    )
