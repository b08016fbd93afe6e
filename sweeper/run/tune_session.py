"""The Ray Tune session of a launch: Ray started or joined, the last Tune run restored or a new
one begun, and the adapters through which Tune drives the sweep.

Tune talks to the sweep through three thin adapters over one `SweepRun`, each decoding Tune's
dicts into typed events once, here:
- `SweepSearcher` (a `Searcher`): `suggest` returns the next trial's config, None to wait, or
  `Searcher.FINISHED` once every cell is done (this module is the only one that knows that
  constant). Results do not come back through `on_trial_complete`: the Callback sees every
  report, the trial's config and its error text, so it records them all.
- `SweepCallback` (a `Callback`): every trial start, report, end and error goes to the sweep
  (and from there to the recorder, the only writer of ledger and store), then the live display.
- `SweepStopper` (a `Stopper`): ends trials whose points are all finished already (a restored
  trial replaying finished work).

Tune pickles these objects into its experiment state and unpickles them on restore, so they
hold no state of their own: they reach the sweep through `active()`, set by `TuneSession.run`.
The searcher's own checkpoint is a stub: the ledger is the only persistent state of a sweep,
and a relaunch rebuilds the queue from it. One sweep runs per driver process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import cloudpickle, tune
from ray.tune import Callback, ExperimentAnalysis, PlacementGroupFactory, Tuner
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from sweeper.core.errors import UserError
from sweeper.records.crash_points import durable_write
from sweeper.records.manifest import Manifest, TuneRun
from sweeper.records.storage_errors import is_storage_error
from sweeper.run.ray_address import check_address, token_auth_if_available
from sweeper.run.storage import remove_trial_checkpoints, sweep_storage, tune_identity
from sweeper.run.sweep_run import SWEEP_DONE, SweepRun, point_ids_of
from sweeper.search.planner import Plan
from trials.ray_entry import trainable as trial_trainable
from trials.spec import StepReport
from trials.storage import Storage
from sweeper.sim.surface import Pool as VirtualPool

ENV_DEFAULTS = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # our store replaces Tune's CSV/JSON/TensorBoard loggers
    # Tune's experiment snapshot serialises every trial of the run, finished ones included, so its
    # cost grows with the sweep. "auto": at least 10 s apart and at most ~5% of the driver's time.
    # A restore from an older snapshot only trains again what ran since (the ledger has the rest).
    "TUNE_GLOBAL_CHECKPOINT_S": "auto",
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000000",
}
# Tune forces an experiment snapshot whenever a trial has written `num_to_keep` checkpoints since
# the last one (so that a snapshot never names a deleted checkpoint). With 1, every checkpoint of
# every trial forced one: O(trials) of JSON per checkpoint. With 2, a trial must checkpoint twice
# between two periodic snapshots, which a real trial (minutes between checkpoints) never does.
KEEP_CHECKPOINTS = 2
PRELOAD_HOOK = "trials.ray_entry.preload"  # workers import torch and the trainer as they start, beside Tune's set-up

# ----------------------------------------------------------------------------------------------
# The adapters

_ACTIVE: SweepRun | None = None
_HOOKS: list[Callable[[SweepRun], None]] = []  # called after every Tune loop step (the live display)


def activate(sweep: SweepRun | None, hooks: list[Callable[[SweepRun], None]] | None = None) -> None:
    global _ACTIVE
    _ACTIVE = sweep
    _HOOKS[:] = list(hooks or [])


def active() -> SweepRun:
    if _ACTIVE is None:
        raise RuntimeError("no sweep is active in this process (sweeper.run.tune_session.activate was not called)")
    return _ACTIVE


def _stop_on_storage_fault(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a Tune hook; a storage fault (disk full, ledger locked) stops the sweep the way Ctrl-C
    does — Tune saves the experiment, in-flight trials stay resumable — instead of crashing the
    driver with a traceback. Any other exception propagates."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            if _ACTIVE is None or not is_storage_error(exc):
                raise
            if _ACTIVE.record_fault(exc):
                os.kill(os.getpid(), signal.SIGINT)  # Tune's own graceful stop (the driver maps SIGTERM the same way)
            return None

    return guarded


def _report(result: dict[str, Any] | None) -> StepReport | None:
    return StepReport.from_metrics(result) if result else None


class SweepSearcher(Searcher):
    """Suggests stacks of one cell's learning rates until every cell is done."""

    def __init__(self) -> None:
        super().__init__(metric=None, mode=None)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True

    @_stop_on_storage_fault
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        suggestion = active().suggest(trial_id)
        if suggestion is SWEEP_DONE:
            return Searcher.FINISHED
        return suggestion.to_tune() if suggestion is not None else None  # type: ignore[union-attr]

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Outcomes are recorded by `SweepCallback` (it sees the trial's config and error text)."""

    def save(self, checkpoint_path: str) -> None:
        # The ledger is the sweep's only persistent state; the driver rebuilds the queue from it.
        # Tune calls this while it writes its experiment snapshot: the snapshot's crash point.
        if _ACTIVE is not None:
            _ACTIVE.stats.tune_snapshots += 1
        with durable_write("tune:snapshot"):
            Path(checkpoint_path).write_text(json.dumps({"searcher": "layerrope-sweeper", "version": 1}))

    def restore(self, checkpoint_path: str) -> None:
        return None


class SweepStopper(Stopper):
    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return active().should_stop(trial_id, point_ids_of(result.get("config")))

    def stop_all(self) -> bool:
        return False


def _error_text(trial: Any) -> str:
    """The last line of the trial's traceback (the exception), for the point's `reason`."""
    path = getattr(trial, "error_file", None)
    text = ""
    if path and os.path.exists(path):
        try:
            lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
            text = lines[-1] if lines else ""
        except OSError:
            text = ""
    return (text or "the trial raised an error (see Ray's logs)")[:500]


class SweepCallback(Callback):
    """Every Tune trial event, decoded, to the sweep (whose recorder writes it)."""

    @_stop_on_storage_fault
    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        active().on_trial_start(trial.trial_id, point_ids_of(trial.config))

    @_stop_on_storage_fault
    def on_trial_restore(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        active().on_trial_start(trial.trial_id, point_ids_of(trial.config))

    @_stop_on_storage_fault
    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        active().on_report(trial.trial_id, point_ids_of(trial.config), StepReport.from_metrics(result))

    @_stop_on_storage_fault
    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        sweep = active()
        pids = point_ids_of(trial.config)
        sweep.on_trial_end(trial.trial_id, pids, _report(trial.last_result), None)
        if not sweep.should_stop(trial.trial_id, pids) or sweep.stopping:
            return
        # Every point of the trial is finished: its checkpoints (model and optimizer state of the
        # whole stack) can only waste disk from now on.
        remove_checkpoints(trial)

    @_stop_on_storage_fault
    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        sweep = active()
        before = sweep.fault
        sweep.on_trial_end(trial.trial_id, point_ids_of(trial.config), _report(trial.last_result), _error_text(trial))
        if before is None and sweep.fault is not None:  # the trial died of a full disk: stop like Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)

    @_stop_on_storage_fault
    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        sweep = active()
        for trial in abandoned(trials, sweep.trials.points, sweep.trials.restored):
            sweep.on_trial_end(trial.trial_id, point_ids_of(trial.config), None, ABANDONED_TEXT)
        sweep.flush()
        for hook in _HOOKS:
            hook(sweep)

    @_stop_on_storage_fault
    def on_experiment_end(self, trials: list, **info: Any) -> None:
        active().flush(force=True)


# Why a trial ended without any callback, worded so that `trials.infra.kind_of_text` reads it as a lost worker:
# its points are retried as after any infrastructure fault, never recorded `failed`.
ABANDONED_TEXT = ("ActorUnavailableError: Tune ended the trial without reporting it (its reused actor could not be "
                  "reset); its points are retried")


def abandoned(trials: list, live: dict[str, list[str]], restored: set[str]) -> list[Any]:
    """Trials of this launch that Tune has ended in ERROR while the sweep still counts them as live.

    Tune (2.x) gives a suggested trial an idle actor of an earlier trial when the resources match
    (`reuse_actors`); when that actor's reset fails ("Could not re-use actor ... reset_config()"), Tune marks
    the trial ERROR and stops it without calling the callbacks or the searcher. Its points would stay held
    forever and the sweep would wait for them with nothing running (seen after an injected OOM and a killed
    worker). Every ordinary error reaches `on_trial_error` in the same step as its ERROR status, which takes
    the trial out of `live`, so a trial found here was abandoned."""
    return [t for t in trials if t.status == "ERROR" and t.trial_id in live and t.trial_id not in restored]


def remove_checkpoints(trial: Any) -> None:
    """Delete a finished trial's checkpoints, on whatever filesystem its storage is (S3 included): Tune
    keeps the newest `KEEP_CHECKPOINTS` while a trial runs, and they can only waste space once its points
    are finished."""
    try:
        fs, trial_path = trial.storage.storage_filesystem, trial.path
    except Exception:
        return
    if fs is not None and trial_path:
        remove_trial_checkpoints(fs, trial_path)


def trial_resources(config: dict[str, Any]) -> Any:
    """Ray resources of one trial, from its config (they may depend on depth or size)."""
    return PlacementGroupFactory([dict(config.get("resources") or {"CPU": 1.0})])


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


# ----------------------------------------------------------------------------------------------
# Ray


def ensure_ray(address: str | None, plan: Plan, pool: VirtualPool | None = None) -> bool:
    """Start or join Ray; returns True when this call started it (and must shut it down).
    `pool`: start a local Ray with these virtual resources instead (a simulation: trials that
    only sleep, so workers skip the trainer's preload)."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": True, "logging_level": "ERROR"}
    if pool is not None:
        _start_local_ray(num_cpus=pool.cpus, num_gpus=pool.gpus, _system_config=virtual_pool_workers(), **kwargs)
        return True
    kwargs["runtime_env"] = {"env_vars": worker_env(), "worker_process_setup_hook": PRELOAD_HOOK}
    if address:
        check_address(address)
        token_auth_if_available()
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:
            raise UserError(
                f"ray address {address!r}: cannot connect ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                "is the cluster up (`ray status`), and is its auth token available here?"
            ) from None
    else:
        local = plan.config.ray
        _start_local_ray(num_cpus=local.num_cpus, num_gpus=local.num_gpus, **kwargs)
    return True


def _start_local_ray(**kwargs: Any) -> None:
    """`ray.init` of a local Ray; its failure to start (e.g. its node timing out on an overloaded
    machine) is a clear one-line error, not a traceback: nothing of the sweep was changed yet."""
    try:
        ray.init(include_dashboard=False, **kwargs)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        try:
            ray.shutdown()
        except Exception:
            pass  # whatever it had started is being torn down; the message below is what matters
        raise UserError(f"Ray could not start on this machine ({type(exc).__name__}: {first}); no result was "
                        "lost: relaunch the same command to resume (an overloaded machine can time out Ray's "
                        "start-up)") from None


def virtual_pool_workers() -> dict[str, Any]:
    """Ray's worker-pool settings for a virtual pool. Ray sizes its pool of idle Python workers by
    the node's CPU count: with a pool of 1,024 virtual CPU slots it would prestart and keep up to
    1,024 idle workers (each a Python process) on a machine with a few cores, starving the driver
    and the trials. Simulated trials only sleep, so no prestart, and idle workers beyond the real
    cores are let go. (Nor does a simulation give trials a runtime environment: a worker started
    for one would never serve a trial that has none.)"""
    cores = os.cpu_count() or 2
    return {"prestart_worker_first_driver": False, "enable_worker_prestart": False, "num_workers_soft_limit": cores}


def worker_env() -> dict[str, str]:
    """Environment of the trial processes. OpenMP's default spin-wait makes torch's intra-op threads
    10-25x slower when trials share cores (they busy-wait for each other's time slices); passive
    waiting costs nothing when a core is free. It must be set before torch loads, hence here."""
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def resolve_concurrency(plan: Plan) -> int:
    """`concurrency: auto` = as many trials as the cluster's resources could hold at once: the
    count of the cell asking least. Ray's resource accounting then packs trials of different
    fractions (a 0.5-GPU trial waits until half a GPU is free; 0.125-GPU trials fill the rest).
    Taking the cell asking most instead left most of a pool idle while the small cells ran."""
    setting = plan.config.concurrency
    if setting != "auto":
        return int(setting)
    return auto_concurrency([cell.resources for cell in plan.cells], ray.cluster_resources())


def auto_concurrency(requests: list[dict[str, float]], total: dict[str, float]) -> int:
    """The most trials of any one request that `total` holds at once (see `resolve_concurrency`)."""
    fits = []
    for resources in requests:
        per = [total.get(k, 0.0) / v for k, v in resources.items() if v > 0]
        fits.append(int(min(per)) if per else 1)
    if requests and not any(f >= 1 for f in fits):
        raise UserError(f"resources: a trial asks for {requests[0]} but the Ray cluster has {dict(total)}")
    return max([1, *fits])


# ----------------------------------------------------------------------------------------------
# Tune runs: where they live, whether the last one can be restored


def experiment_location(plan: Plan, manifest: Manifest, override: str | None = None) -> tuple[str, str | None, str]:
    """(the storage as the manifest names it, Tune run to restore or None, name of a new Tune run)."""
    storage_path = tune_identity(plan, override)
    tune_info = manifest.tune or TuneRun()
    last = tune_info.experiment if tune_info.storage == storage_path else None
    index = tune_info.index if last else 0
    return storage_path, last, f"run-{index + 1}"


# Files Tune reads back on a restore. Tune writes them in a staging folder and copies them to the
# storage path; a kill during that copy leaves a short file, and a restore over it fails every time.
# (Our searcher's own searcher-state-*.pkl is not among them: SweepSearcher.restore ignores it.)
TUNE_RESTORE_FILES = {"tuner.pkl": "pickle", "experiment_state-*.json": "json", "search_gen_state-*.json": "pickle"}


def damaged_tune_file(experiment_path: str, fs: Any = None) -> str | None:
    """The first file a Tune restore would read (the newest of each kind) that does not load; None if all do."""
    if fs is not None or "://" in experiment_path:  # remote storage: Tune checks it when it restores
        return None
    folder = Path(experiment_path)
    for pattern, kind in TUNE_RESTORE_FILES.items():
        found = sorted(folder.glob(pattern))
        if not found:
            continue
        newest = found[-1]  # Tune takes the greatest name: the names carry the session's timestamp
        try:
            with open(newest, "rb") as fh:
                json.load(fh) if kind == "json" else cloudpickle.load(fh)
        except Exception:
            return newest.name
    return None


def unfinished_trials(experiment_path: str, messages: list[str], fs: Any = None) -> dict[str, list[str]] | None:
    """Tune trials a restore would resume (trial id -> point ids), or None when not restorable.
    A run state damaged by a kill is not restored: its in-flight points re-run from the start.
    `fs`: the storage's filesystem when it is not this machine's."""
    try:
        if not Tuner.can_restore(experiment_path, storage_filesystem=fs):
            return None
        damaged = damaged_tune_file(experiment_path, fs)
        if damaged is not None:
            messages.append(f"Ray Tune's run state was cut short by the last stop ({damaged} does not load); "
                            "a new Tune run starts and the points that were in flight train again from the start")
            return None
        analysis = ExperimentAnalysis(experiment_path, storage_filesystem=fs)
    except Exception:
        return None
    return {t.trial_id: point_ids_of(t.config) for t in analysis.trials if t.status not in ("TERMINATED", "ERROR")}


class TuneRestoreFailed(BaseException):
    """Ray Tune logged that it could not restore its run state (it would then go on with an empty run).
    A BaseException, so that it passes through Tune's `except Exception` around the restore."""


@contextlib.contextmanager
def failed_restore_raises() -> Iterator[None]:
    """Turn Tune's "Failed to restore the run state." log record into TuneRestoreFailed."""

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Failed to restore the run state"):
                cause = record.exc_info[1] if record.exc_info else None
                raise TuneRestoreFailed(f"{type(cause).__name__}: {cause}" if cause else "no reason given")

    logger = logging.getLogger("ray.tune.execution.tune_controller")
    watch = Watch(level=logging.ERROR)
    logger.addHandler(watch)
    try:
        yield
    finally:
        logger.removeHandler(watch)


def fit_tuner(tuner: Any, sweep: SweepRun) -> None:
    try:
        tuner.fit()
    except Exception as exc:
        # Tune's own bookkeeping after its loop (the result grid reads every trial's error file)
        # fails on files written while a disk was full. The sweeper does not use it: after a
        # storage fault the fault is what to report, after a finished sweep it is noise.
        if sweep.fault is None and not sweep.all_done():
            raise
        sweep.messages.append(f"Ray Tune's result summary failed ({type(exc).__name__}); "
                              "ignored: every result is in the ledger and the store")


# ----------------------------------------------------------------------------------------------
# The session


@dataclass
class TuneSession:
    """Ray started or joined for one launch, and the Tune run it continues or starts."""

    plan: Plan
    started_ray: bool
    ray_seconds: float
    concurrency: int
    storage_path: str  # the storage as the manifest names it
    storage: Storage  # the sweep's folder in its storage: Tune's runs live there
    experiment: str  # the Tune run of this launch
    new_name: str  # the name a new Tune run takes
    claimed: dict[str, list[str]]  # restored Tune trial -> its point ids ({} for a new run)
    trainable: Any = trial_trainable  # what a Tune trial runs (its config: TrialConfig); see use_trainable

    @property
    def restored(self) -> bool:
        return bool(self.claimed)

    @property
    def pool_gpus(self) -> float:
        """The GPUs of the Ray cluster (or virtual pool) the trials run on."""
        return float(ray.cluster_resources().get("GPU", 0.0))

    def use_trainable(self, trainable: Callable[..., None], **parameters: Any) -> None:
        """Run `trainable` in the Tune trials (the simulated trial), its large arguments put in Ray's object store."""
        self.trainable = tune.with_parameters(trainable, **parameters) if parameters else trainable

    @property
    def tune_fs(self) -> Any:
        """The filesystem Tune is given: None for this machine's (Tune's own handling of local paths)."""
        return None if self.storage.is_local else self.storage.fs

    @classmethod
    def open(cls, plan: Plan, manifest: Manifest, address: str | None, messages: list[str],
             pool: VirtualPool | None = None, storage: Storage | None = None,
             started_ray: bool | None = None) -> TuneSession:
        """Start or join Ray (or start a virtual pool); find the last Tune run and whether it holds trials to
        resume. `started_ray`: Ray was started (or joined) already by this launch, which must shut it down."""
        started = time.time()
        joined = ensure_ray(address or plan.config.ray.address, plan, pool)
        ray_seconds = time.time() - started
        concurrency = resolve_concurrency(plan)
        storage = storage or sweep_storage(plan)
        storage_path, last, new_name = experiment_location(plan, manifest)
        fs = None if storage.is_local else storage.fs
        claimed = (unfinished_trials(f"{storage.root}/{last}", messages, fs) if last else None) or {}
        return cls(plan, joined or bool(started_ray), ray_seconds, concurrency, storage_path, storage,
                   last if claimed else new_name, new_name, claimed)

    def tune_info(self) -> TuneRun:
        """The manifest's record of a new Tune run."""
        return TuneRun(storage=self.storage_path, experiment=self.new_name, index=int(self.new_name.split("-")[1]))

    def _new_tuner(self, trainable: Any) -> Any:
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(search_alg=SweepSearcher(), num_samples=-1,
                                        max_concurrent_trials=self.concurrency, reuse_actors=True,
                                        trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=self.new_name, storage_path=self.storage.root, storage_filesystem=self.tune_fs,
                callbacks=[SweepCallback()], stop=SweepStopper(),
                verbose=0, failure_config=tune.FailureConfig(max_failures=self.plan.config.retries),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS), log_to_file=False,
            ),
        )

    def run(self, sweep: SweepRun, hooks: list[Callable[[SweepRun], None]],
            on_new_run: Callable[[int], None]) -> bool:
        """Run Tune until every cell is done or the sweep stops; True when it stopped early.

        When Tune cannot restore its last run (it would go on with an empty run and wait forever
        for the trials it lost), their points are re-queued and a new Tune run starts;
        `on_new_run(requeued points)` is called first (the manifest records the new run)."""
        trainable = tune.with_resources(self.trainable, trial_resources)
        restore_failure: str | None = None
        tuner: Any = None
        if self.restored:
            try:
                tuner = tune.Tuner.restore(f"{self.storage.root}/{self.experiment}", trainable=trainable,
                                           resume_unfinished=True, resume_errored=False, restart_errored=False,
                                           storage_filesystem=self.tune_fs)
            except Exception as exc:
                restore_failure = f"{type(exc).__name__}: {exc}"
        else:
            tuner = self._new_tuner(trainable)
        activate(sweep, hooks=hooks)
        main_thread = threading.current_thread() is threading.main_thread()
        previous_term = signal.getsignal(signal.SIGTERM)
        if main_thread:
            signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
        try:
            if not sweep.all_done():
                if tuner is not None:
                    try:
                        with failed_restore_raises():
                            fit_tuner(tuner, sweep)
                    except TuneRestoreFailed as exc:
                        restore_failure = str(exc)
                if restore_failure is not None:
                    requeued = sweep.forget_restored_trials("Ray Tune could not restore its last run")
                    sweep.messages.append(f"Ray Tune could not restore {self.experiment} ({restore_failure[:300]}); "
                                          f"a new Tune run ({self.new_name}) starts and the points that were in "
                                          "flight train again from the start")
                    self.experiment, self.claimed = self.new_name, {}
                    on_new_run(requeued)
                    fit_tuner(self._new_tuner(trainable), sweep)
            interrupted = not sweep.all_done()
            sweep.stopping = interrupted
        except KeyboardInterrupt:
            interrupted = True
            sweep.stopping = True
        finally:
            try:
                sweep.flush(force=True)
            except Exception as exc:
                if not is_storage_error(exc):
                    raise
                sweep.record_fault(exc)  # the rows stay unwritten; the ledger has them, the next launch adds them
            activate(None)
            if main_thread:
                signal.signal(signal.SIGTERM, previous_term)
        return interrupted

    def close(self) -> None:
        if self.started_ray:
            ray.shutdown()
