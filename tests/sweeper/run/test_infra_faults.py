"""Infrastructure faults are retried, never a learning rate's result (issue 29, item 3), without Ray:
the driver's `SweepRun` fed the events Tune's adapters decode, with a clock the test moves, a real
ledger (SQLite) and store; bracketing and the classification of error texts directly.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from sweeper.core.grid import GridPoint, LRPolicy
from sweeper.core.states import CellStatus, PointState
from sweeper.records.ledger import storage_url
from sweeper.records.store import load_points
from sweeper.run.sweep_run import SWEEP_DONE, SweepRun
from sweeper.search.bracketing import decide
from tests.sweeper.run.driving import end, make_sweep, next_config
from trials.infra import kind_of_text

CELL = "pre/L2/s0"
OOM = {"kind": "oom", "message": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_state(tmp_path: Path, clock: Clock, **overrides) -> SweepRun:
    raw = {"name": "infra", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
           "train": {"steps": 30, "batch_size": 8}, "lr": {"center": 3e-3, "points": 3, "refine": False},
           "stack": 3, "infra_retries": 2, "infra_backoff": 10, "keep_weights": "none"}
    raw.update(overrides)
    return make_sweep(tmp_path, raw, concurrency=4, clock=clock)


def fault_report(step: int = 0) -> dict:
    return {"step": step, "tokens": 0, "train_seconds": 0.0, "done": False, "members": [], "fault": OOM}


def test_out_of_memory_splits_the_stack_backs_off_and_ends_infra_failed_never_failed(tmp_path):
    clock = Clock()
    state = make_state(tmp_path, clock)
    state.load([])
    config = next_config(state, "t1")
    pids = config["spec"]["point_ids"]
    assert len(pids) == 3
    state.on_trial_start("t1", pids)
    end(state, "t1", pids, fault_report(), None)  # the trial's own fault report (trials.ray_entry)

    rows = state.book.points[CELL]
    assert {rows[p].state for p in pids} == {PointState.QUEUED}, "an OOM is never the learning rate's result"
    assert all("retry 1 of 2 in 10 s" in rows[p].reason for p in pids)
    assert state.stats.infra_faults == {"oom": 1}
    assert next_config(state, "t2") is None  # the backoff: nothing before 10 s
    clock.now += 10
    first = next_config(state, "t2")
    second = next_config(state, "t3")
    # two trials for the points of one: the cell's stacks are halved (3 -> 2)
    assert [len(first["spec"]["point_ids"]), len(second["spec"]["point_ids"])] == [2, 1]
    assert sorted(first["spec"]["point_ids"] + second["spec"]["point_ids"]) == sorted(pids)

    # a one-point stack out of memory: its micro-batch is halved (a divisor of the batch, 8 -> 4)
    alone = second["spec"]["point_ids"]
    state.on_trial_start("t3", alone)
    end(state, "t3", alone, fault_report(5), None)
    clock.now += 20  # the second retry waits twice as long
    third = next_config(state, "t4")
    assert third["spec"]["point_ids"] == alone and third["spec"]["train"]["micro_batch"] == 4

    # persistent: after infra_retries (2) the point ends infra_failed, and its cell waits for it
    state.on_trial_start("t4", alone)
    end(state, "t4", alone, fault_report(5), None)
    assert state.book.points[CELL][alone[0]].state is PointState.INFRA_FAILED
    # the other two finish ok
    both = first["spec"]["point_ids"]
    state.on_trial_start("t2", both)
    last = {"step": 30, "tokens": 30 * 256, "train_seconds": 1.0, "done": True,
            "members": [{"point_id": p, "lr": lr, "train_loss": 3.0, "eval_loss": 3.0 + i, "state": "ok"}
                        for i, (p, lr) in enumerate(zip(both, first["spec"]["lrs"]))],
            "results": [{"point_id": p, "lr": lr, "outcome": "ok", "loss": 3.0 + i, "objective": 3.0 + i,
                         "accuracy": None, "init_loss": 5.5, "diverged_step": None, "reason": None, "steps": 30,
                         "tokens": 30 * 256, "train_seconds": 1.0, "corpus": "c", "params": 1, "params_nonembed": 1,
                         "flops_per_token": 1.0} for i, (p, lr) in enumerate(zip(both, first["spec"]["lrs"]))]}
    end(state, "t2", both, last, None)
    decision = state.book.decisions[CELL]
    assert decision.status == CellStatus.INFRA_FAILED and not decision.next_lrs  # not bracketed past the hole
    assert state.status(CELL) == "infra_failed"
    assert next_config(state, "t5") is SWEEP_DONE  # nothing else to do in this launch
    state.flush(force=True)
    stored = load_points(state.plan.sweep_dir)
    latest = stored.sort("seq").group_by("point_id").last()
    assert dict(zip(latest["point_id"], latest["state"]))[alone[0]] == "infra_failed"
    assert "failed" not in set(latest["state"])
    study = optuna.load_study(study_name=CELL, storage=storage_url("sqlite", state.plan.sweep_dir))
    entry = [t for t in study.trials if t.user_attrs.get("point_id") == alone[0]][-1]
    assert entry.state == optuna.trial.TrialState.FAIL and entry.user_attrs["state"] == "infra_failed"

    # a relaunch proposes that learning rate again, without --retry-failed
    again = make_state(tmp_path, clock)
    counts = again.load(again.ledger.load())
    assert counts["infra_retried"] == 1 and counts["retried"] == 0
    assert again.book.points[CELL][alone[0]].state is PointState.QUEUED
    retry = next_config(again, "r1")
    assert retry["spec"]["point_ids"] == alone


def test_a_lost_actor_after_tunes_retries_is_retried_and_a_crash_is_failed(tmp_path):
    clock = Clock()
    state = make_state(tmp_path, clock, stack=1)
    state.load([])
    a, b = next_config(state, "t1"), next_config(state, "t2")
    for tid, config in (("t1", a), ("t2", b)):
        state.on_trial_start(tid, config["spec"]["point_ids"])
    end(state, "t1", a["spec"]["point_ids"], None,
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    end(state, "t2", b["spec"]["point_ids"], None, "trials.faults.InjectedFault: injected fault at step 15")
    assert state.book.points[CELL][a["spec"]["point_ids"][0]].state is PointState.QUEUED
    assert state.book.points[CELL][b["spec"]["point_ids"][0]].state is PointState.FAILED
    assert state.stats.infra_faults == {"lost": 1}


def test_error_texts_are_classified():
    assert kind_of_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB") == "oom"
    assert kind_of_text("RuntimeError: CUDA error: out of memory") == "oom"
    assert kind_of_text("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.") == "oom"
    assert kind_of_text("ray.exceptions.NodeDiedError: the node died") == "lost"
    assert kind_of_text("ray.exceptions.WorkerCrashedError: The worker died unexpectedly") == "lost"
    assert kind_of_text("trials.infra.StorageError: storage s3://b: cannot upload") == "storage"
    assert kind_of_text("the actor's node was preempted") == "preempted"
    for own in ("trials.faults.InjectedFault: injected fault at step 15", "ValueError: NaN in the loss",
                "KeyError: 'spec'", None, ""):
        assert kind_of_text(own) is None


def test_bracketing_skips_infra_failed_points_and_never_ends_the_cell_on_them():
    policy = LRPolicy(center=1e-2, points=3, factor=2, refine=False)
    ok = lambda lr, obj: GridPoint(lr, PointState.OK, obj)  # noqa: E731
    hole = GridPoint(0.02, PointState.INFRA_FAILED)
    # best at 0.01 with an ok neighbour below and the infrastructure's hole above: not bracketed, no proposal
    # past the hole (the cell waits for it), not failed
    d = decide([ok(0.005, 3.2), ok(0.01, 3.0), hole], policy)
    assert d.status == "infra_failed" and d.next_lrs == () and d.neighbours[1] is None
    assert d.best is not None and d.best.lr == 0.01
    # a failed point (a crash) in the same place is walked past
    crash = decide([ok(0.005, 3.2), ok(0.01, 3.0), GridPoint(0.02, PointState.FAILED)], policy)
    assert crash.status == "running" and crash.next_lrs == (0.04,)
    # only infrastructure holes: not "every point failed"
    only = decide([GridPoint(lr, PointState.INFRA_FAILED) for lr in (0.005, 0.01, 0.02)], policy)
    assert only.status == "infra_failed" and not CellStatus(only.status).learned_nothing
    # an active point still comes first: running
    assert decide([ok(0.01, 3.0), hole, GridPoint(0.005, PointState.RUNNING)], policy).status == "running"
    assert PointState.INFRA_FAILED.is_finished and not PointState.INFRA_FAILED.counts_as_diverged
    assert PointState.INFRA_FAILED.retried_on_relaunch and not PointState.FAILED.retried_on_relaunch


class TuneTrial:
    """The fields of a `ray.tune.experiment.Trial` that `SweepCallback.on_step_end` reads."""

    def __init__(self, trial_id: str, config: dict, status: str) -> None:
        self.trial_id, self.config, self.status = trial_id, config, status


def test_a_trial_tune_abandons_without_a_callback_is_retried_not_waited_for(tmp_path):
    """Tune marks a trial ERROR without any callback when the idle actor it reuses cannot be reset; the
    callback's step hook finds it, and its points are retried as after a lost worker (never `failed`, never
    held forever: a sweep waiting for them would wait with nothing running)."""
    from sweeper.run.tune_session import SweepCallback, activate

    clock = Clock()
    state = make_state(tmp_path, clock)
    state.load([])
    config = next_config(state, "t1")
    pids = config["spec"]["point_ids"]
    activate(state)
    try:
        callback = SweepCallback()
        callback.on_step_end(1, [TuneTrial("t1", config, "PENDING")])
        assert "t1" in state.trials.points  # not yet started: still held
        callback.on_step_end(2, [TuneTrial("t1", config, "ERROR")])  # reset failed: ERROR, no callback
        assert "t1" not in state.trials.points
        rows = state.book.points[CELL]
        assert {rows[p].state for p in pids} == {PointState.QUEUED}
        assert all("retry 1 of 2" in rows[p].reason for p in pids)
        assert state.stats.infra_faults == {"lost": 1}
        callback.on_step_end(3, [TuneTrial("t1", config, "ERROR")])  # seen again: handled once
        assert state.stats.infra_faults == {"lost": 1}
    finally:
        activate(None)
