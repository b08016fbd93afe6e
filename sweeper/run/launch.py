"""`sweeper launch`: plan the cells, prepare the sweep directory, run the sweep on Ray Tune.

Order of work (nothing is written until every check has passed):
1. validate the YAML and plan the cells (`sweeper.spec.schema`, `sweeper.search.planner`);
2. if the sweep directory exists: refuse settings that would mix incompatible results
   (per-cell fingerprints in the manifest), allow new methods, sizes and seeds;
3. write the manifest and a copy of the YAML; open the ledger (the record) and the store
   (rebuilt from the ledger if damaged);
4. start or join Ray; restore the last Tune experiment when it holds unfinished trials
   (they continue from their checkpoints), else start a new one; points the ledger shows
   active but no restored trial holds are re-run;
5. one Tuner: the custom Searcher proposes stacks, the Callback records everything;
   a live table per cell; Ctrl-C stops cleanly (the next launch resumes);
6. a summary: wall time, summed training time, utilisation of the trial slots.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.errors import UserError
from sweeper.search.planner import Plan, compat_diff, fingerprint_of
from sweeper.records.store import MANIFEST, STORE_VERSION, is_sweep_dir, read_manifest, write_json_atomic

ENV_DEFAULTS = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # our store replaces Tune's CSV/JSON/TensorBoard loggers
    "TUNE_GLOBAL_CHECKPOINT_S": "2",  # experiment snapshots: how stale a restore can be
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1000000",
}


# ----------------------------------------------------------------------------------------------
# The sweep directory


def check_output_dir(plan: Plan) -> dict[str, Any] | None:
    """The existing manifest, after checking that this plan may continue it; None for a new sweep."""
    path = plan.sweep_dir
    if not path.exists():
        return None
    if not path.is_dir():
        raise UserError(f"{path}: exists and is not a directory; choose another output (--output)")
    if not is_sweep_dir(path):
        if any(path.iterdir()):
            raise UserError(f"{path}: exists, is not empty and is not a sweep directory; choose another output (--output)")
        return None
    manifest = read_manifest(path)
    check_compatible(plan, manifest)
    return manifest


def check_compatible(plan: Plan, manifest: dict[str, Any]) -> None:
    """Refuse a relaunch whose cells would mix incompatible results."""
    problems: dict[str, list[str]] = {}
    old_cells = manifest.get("cells") or {}
    for cell in plan.cells:
        old = old_cells.get(cell.cell_id)
        if old and old.get("fingerprint") != cell.fingerprint:
            diff = "; ".join(compat_diff(old.get("compat") or {}, cell.compat)[:4]) or "settings changed"
            problems.setdefault(diff, []).append(cell.cell_id)
    if problems:
        details = []
        for diff, cells in problems.items():
            which = cells[0] if len(cells) == 1 else f"{len(cells)} cells ({cells[0]}, ...)"
            details.append(f"{which}: {diff}")
        raise UserError(
            f"{plan.sweep_dir}: this YAML changes settings of cells that already have results, which would mix "
            "incomparable results; restore the settings, or give a new output directory (--output)",
            details=details,
        )
    url = manifest.get("ledger")
    from sweeper.records.ledger import storage_url

    new_url = storage_url(plan.config.ledger, plan.sweep_dir)
    if url and plan.config.ledger != "sqlite" and url != new_url:
        raise UserError(f"ledger: this sweep's ledger is {url}; the YAML names {new_url}")


def manifest_for(plan: Plan, old: dict[str, Any] | None, ledger_url: str) -> dict[str, Any]:
    now = time.time()
    manifest = dict(old or {})
    manifest.update(store_version=STORE_VERSION, name=plan.config.name, updated=now, ledger=ledger_url)
    manifest.setdefault("created", now)
    manifest.setdefault("corpus", None)
    cells = dict(manifest.get("cells") or {})
    for cell in plan.cells:
        cells[cell.cell_id] = {
            "fingerprint": cell.fingerprint, "compat": cell.compat, "method": cell.method, "scheme": cell.scheme,
            "family": cell.family, "size": cell.size, "depth": cell.depth, "width": cell.width, "seed": cell.seed,
            "x": cell.x, "params": cell.params, "params_nonembed": cell.params_nonembed,
            "flops_per_token": cell.flops_per_token, "steps": cell.steps_per_point, "tokens": cell.tokens_per_point,
        }
    manifest["cells"] = cells
    shared = {k: plan.cells[0].compat[k] for k in ("data", "divergence")} if plan.cells else {}
    manifest["compat_key"] = fingerprint_of(shared)
    model = plan.config.model
    # "loops": a loop-count sweep of the looped family; the store's `depth` column then holds the loop count
    manifest["x"] = "depth" if model.depths is not None else "loops" if model.loops is not None else "params"
    return manifest


def save_yaml_copy(sweep_dir: Path, source: Path | None) -> str | None:
    """Keep the YAML as launched: sweep.yaml, then sweep.N.yaml whenever it changes."""
    if source is None:
        return None
    text = source.read_text()
    copies = sorted(sweep_dir.glob("sweep*.yaml"), key=lambda p: _copy_index(p.name))
    if copies and copies[-1].read_text() == text:
        return copies[-1].name
    name = "sweep.yaml" if not copies else f"sweep.{_copy_index(copies[-1].name) + 1}.yaml"
    (sweep_dir / name).write_text(text)
    return name


def _copy_index(name: str) -> int:
    parts = name.split(".")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 1


def open_store(sweep_dir: Path, ledger: Any, messages: list[str]) -> Any:
    """The store writer; a damaged store is set aside and rebuilt from the ledger."""
    from sweeper.records.repair import rebuild_store
    from sweeper.records.store import StoreWriter, load_cells, load_curves

    try:
        writer = StoreWriter(sweep_dir)  # reads every point chunk
        load_curves(sweep_dir)  # and every curve chunk and the cells: a damaged one is found now, not by a reader
        load_cells(sweep_dir)
        return writer
    except UserError as exc:
        moved = rebuild_store(sweep_dir, ledger)
        messages.append(f"store was damaged ({exc.message.split(';')[0]}); rebuilt from the ledger, old copy in {moved}")
        return StoreWriter(sweep_dir)


# ----------------------------------------------------------------------------------------------
# Ray


def ensure_ray(address: str | None, plan: Plan) -> bool:
    """Start or join Ray; returns True when this call started it (and must shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": True, "logging_level": "ERROR",
                              "runtime_env": {"env_vars": worker_env(), "worker_process_setup_hook": PRELOAD_HOOK}}
    if address:
        _token_auth_if_available()
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:
            raise UserError(
                f"ray address {address!r}: cannot connect ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                "is the cluster up (`ray status`), and is its auth token available here?"
            ) from None
    else:
        local = plan.config.ray
        ray.init(num_cpus=local.num_cpus, num_gpus=local.num_gpus, include_dashboard=False, **kwargs)
    return True


PRELOAD_HOOK = "trials.ray_entry.preload"  # workers import torch and the trainer as they start, beside Tune's set-up


def worker_env() -> dict[str, str]:
    """Environment of the trial processes. OpenMP's default spin-wait makes torch's intra-op threads
    10-25x slower when trials share cores (they busy-wait for each other's time slices); passive
    waiting costs nothing when a core is free. It must be set before torch loads, hence here."""
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def _token_auth_if_available() -> None:
    """Ray ≥ 2.59 clusters started with `ray start --head` require token authentication from
    every joining process; a driver opts in with RAY_AUTH_MODE=token. Opt in when a token is at
    hand (a token-mode driver also joins clusters without authentication)."""
    if os.environ.get("RAY_AUTH_MODE"):
        return
    token_file = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(token_file):
        os.environ["RAY_AUTH_MODE"] = "token"


def resolve_concurrency(plan: Plan) -> int:
    """`concurrency: auto` = as many trials as the cluster's resources hold at once."""
    import ray

    setting = plan.config.concurrency
    if setting != "auto":
        return int(setting)
    total = ray.cluster_resources()
    fits = []
    for cell in plan.cells:
        per = [total.get(k, 0.0) / v for k, v in cell.resources.items() if v > 0]
        fits.append(int(min(per)) if per else 1)
    slots = max(1, min(fits) if fits else 1)
    if not any(total.get(k, 0.0) >= v for cell in plan.cells for k, v in cell.resources.items() if v > 0):
        needed = plan.cells[0].resources if plan.cells else {}
        raise UserError(f"resources: a trial asks for {needed} but the Ray cluster has {dict(total)}")
    return slots


def experiment_location(plan: Plan, manifest: dict[str, Any]) -> tuple[str, str | None, str]:
    """(storage path, experiment to restore or None, name of a new experiment)."""
    storage = plan.config.ray.storage
    storage_path = f"{storage.rstrip('/')}/{plan.config.name}" if storage else str(plan.sweep_dir / "ray")
    tune_info = manifest.get("tune") or {}
    last = tune_info.get("experiment") if tune_info.get("storage") == storage_path else None
    index = int(tune_info.get("index", 0)) if last else 0
    return storage_path, last, f"run-{index + 1}"


# Files Tune reads back on a restore. Tune writes them in a staging folder and copies them to the
# storage path; a kill during that copy leaves a short file, and a restore over it fails every time.
# (Our searcher's own searcher-state-*.pkl is not among them: SweepSearcher.restore ignores it.)
TUNE_RESTORE_FILES = {"tuner.pkl": "pickle", "experiment_state-*.json": "json", "search_gen_state-*.json": "pickle"}


def damaged_tune_file(experiment_path: str) -> str | None:
    """The first file a Tune restore would read (the newest of each kind) that does not load; None if all do."""
    from ray import cloudpickle

    if "://" in experiment_path:  # remote storage: Tune checks it when it restores
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


def unfinished_trials(experiment_path: str, messages: list[str]) -> dict[str, list[str]] | None:
    """Tune trials a restore would resume (trial id -> point ids), or None when not restorable.
    A run state damaged by a kill is not restored: its in-flight points re-run from the start."""
    from ray.tune import ExperimentAnalysis, Tuner

    from sweeper.run.tune_adapters import point_ids

    try:
        if not Tuner.can_restore(experiment_path):
            return None
        damaged = damaged_tune_file(experiment_path)
        if damaged is not None:
            messages.append(f"Ray Tune's run state was cut short by the last stop ({damaged} does not load); "
                            "a new Tune run starts and the points that were in flight train again from the start")
            return None
        analysis = ExperimentAnalysis(experiment_path)
    except Exception:
        return None
    return {t.trial_id: point_ids(t.config) for t in analysis.trials if t.status not in ("TERMINATED", "ERROR")}


def trainable_entry() -> Any:
    from trials.ray_entry import trainable

    return trainable


# ----------------------------------------------------------------------------------------------
# Launch


@dataclass
class LaunchSummary:
    sweep_dir: str
    wall_seconds: float
    ray_start_seconds: float
    train_seconds: float
    slots: int
    trials: int
    points_finished: int
    counts: dict[str, int]
    resumed: dict[str, int]
    interrupted: bool
    experiment: str
    restored: bool
    messages: list[str] = field(default_factory=list)
    trial_alive_seconds: float = 0.0  # summed trial lifetimes: training + each trial's start-up, checkpoints, reports

    @property
    def utilisation(self) -> float:
        """The share of the slot-time (slots x wall) spent training."""
        return self.train_seconds / max(1e-9, self.wall_seconds * self.slots)

    @property
    def overhead_ratio(self) -> float | None:
        """wall / (summed training / slots): 1.0 means every slot trained all the time."""
        return self.wall_seconds * self.slots / self.train_seconds if self.train_seconds else None

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["utilisation"] = self.utilisation
        out["overhead_ratio"] = self.overhead_ratio
        out["wall_over_training"] = self.wall_seconds / self.train_seconds if self.train_seconds else None
        out["alive_fraction"] = self.trial_alive_seconds / max(1e-9, self.wall_seconds * self.slots)
        return out


LOCAL_SOURCES = ("builtin", "text", "jsonl", "parquet", "tokens", "synthetic", "images", "builtin_images")


def preflight_data(plan: Plan) -> str | None:
    """Open a local corpus once in the driver: bad data (a too-small vocabulary, an empty folder)
    fails here with one line instead of in every trial, and the corpus fingerprint is known up
    front. Remote sources (`hf`) are left to the trials, which may be the only machines online."""
    from trials.errors import TrialInputError

    data = plan.cells[0].data if plan.cells else None
    if data is None or data.source not in LOCAL_SOURCES:
        return None
    from trials.data import check_vocab, open_source

    try:
        source = open_source(data)
        check_vocab(plan.vocab, source)
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    return source.fingerprint


def launch(plan: Plan, *, address: str | None = None, retry_failed: bool = False, console: Any = None,
           started: float | None = None) -> LaunchSummary:
    started = started or time.time()
    old_manifest = check_output_dir(plan)
    corpus = preflight_data(plan)
    if corpus and old_manifest and old_manifest.get("corpus") and old_manifest["corpus"] != corpus:
        raise UserError(
            f"{plan.sweep_dir}: the corpus changed since this sweep started (fingerprint {old_manifest['corpus']} "
            f"then, {corpus} now); results would not be comparable: restore the data or use a new output (--output)"
        )
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    lock = hold_driver_lock(plan.sweep_dir)
    try:
        return _launch_locked(plan, old_manifest, corpus, address=address, retry_failed=retry_failed,
                              console=console, started=started)
    except UserError:
        raise
    except Exception as exc:  # a full disk or a locked ledger outside Tune's loop: one line, not a traceback
        from sweeper.records.storage_errors import as_user_error, is_storage_error

        if not is_storage_error(exc):
            raise
        raise as_user_error(exc, storage_url_of(plan), what=RESUME_HINT) from None
    finally:
        lock.close()


RESUME_HINT = "every finished result is kept; run the same command again to resume once this is fixed"


def storage_url_of(plan: Plan) -> str:
    from sweeper.records.ledger import storage_url

    return storage_url(plan.config.ledger, plan.sweep_dir)


def check_ledger_has_the_store(url: str, ledger_points: dict[str, list[Any]], store_points: Any) -> None:
    """Refuse to resume when the store holds finished points that the ledger does not: the ledger
    (the record, always written first) was replaced or damaged, and resuming would train those
    points again and overwrite their rows."""
    import polars as pl

    if not store_points.height:
        return
    known = {p.point_id: p for points in ledger_points.values() for p in points}
    finished = store_points.filter(pl.col("state").is_in(["ok", "diverged", "failed"]))
    missing = []
    for pid, state, attempt in finished.select("point_id", "state", "attempt").iter_rows():
        record = known.get(pid)
        # The ledger may be ahead of the store (a retry or re-run opened since: a higher attempt), never behind.
        if record is None or (record.state != state and record.attempt <= (attempt or 0)):
            missing.append(pid)
    if missing:
        raise UserError(
            f"{url}: the ledger has no record of {len(missing)} finished point(s) that the store holds "
            f"(e.g. {missing[0]}): it was replaced or damaged. Restore it from a backup, or launch into a new "
            "--output; the store is left as it is (sweeper status/optima still read it)"
        )


def _launch_locked(plan: Plan, old_manifest: dict[str, Any] | None, corpus: str | None, *, address: str | None,
                   retry_failed: bool, console: Any, started: float) -> LaunchSummary:
    from sweeper.records.ledger import Ledger, storage_url
    from sweeper.run.state import SweepState
    from sweeper.records.store import load_cells, load_points

    sweep_dir = plan.sweep_dir
    url = storage_url(plan.config.ledger, sweep_dir)
    manifest = manifest_for(plan, old_manifest, url)
    if corpus and not manifest.get("corpus"):
        manifest["corpus"] = corpus
    yaml_name = save_yaml_copy(sweep_dir, plan.source)
    write_json_atomic(sweep_dir / MANIFEST, manifest)

    messages: list[str] = []
    ledger = Ledger(url)
    try:
        ledger_points = ledger.load()
    except Exception as exc:
        from sweeper.records.storage_errors import as_user_error

        raise as_user_error(exc, url, what="nothing was changed; the store still shows every result") from None
    store = open_store(sweep_dir, ledger, messages)
    latest = load_points(sweep_dir)
    check_ledger_has_the_store(url, ledger_points, latest)
    store_states = dict(zip(latest["point_id"].to_list(), latest["state"].to_list())) if latest.height else {}
    previous_cells = {row["cell_id"]: row for row in load_cells(sweep_dir).to_dicts()}

    ray_started = time.time()
    started_ray = ensure_ray(address or plan.config.ray.address, plan)
    import ray  # noqa: F401  (imported by ensure_ray)
    from ray import tune

    from sweeper.run.tune_adapters import SweepRecorder, SweepSearcher, SweepStopper, activate, trial_dirname, trial_resources

    ray_seconds = time.time() - ray_started
    concurrency = resolve_concurrency(plan)
    storage_path, last_experiment, new_name = experiment_location(plan, manifest)
    claimed = None
    if last_experiment:
        claimed = unfinished_trials(f"{storage_path}/{last_experiment}", messages)
    restore = bool(claimed)

    state = SweepState(plan, ledger, store, concurrency=concurrency, host_memory=_host_memory())
    state.expected_corpus = manifest.get("corpus")
    state.other_cells = {cid: row for cid, row in previous_cells.items() if cid not in state.cells}
    counts = state.load(ledger_points, claimed or {}, retry_failed=retry_failed, store_states=store_states)
    state.messages.extend(messages)
    state.flush(force=True)

    experiment = last_experiment if restore else new_name
    if not restore:
        manifest["tune"] = {"storage": storage_path, "experiment": new_name, "index": int(new_name.split("-")[1])}
    manifest.setdefault("launches", []).append({"started": started, "yaml": yaml_name, "address": address,
                                                "experiment": experiment, "restored": restore})
    write_json_atomic(sweep_dir / MANIFEST, manifest)

    trainable = tune.with_resources(trainable_entry(), trial_resources)

    def new_tuner() -> Any:
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(search_alg=SweepSearcher(), num_samples=-1, max_concurrent_trials=concurrency,
                                        reuse_actors=True, trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=new_name, storage_path=storage_path, callbacks=[SweepRecorder()], stop=SweepStopper(),
                verbose=0, failure_config=tune.FailureConfig(max_failures=plan.config.retries),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1), log_to_file=False,
            ),
        )

    restore_failure: str | None = None
    tuner: Any = None
    if restore:
        try:
            tuner = tune.Tuner.restore(f"{storage_path}/{experiment}", trainable=trainable, resume_unfinished=True,
                                       resume_errored=False, restart_errored=False)
        except Exception as exc:
            restore_failure = f"{type(exc).__name__}: {exc}"
    else:
        tuner = new_tuner()

    from sweeper.run.display import LiveDisplay

    display = LiveDisplay(state, console=console)
    activate(state, hooks=[display.update])
    previous_term = signal.getsignal(signal.SIGTERM)
    if hasattr(signal, "SIGTERM") and _main_thread():
        signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    interrupted = False
    try:
        with display:
            if not state.all_done():
                if tuner is not None:
                    try:
                        with failed_restore_raises():
                            fit_tuner(tuner, state)
                    except TuneRestoreFailed as exc:
                        restore_failure = str(exc)
                if restore_failure is not None:
                    # Tune would go on with an empty run and wait forever for the trials it lost.
                    counts["rerun"] += state.forget_restored_trials("Ray Tune could not restore its last run")
                    counts["resumed"] = 0
                    state.messages.append(f"Ray Tune could not restore {experiment} ({restore_failure[:300]}); "
                                          f"a new Tune run ({new_name}) starts and the points that were in "
                                          "flight train again from the start")
                    experiment, restore = new_name, False
                    manifest["tune"] = {"storage": storage_path, "experiment": new_name,
                                        "index": int(new_name.split("-")[1])}
                    manifest["launches"][-1].update({"experiment": experiment, "restored": False})
                    write_json_atomic(sweep_dir / MANIFEST, manifest)
                    fit_tuner(new_tuner(), state)
            interrupted = not state.all_done()
            state.stopping = interrupted
    except KeyboardInterrupt:
        interrupted = True
        state.stopping = True
    finally:
        try:
            state.flush(force=True)
        except Exception as exc:
            from sweeper.records.storage_errors import is_storage_error

            if not is_storage_error(exc):
                raise
            state.record_fault(exc)  # the rows stay unwritten; the ledger has them, the next launch adds them
        activate(None)
        if _main_thread():
            signal.signal(signal.SIGTERM, previous_term)
        if started_ray:
            import ray as _ray

            _ray.shutdown()

    rows = state.cell_rows()
    from sweeper.records.table import status_counts

    if state.expected_corpus and manifest.get("corpus") != state.expected_corpus:
        manifest["corpus"] = state.expected_corpus
    summary = LaunchSummary(
        sweep_dir=str(sweep_dir), wall_seconds=time.time() - started, ray_start_seconds=ray_seconds,
        train_seconds=state.stats.train_seconds, slots=concurrency, trials=state.stats.trials_started,
        points_finished=state.stats.points_finished, counts=status_counts(r for r in rows if r["cell_id"] in state.cells),
        resumed=counts, interrupted=interrupted, experiment=experiment, restored=restore, messages=list(state.messages),
        trial_alive_seconds=state.stats.alive_seconds,
    )
    manifest["launches"][-1].update({k: v for k, v in summary.to_dict().items() if k not in ("messages", "sweep_dir")})
    if state.fault is not None:
        manifest["launches"][-1]["fault"] = state.fault
        try:
            write_json_atomic(sweep_dir / MANIFEST, manifest)
        except OSError:
            pass  # the disk may still be full; the manifest of the previous launch stays valid
        from sweeper.records.storage_errors import StorageFault

        raise StorageFault(f"the sweep stopped: {state.fault}; {RESUME_HINT}")
    write_json_atomic(sweep_dir / MANIFEST, manifest)
    return summary


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


def fit_tuner(tuner: Any, state: Any) -> None:
    try:
        tuner.fit()
    except Exception as exc:
        # Tune's own bookkeeping after its loop (the result grid reads every trial's error file)
        # fails on files written while a disk was full. The sweeper does not use it: after a
        # storage fault the fault is what to report, after a finished sweep it is noise.
        if state.fault is None and not state.all_done():
            raise
        state.messages.append(f"Ray Tune's result summary failed ({type(exc).__name__}); "
                              "ignored: every result is in the ledger and the store")


def hold_driver_lock(sweep_dir: Path) -> Any:
    """One driver per sweep directory: an exclusive lock, released by the kernel even on SIGKILL."""
    import fcntl

    path = sweep_dir / "driver.lock"
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(f"{sweep_dir}: another `sweeper launch` is running this sweep ({holder}); "
                        "watch it with `sweeper status` or stop it first") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    handle.flush()
    return handle


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
