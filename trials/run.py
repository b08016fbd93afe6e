"""`run_trial`: train one trial in this process, with or without Ray.

    results = run_trial(spec, report=print, checkpoint_dir="ckpt", export_dir="weights")

Resumes from `checkpoint_dir` when it holds a checkpoint of the same spec; checkpoints there
every `train.checkpoint_every` steps and at the end; calls `report(StepReport)` every
`train.report_every` steps, at every evaluation and checkpoint, and at the end; writes each
member's final weights to `export_dir/<i>/` when the trial has finished. `should_stop()` is
asked before every step; when it answers True the trial checkpoints and returns, with its
unfinished members `failed` ("stopped at step s of N"), ready to be resumed.

Fault injection for reliability tests: see `trials.faults` (off unless LAYERROPE_SWEEPER_FAULTS is set).

Bad input (a missing file, a too-small vocabulary, an optional extra not installed) raises
`trials.errors.TrialInputError` with a one-line message naming the field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from trials import faults
from trials.spec import PointResult, StepReport, TrialSpec
from trials.train import Trial


def make_trial(spec: TrialSpec) -> Trial:
    """The `Trial` that trains `spec`: a plain one, unless LAYERROPE_SWEEPER_FAULTS names one of its
    points (the reliability tests' injected faults, `trials.faults`)."""
    if os.environ.get(faults.ENV):
        return faults.faulty_trial(spec) or Trial(spec)
    return Trial(spec)


def run_trial(
    spec: TrialSpec,
    *,
    report: Callable[[StepReport], None] | None = None,
    checkpoint_dir: str | Path | None = None,
    export_dir: str | Path | None = None,
    should_stop: Callable[[], bool] | None = None,
    export_best_only: bool = False,
) -> list[PointResult]:
    trial = make_trial(spec)  # a plain Trial unless LAYERROPE_SWEEPER_FAULTS asks for injected faults (tests)
    return trial.run(report=report, checkpoint_dir=checkpoint_dir, export_dir=export_dir, should_stop=should_stop,
                     export_best_only=export_best_only)
