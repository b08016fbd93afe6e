"""`sweeper launch`: plan the cells, prepare the sweep directory, run the sweep on Ray Tune.

Order of work (nothing is written until every check has passed), one step a line of `launch`:
1. the plan was built from the validated YAML (`sweeper.spec`, `sweeper.search.planner`);
2. if the sweep directory exists: refuse settings that would mix incompatible results
   (per-cell fingerprints in the manifest), allow new methods, sizes and seeds; a local corpus
   is opened once (bad data fails here, once) and must be the sweep's (`sweeper.run.sweep_dir`);
3. write the manifest and a copy of the YAML; open the ledger (the record) and the store
   (rebuilt from the ledger if damaged);
4. start or join Ray (joining a cluster, `--address`: first check that every node reaches the
   sweep's storage, `sweeper.run.doctor`, and refuse with exit 1 when one does not; a `ray://`
   address is refused up front, `sweeper.run.ray_address`); publish the data's unigram entropy in
   the storage (`sweeper.run.storage`); restore the last Tune run when it holds unfinished trials (they continue
   from their checkpoints), else start a new one (`sweeper.run.tune_session`); points the
   ledger shows active but no restored trial holds are re-run (`sweeper.run.sweep_run`);
5. run Tune: the Searcher proposes stacks, the Callback records everything; a live table per
   cell; Ctrl-C stops cleanly (the next launch resumes);
6. a summary: wall time, summed training time, utilisation of the trial slots.

With a `Simulation` (`--simulate`), the same script runs on a virtual pool with simulated trials
(`sweeper.sim.simulation`): no corpus is opened, the directory is marked simulated, and the
summary adds the pool's GPU-slot utilisation, how busy its devices were (the first simulated day
and the whole run) and the simulated GPU-hours and wall time.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from sweeper.core.errors import UserError
from sweeper.records import crash_points
from sweeper.records.ledger import OptunaLedger
from sweeper.records.manifest import DataEntropy, Launch, Manifest, SimulatedEntry, write_manifest
from sweeper.core.rows import CellRow
from sweeper.records.storage_errors import StorageFault, as_user_error, is_storage_error
from sweeper.records.store import load_cells, load_points
from sweeper.records.table import status_counts
from sweeper.run import sweep_dir
from sweeper.run.display import LiveDisplay
from sweeper.run.machine import host_memory, memory_inputs
from sweeper.sim.simulation import GpuProbe, Simulation
from sweeper.run.sweep_run import SweepRun
from sweeper.run.doctor import refuse_unreachable_storage
from sweeper.run.ray_address import check_address
from sweeper.run.storage import publish_caches, sweep_storage
from sweeper.run.tune_session import ENV_DEFAULTS, TuneSession, ensure_ray
from sweeper.search.memory import DeviceMemory
from sweeper.search.planner import Plan
from sweeper.tracking import Tracking, open_trackers

RESUME_HINT = "every finished result is kept; run the same command again to resume once this is fixed"


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
    simulation: dict[str, Any] | None = None  # --simulate: the surface, GPU-slot utilisation, simulated hours
    driver_cpu_seconds: float = 0.0  # this process's user + system CPU over the launch (Ray's own processes excluded)
    driver_peak_rss_mb: float = 0.0
    reports: int = 0  # trial reports the driver received
    tune_snapshots: int = 0  # Ray Tune experiment snapshots (each serialises every trial of the run)
    infra_faults: dict[str, int] = field(default_factory=dict)  # trials ended by infrastructure faults, by kind
    storage: str | None = None  # the sweep's storage (sweeper.run.storage)

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
        out["driver_cpu_per_trial"] = self.driver_cpu_seconds / self.trials if self.trials else None
        out["driver_cpu_per_report"] = self.driver_cpu_seconds / self.reports if self.reports else None
        return out


def driver_cpu() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def preflight_data(plan: Plan) -> str | None:
    """The corpus fingerprint of a local corpus (see `sweep_dir.preflight`)."""
    return sweep_dir.preflight(plan)[0]


def launch(plan: Plan, *, address: str | None = None, retry_failed: bool = False, console: Any = None,
           started: float | None = None, simulation: Simulation | None = None) -> LaunchSummary:
    started = started or time.time()
    crash_points.arm_from_env()  # a test seam, off unless its environment variables are set
    check_address(address, "--address")
    check_address(plan.config.ray.address, "ray.address:")
    if simulation is not None:
        if address:
            raise UserError("--simulate runs on a virtual pool on this machine: drop --address")
        simulation.check(plan)
        plan = simulation.mark(plan)
    old_manifest = sweep_dir.check_output_dir(plan)
    if old_manifest is not None and old_manifest.is_simulated != (simulation is not None):
        kind = "simulated (sweeper launch --simulate)" if old_manifest.is_simulated else "trained"
        raise UserError(f"{plan.sweep_dir}: holds {kind} results, which can never be mixed with "
                        f"{'trained' if simulation is None else 'simulated'} ones; give another output (--out)")
    if simulation is None:
        sweep_dir.train_tokenizer(plan, console)
    corpus, entropy = (simulation.corpus, None) if simulation is not None else sweep_dir.preflight(plan)
    sweep_dir.check_corpus(plan, old_manifest, corpus)
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    lock = sweep_dir.hold_driver_lock(plan.sweep_dir)
    try:
        return _launch_locked(plan, old_manifest, corpus, entropy, address=address, retry_failed=retry_failed,
                              console=console, started=started, simulation=simulation)
    except UserError:
        raise
    except Exception as exc:  # a full disk or a locked ledger outside Tune's loop: one line, not a traceback
        if not is_storage_error(exc):
            raise
        raise as_user_error(exc, sweep_dir.ledger_url(plan), what=RESUME_HINT) from None
    finally:
        sweep_dir.release_driver_lock(lock)


def _launch_locked(plan: Plan, old_manifest: Manifest | None, corpus: str | None,
                   entropy: dict[str, Any] | None, *, address: str | None, retry_failed: bool, console: Any,
                   started: float, simulation: Simulation | None = None) -> LaunchSummary:
    cpu_at_start = driver_cpu()
    manifest, yaml_name = sweep_dir.prepare(plan, old_manifest, corpus, entropy)
    if simulation is not None:
        manifest.simulated = SimulatedEntry(**simulation.manifest_entry())
        write_manifest(plan.sweep_dir, manifest)
    messages: list[str] = []
    url = sweep_dir.ledger_url(plan)
    ledger = OptunaLedger(url)
    try:
        entries = ledger.load(loop_axis=plan.axis == "loops")
    except Exception as exc:
        raise as_user_error(exc, url, what="nothing was changed; the store still shows every result") from None
    store = sweep_dir.open_store(plan, ledger, old_manifest, messages)
    latest = load_points(plan.sweep_dir)
    sweep_dir.check_ledger_has_the_store(url, entries, latest)
    store_states = dict(zip(latest["point_id"].to_list(), latest["state"].to_list())) if latest.height else {}

    pool = simulation.surface.pool if simulation is not None else None
    storage = sweep_storage(plan)
    joined = False
    cluster = address or plan.config.ray.address
    try:
        if cluster and simulation is None:  # every node must reach the storage before the first trial
            joined = ensure_ray(cluster, plan)
            messages.extend(refuse_unreachable_storage(storage, plan.config.ray.scratch))
        if simulation is None:
            shared = publish_caches(storage, plan)
            if shared:
                messages.append(shared)
        session = TuneSession.open(plan, manifest, address, messages, pool=pool, storage=storage, started_ray=joined)
    except BaseException:
        if joined:
            ray.shutdown()
        raise
    probe: GpuProbe | None = None
    probe_scale = 1.0  # simulated seconds per second of the probe's clock
    tracking = open_tracking(plan, messages.append)
    try:
        if simulation is not None:
            from sweeper.sim.trial import simulated_trainable  # only a simulation runs it

            simulation.prepare(plan.sweep_dir)
            probe, probe_scale = simulation.probe(plan)
            session.use_trainable(simulated_trainable, simulation=simulation.payload(plan))
            device, measured, host = DeviceMemory(int(pool.gpu_memory_gb * 2**30), "the simulated pool"), {}, host_memory()
        else:
            device, measured, host = memory_inputs(plan.config.resources.gpu_memory_gb, plan.config.resources.gpu_model)
        sweep = SweepRun(plan, ledger, store, concurrency=session.concurrency, host_memory=host, device=device,
                         measured=measured, tracking=tracking, storage=storage)
        sweep.pool_gpus = session.pool_gpus
        if simulation is not None:
            sweep.watcher = simulation.driver_log()  # the pool's clock: when the pool waits for the driver
        if tracking is not None:
            tracking.warn = sweep.messages.append  # later warnings go to the live display
        sweep.expected_corpus = manifest.corpus
        sweep.other_cells = {row["cell_id"]: CellRow.from_columns(row) for row in load_cells(plan.sweep_dir).to_dicts()
                             if row["cell_id"] not in sweep.cells}
        counts = sweep.load(entries, session.claimed, retry_failed=retry_failed, store_states=store_states)
        sweep.messages.extend(messages)
        sweep.flush(force=True)

        if not session.restored:
            manifest.tune = session.tune_info()
        this_launch = manifest.add_launch(Launch(started=started, yaml=yaml_name, address=address,
                                                 experiment=session.experiment, restored=session.restored))
        write_manifest(plan.sweep_dir, manifest)

        def new_tune_run(requeued: int) -> None:  # the last Tune run could not be restored
            counts["rerun"] += requeued
            counts["resumed"] = 0
            manifest.tune = session.tune_info()
            this_launch.update({"experiment": session.experiment, "restored": False})
            write_manifest(plan.sweep_dir, manifest)

        display = LiveDisplay(sweep, console=console)
        with display:
            hooks = [display.update] + ([probe] if probe is not None else [])
            interrupted = session.run(sweep, hooks=hooks, on_new_run=new_tune_run)
    finally:
        session.close()
        if tracking is not None:
            tracking.close()

    if sweep.expected_corpus and manifest.corpus != sweep.expected_corpus:
        manifest.corpus = sweep.expected_corpus
    if manifest.unigram_entropy is None and sweep.book.unigram is not None:  # a streamed source's estimate
        manifest.unigram_entropy = DataEntropy(**sweep.book.unigram)
    rows = [row.columns() for row in sweep.cell_rows() if row.cell.cell_id in sweep.cells]
    summary = LaunchSummary(
        sweep_dir=str(plan.sweep_dir), wall_seconds=time.time() - started, ray_start_seconds=session.ray_seconds,
        train_seconds=sweep.stats.train_seconds, slots=session.concurrency, trials=sweep.stats.trials_started,
        points_finished=sweep.stats.points_finished, counts=status_counts(rows), resumed=counts,
        interrupted=interrupted, experiment=session.experiment, restored=session.restored,
        messages=list(sweep.messages), trial_alive_seconds=sweep.stats.alive_seconds,
        simulation=({**simulation.manifest_entry(), **probe.figures(probe_scale),
                     **simulation.busy_figures(plan.sweep_dir)}
                    if simulation is not None and probe is not None else None),
        driver_cpu_seconds=driver_cpu() - cpu_at_start, reports=sweep.stats.reports,
        tune_snapshots=sweep.stats.tune_snapshots, infra_faults=dict(sweep.stats.infra_faults), storage=storage.uri,
        driver_peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    this_launch.update({k: v for k, v in summary.to_dict().items() if k not in ("messages", "sweep_dir")})
    if sweep.fault is not None:
        this_launch.fault = sweep.fault
        try:
            write_manifest(plan.sweep_dir, manifest)
        except OSError:
            pass  # the disk may still be full; the manifest of the previous launch stays valid
        raise StorageFault(f"the sweep stopped: {sweep.fault}; {RESUME_HINT}")
    write_manifest(plan.sweep_dir, manifest)
    return summary


def open_tracking(plan: Plan, warn: Any) -> Tracking | None:
    """The experiment trackers the YAML's `tracking:` section names (None when it names none)."""
    section = plan.config.tracking
    if not section.names():
        return None
    trackers = open_trackers(section, plan.sweep_dir, plan.config.name, warn)
    return Tracking(plan.config.name, trackers, {cell.cell_id: cell.compat for cell in plan.cells}, warn=warn)

