"""Drive a `SweepRun` as Ray Tune's adapters do (their dicts decoded the same way), without Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeper.records.ledger import OptunaLedger, storage_url
from sweeper.records.store import StoreWriter
from sweeper.run.sweep_run import SWEEP_DONE, SweepDone, SweepRun
from sweeper.search.planner import build_plan
from sweeper.spec.schema import validate_data
from trials.spec import StepReport


def make_sweep(tmp_path: Path, raw: dict[str, Any], *, concurrency: int = 2, host_memory: int | None = None,
               **kwargs: Any) -> SweepRun:
    plan = build_plan(validate_data(raw), output=str(tmp_path / "sweep"))
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    ledger = OptunaLedger(storage_url("sqlite", plan.sweep_dir))
    return SweepRun(plan, ledger, StoreWriter(plan.sweep_dir), concurrency=concurrency, host_memory=host_memory,
                    **kwargs)


def next_config(sweep: SweepRun, tune_trial_id: str) -> dict[str, Any] | SweepDone | None:
    """What the Searcher hands Tune: the trial's config, None to wait, or SWEEP_DONE."""
    suggestion = sweep.suggest(tune_trial_id)
    if suggestion is None or suggestion is SWEEP_DONE:
        return suggestion  # type: ignore[return-value]
    return suggestion.to_tune()  # type: ignore[union-attr]


def member(pid: str, lr: float, state: str = "running", eval_loss: float | None = None, train_loss: float = 4.0,
           **extra: Any) -> dict[str, Any]:
    return {"point_id": pid, "lr": lr, "train_loss": train_loss, "eval_loss": eval_loss, "state": state,
            "diverged_step": extra.get("diverged_step"), "reason": extra.get("reason")}


def result(pid: str, lr: float, outcome: str, **fields: Any) -> dict[str, Any]:
    """A member's final result as the trial reports it (`PointResult.to_dict()`)."""
    out = {"point_id": pid, "lr": lr, "outcome": outcome, "loss": None, "objective": None, "accuracy": None,
           "init_loss": None, "diverged_step": None, "reason": None, "steps": 0, "tokens": 0, "train_seconds": 0.0,
           "corpus": "c1", "params": 0, "params_nonembed": 0, "flops_per_token": 0.0}
    out.update(fields)
    return out


def report(sweep: SweepRun, tune_trial_id: str, pids: list[str], metrics: dict[str, Any]) -> None:
    """A Tune result (the trial's `StepReport.metrics()`), as the Callback passes it on."""
    sweep.on_report(tune_trial_id, pids, StepReport.from_metrics(metrics))


def end(sweep: SweepRun, tune_trial_id: str, pids: list[str], last: dict[str, Any] | None, error: str | None) -> None:
    """A trial's end, with its last result (None if it never reported)."""
    sweep.on_trial_end(tune_trial_id, pids, StepReport.from_metrics(last) if last else None, error)
