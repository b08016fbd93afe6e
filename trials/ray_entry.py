"""The Ray Tune function trainable: `tune.Tuner(trainable, param_space={"spec": spec.to_dict()})`.

`config["spec"]` is `TrialSpec.to_dict()`; optional `config["export_dir"]` receives each
member's final weights (only the best ok member's with `config["export_members"] == "best"`). Every `StepReport` goes to `ray.tune.report(report.metrics())`
(`{"step", "tokens", "train_seconds", "done", "members": [...]}`, plus `results` — the
`PointResult` dicts — on the last one); a report made at a checkpoint carries it as a
`tune.Checkpoint`. A restarted or restored trial resumes from `ray.tune.get_checkpoint()`.

Start-up cost: this module imports neither torch nor Ray at import time; the first trial in an
actor pays for them, and Ray's actor reuse keeps them, together with the opened corpus (cached by
`trials.data`), for the next trial. Threads and compile workers are capped at the CPUs Ray assigned
the trial (`trials.cpu_share`), and torch's deterministic mode follows each trial's `train.deterministic`
(it is process-wide, and a reused actor runs trials of either kind).
(Inside Tune, report with `ray.tune.report`: `ray.train.report` raises there in Ray 2.60.)
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trials.spec import StepReport, TrialSpec


def _report_to_tune(report: StepReport) -> None:
    from ray import tune

    if report.checkpoint is not None:
        tune.report(report.metrics(), checkpoint=tune.Checkpoint.from_directory(report.checkpoint))
    else:
        tune.report(report.metrics())


def _restore_into(local: Path) -> None:
    """Copy the trial's last Tune checkpoint (if any) into `local` as its newest step folder."""
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return
    with checkpoint.as_directory() as folder:
        step = int(json.loads((Path(folder) / "state.json").read_text())["step"])
        shutil.copytree(folder, local / f"step-{step:09d}")


def preload() -> None:
    """Ray worker start-up hook (`runtime_env.worker_process_setup_hook`, set by `sweeper launch`):
    import torch and the training code while the driver is still setting Tune up, so that the first
    trial in a worker does not wait for them. A failure here must never stop a worker (the trial's own
    import then reports it)."""
    import contextlib

    with contextlib.suppress(Exception):
        import trials.train  # noqa: F401  (torch, models, data sources)


def configure_process(spec: TrialSpec) -> dict[str, Any]:
    """Before a trial is built in this Ray worker: threads and compile workers bounded by the trial's CPU
    share, and the deterministic mode set to the trial's choice. Returns what was set (`cpu_share.readings`)."""
    from trials.cpu_share import assigned_cpus, bound_to_share, readings
    from trials.determinism import set_deterministic

    cpus = assigned_cpus()
    settings = bound_to_share(cpus, torch_threads=spec.train.threads) if cpus else readings()
    set_deterministic(spec.train.deterministic)
    return settings


def trainable(config: dict[str, Any]) -> None:
    from trials.run import run_trial

    spec = TrialSpec.from_dict(config["spec"])
    configure_process(spec)
    local = Path(tempfile.mkdtemp(prefix="trial-ckpt-"))
    try:
        _restore_into(local)
        run_trial(spec, report=lambda r: _report_to_tune(r), checkpoint_dir=local, export_dir=config.get("export_dir"),
                  export_best_only=config.get("export_members") == "best")
    finally:
        shutil.rmtree(local, ignore_errors=True)
