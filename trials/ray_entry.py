"""The Ray Tune function trainable: `tune.Tuner(trainable, param_space={"spec": spec.to_dict()})`.

`config["spec"]` is `TrialSpec.to_dict()`; optional `config["export_dir"]` (a folder in the sweep's
storage, `config["storage"]`: `trials.storage.Storage`) receives each member's final weights (only the
best ok member's with `config["export_members"] == "best"`): written to the node's scratch, uploaded
before the last report. Every `StepReport` goes to `ray.tune.report(report.metrics())`
(`{"step", "tokens", "train_seconds", "done", "members": [...]}`, plus `results` — the
`PointResult` dicts — on the last one); a report made at a checkpoint carries it as a
`tune.Checkpoint`. A restarted or restored trial resumes from `ray.tune.get_checkpoint()`.

Start-up cost: this module imports neither torch nor Ray at import time; the first trial in an
actor pays for them, and Ray's actor reuse keeps them, together with the opened corpus (cached by
`trials.data`), for the next trial. Threads and compile workers are capped at the CPUs Ray assigned
the trial (`trials.cpu_share`), and torch's deterministic mode follows each trial's `train.deterministic`
(it is process-wide, and a reused actor runs trials of either kind).
(Inside Tune, report with `ray.tune.report`: `ray.train.report` raises there in Ray 2.60.)

Files: the trial's checkpoints and exports go to a scratch folder of the node (`config["scratch"]`,
`trials.storage.scratch_dir`), removed when the trial ends; Tune copies each checkpoint to the sweep's
storage when it is reported. On CUDA the process may use at most the trial's GPU share of the device's
memory (`torch.cuda.set_per_process_memory_fraction`), so one trial that overshoots runs out of memory
alone instead of killing its neighbours; between two trials of a reused actor its memory is released.

Infrastructure faults (`trials.infra`): a trial that runs out of memory, or whose storage fails, ends
with a last report carrying `fault` (kind, message) instead of raising, so that Tune does not retry the
same stack; the driver retries its points.
"""

from __future__ import annotations

import errno
import gc
import json
import shutil
from pathlib import Path
from typing import Any

from trials.infra import InfraFault, StorageError, kind_of_exception, one_line
from trials.spec import StepReport, TrialSpec
from trials.storage import Storage, scratch_dir

FULL_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _report_to_tune(report: StepReport, export: tuple[Path, Storage, str] | None = None) -> None:
    """Report to Tune; the last report (it carries the results) first uploads the trial's exported weights:
    under Tune the trial may end inside that report."""
    from ray import tune

    if export is not None and report.results is not None and export[0].is_dir():
        local, storage, target = export
        storage.upload(local, target)
    try:
        if report.checkpoint is not None:
            tune.report(report.metrics(), checkpoint=tune.Checkpoint.from_directory(report.checkpoint))
        else:
            tune.report(report.metrics())
    except OSError as exc:  # Tune copies the checkpoint to the storage inside report
        if exc.errno in FULL_DISK:
            raise  # a full disk stops the sweep (the driver's rule for every trial that dies of one), no retry
        raise StorageError(f"reporting to Ray Tune: {one_line(exc)}") from exc


def _report_fault(fault: InfraFault) -> None:
    from ray import tune

    tune.report(StepReport(step=0, tokens=0, train_seconds=0.0, members=[], done=False, fault=fault.to_dict()).metrics())


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


def configure_process(spec: TrialSpec, gpu_share: float | None = None) -> dict[str, Any]:
    """Before a trial is built in this Ray worker: threads and compile workers bounded by the trial's CPU
    share, the deterministic mode set to the trial's choice, and on CUDA the trial's share of the GPU's
    memory enforced (`gpu_share`: its `resources.GPU`). Returns what was set (`cpu_share.readings`)."""
    from trials.cpu_share import assigned_cpus, bound_to_share, readings
    from trials.determinism import set_deterministic

    cpus = assigned_cpus()
    settings = bound_to_share(cpus, torch_threads=spec.train.threads) if cpus else readings()
    set_deterministic(spec.train.deterministic)
    settings["gpu_memory_fraction"] = limit_gpu_memory(gpu_share)
    return settings


def memory_fraction(gpu_share: float | None) -> float | None:
    """The fraction of a GPU's memory a trial may allocate: its GPU share, when it asks for a part of one
    GPU (None: no GPU, or one or more whole GPUs)."""
    if gpu_share is None or not 0 < gpu_share < 1:
        return None
    return float(gpu_share)


def limit_gpu_memory(gpu_share: float | None) -> float | None:
    """`torch.cuda.set_per_process_memory_fraction(share)` on CUDA (Ray's GPU fractions are bookkeeping:
    without it one trial's overshoot takes the memory of the trials packed beside it). Returns the fraction set."""
    import torch

    fraction = memory_fraction(gpu_share)
    if not torch.cuda.is_available():
        return None
    torch.cuda.set_per_process_memory_fraction(fraction if fraction is not None else 1.0)
    return fraction


def release_memory() -> None:
    """Between two trials of a reused actor: free what the last one left (cycles, the CUDA cache)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def trainable(config: dict[str, Any]) -> None:
    from trials.data.cache import use_shared_cache
    from trials.run import run_trial

    spec = TrialSpec.from_dict(config["spec"])
    configure_process(spec, gpu_share=(config.get("resources") or {}).get("GPU"))
    storage = Storage.from_dict(config.get("storage"))
    use_shared_cache(storage)
    try:
        with scratch_dir(config.get("scratch")) as scratch:
            local, export_local = scratch / "checkpoints", scratch / "export"
            local.mkdir()
            target = config.get("export_dir")
            # A remote storage gets the exported weights from the scratch; a local one (a path every trial
            # of the sweep sees) is written in place.
            remote = target and storage is not None and not storage.is_local
            export = (export_local, storage, str(target)) if remote and storage is not None else None
            try:
                _restore_into(local)
                run_trial(spec, report=lambda r: _report_to_tune(r, export), checkpoint_dir=local,
                          export_dir=(export_local if export is not None else target),
                          export_best_only=config.get("export_members") == "best")
            except Exception as exc:
                kind = kind_of_exception(exc)
                if kind is None:
                    raise  # the trial's own crash: Tune retries it, then the driver records it failed
                _report_fault(InfraFault(kind, one_line(exc)))
    finally:
        use_shared_cache(None)
        release_memory()
