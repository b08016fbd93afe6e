"""Issue 19, item 1: a cell's planned learning rates are durable before any of them starts.

A kill of the driver used to lose the part of a cell's grid that was only queued in memory
(or re-derive it from what had finished by then), so the relaunched sweep explored other
learning rates than the uninterrupted one. Each test builds the exact state a kill leaves
(real SQLite ledger, real store, the driver's `SweepRun` driven without Ray) and relaunches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from sweeper.records.ledger import OptunaLedger, storage_url
from sweeper.run.sweep_run import SweepRun
from tests.sweeper.run.driving import end, make_sweep, member, next_config, report, result

CELL = "pre/L2/s0"


def _raw(**lr: Any) -> dict[str, Any]:
    return {"name": "unit", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
            "train": {"steps": 30, "batch_size": 4}, "lr": {"grid": [1e-3, 3e-3, 1e-2], **lr}, "stack": 1,
            "concurrency": 2}


def _launch(tmp_path: Path, **lr: Any) -> SweepRun:
    sweep = make_sweep(tmp_path, _raw(**lr), concurrency=2)
    sweep.load(sweep.ledger.load(), {})
    return sweep


def _finish(sweep: SweepRun, tid: str, config: dict[str, Any], loss: float) -> None:
    pids, lrs = config["spec"]["point_ids"], config["spec"]["lrs"]
    sweep.on_trial_start(tid, pids)
    last = {"step": 30, "tokens": 3840, "train_seconds": 3.0, "done": True,
            "members": [member(pids[0], lrs[0], "ok", eval_loss=loss)],
            "results": [result(pids[0], lrs[0], "ok", loss=loss, objective=loss, init_loss=5.5, steps=30, tokens=3840)]}
    report(sweep, tid, pids, last)
    end(sweep, tid, pids, last, None)


def _queued(sweep: SweepRun) -> list[float]:
    return sorted(sweep.book.queue[CELL])


def test_a_kill_while_the_cell_was_being_created_loses_no_part_of_its_grid(tmp_path):
    # A kill after the ledger created the cell's study but before its attributes were written
    # (one commit each): the next launch found the study and never wrote them.
    sweep = make_sweep(tmp_path, _raw(), concurrency=2)
    storage = OptunaLedger(storage_url("sqlite", sweep.plan.sweep_dir)).storage
    storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], study_name=CELL)

    second = _launch(tmp_path)
    first = next_config(second, "t1")
    assert first["spec"]["lrs"] == [1e-3]  # killed here: 3e-3 and 1e-2 only queued in memory

    third = _launch(tmp_path)
    assert _queued(third) == [1e-3, 3e-3, 1e-2]
    assert third.ledger.cells()[CELL]["scheme"] == "pre"  # the cell's attributes were completed


def test_a_kill_between_two_refinements_keeps_the_second(tmp_path):
    sweep = _launch(tmp_path, refine=True, max_points=8)
    losses = {1e-3: 3.2, 3e-3: 3.0, 1e-2: 3.1}
    for n in range(3):
        config = next_config(sweep, f"t{n}")
        _finish(sweep, f"t{n}", config, losses[config["spec"]["lrs"][0]])
    refine = _queued(sweep)
    assert len(refine) == 2 and all(1e-3 < lr < 1e-2 for lr in refine)  # the half steps around 3e-3
    started = next_config(sweep, "t3")["spec"]["lrs"][0]  # killed here: the other half step was only queued

    again = _launch(tmp_path, refine=True, max_points=8)
    assert _queued(again) == refine  # the re-run and the other half step
    assert again.book.decisions[CELL].status == "running"


def test_a_prior_grid_is_not_re_derived_from_later_results(tmp_path):
    # The plan is read back from the ledger, whatever `first_grid` would say now (a prior from more
    # finished sizes, an edited YAML grid within the bounds).
    sweep = _launch(tmp_path)
    next_config(sweep, "t1")
    again = _launch(tmp_path, grid=[1e-3, 2e-3, 4e-3])
    assert _queued(again) == [1e-3, 3e-3, 1e-2]
