"""One launch's running sweep: the cell book, the Tune-trial bookkeeping and the recorder.

The Tune adapters (`sweeper.run.tune_session`) call this object with decoded events; it asks
the book what changed (`sweeper.run.book`, pure), keeps the trial bookkeeping
(`sweeper.run.tune_trials`), and hands every change to the recorder (`sweeper.run.recorder`:
ledger first, then the store). It also holds what the live display shows: the messages and
the cell rows. It holds no Ray object, so tests drive it directly, event by event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sweeper.core.ids import cell_of
from sweeper.records.ledger import Ledger, LedgerEntry
from sweeper.core.rows import CellRow
from sweeper.core.states import CellStatus
from sweeper.records.storage_errors import describe, is_transient_text
from sweeper.records.store import Store
from sweeper.run.book import CellBook, Change, InfraRetry, LedgerOp
from sweeper.run import weights
from sweeper.run.recorder import Recorder
from sweeper.run.storage import exports_path, kept_path, staging_path, sweep_storage
from sweeper.run.tune_trials import LaunchStats, TuneTrials
from sweeper.search.memory import DeviceMemory, auto_stack
from sweeper.search.placement import gpu_request, is_lead
from sweeper.search.planner import Cell, Plan
from sweeper.tracking.core import Tracking
from trials.infra import InfraFault, kind_of_text
from trials.spec import StepReport, TrialSpec
from trials.storage import Storage


class SweepDone:
    """What `suggest` returns once every cell is done (the Tune adapter maps it to Searcher.FINISHED)."""

    def __repr__(self) -> str:
        return "SWEEP_DONE"


SWEEP_DONE = SweepDone()


@dataclass(frozen=True)
class TrialConfig:
    """What a new Tune trial trains: one cell's stack of points."""

    cell: Cell
    lrs: list[float]
    point_ids: list[str]
    export_dir: str | None = None
    export_best_only: bool = False  # the trial writes only its best member's weights (kept weights, not exports/)
    micro_batch: int | None = None  # since a one-point stack of the cell ran out of memory (a non-result setting)
    storage: Storage | None = None  # the sweep's storage (exports and shared caches go there)
    scratch: str | None = None  # `ray.scratch`: the nodes' local scratch folder
    gpu: float | None = None  # the GPU share asked of Ray when it differs from the cell's (resources.placement)

    def to_tune(self) -> dict[str, Any]:
        """The Ray Tune config: the trial spec plus what the sweeper's adapters read back."""
        cell = self.cell
        train = cell.train if self.micro_batch is None else cell.train.model_copy(update={"micro_batch": self.micro_batch})
        spec = TrialSpec(model=cell.model, train=train, data=cell.data, divergence=cell.divergence,
                         lrs=list(self.lrs), seed=cell.seed, point_ids=list(self.point_ids), eval=cell.eval)
        resources = dict(cell.resources) if self.gpu is None else {**cell.resources, "GPU": self.gpu}
        config: dict[str, Any] = {"spec": spec.to_dict(), "cell_id": cell.cell_id, "resources": resources}
        if self.storage is not None:
            config["storage"] = self.storage.to_dict()
        if self.scratch is not None:
            config["scratch"] = self.scratch
        if self.export_dir is not None:
            config["export_dir"] = self.export_dir
            if self.export_best_only:
                config["export_members"] = "best"
        return config


class TrialWatcher(Protocol):
    """Told of every Tune trial the driver proposes and of every trial end it has processed (a simulation's
    busy log: `sweeper.sim.devices.DriverLog`)."""

    def proposed(self, trial: str, share: float) -> None: ...

    def ended(self, trial: str) -> None: ...


def point_ids_of(config: Mapping[str, Any] | None) -> list[str]:
    """The point ids a Tune trial's config holds."""
    spec = (config or {}).get("spec") or {}
    return list(spec.get("point_ids") or [])


class SweepRun:
    def __init__(self, plan: Plan, ledger: Ledger, store: Store, *, concurrency: int = 1,
                 host_memory: int | None = None, device: DeviceMemory | None = None,
                 measured: Mapping[str, Any] | None = None, clock: Callable[[], float] = time.time,
                 tracking: Tracking | None = None, storage: Storage | None = None) -> None:
        self.plan = plan
        self.storage = storage or sweep_storage(plan)  # where every node writes (`sweeper.run.storage`)
        self.clock = clock
        self.host_memory = host_memory
        self.device = device  # stack: auto's GPU memory (None: sweeper.search.memory's default)
        self.measured = measured or {}  # sweeper bench's measured peaks
        self.book = CellBook(plan.cells)
        self.book.infra = InfraRetry(plan.config.infra_retries, plan.config.infra_backoff)
        self.trials = TuneTrials(concurrency, started=clock())
        self.recorder = Recorder(ledger, store, self.book.cells, clock=clock, tracking=tracking)
        self.ledger = ledger
        self.other_cells: dict[str, CellRow] = {}  # cells of earlier launches not in this plan
        self.stopping = False
        self.fault: str | None = None  # why the ledger or the store could not be written (the sweep stops)
        self.messages: list[str] = []  # notable events for the live display
        self.pool_gpus = 0.0  # the Ray cluster's GPUs (set by the launch), for resources.placement
        self.gpu_shares: dict[str, float] = {}  # live Tune trial -> the GPU share it asked for (this launch)
        self.watcher: TrialWatcher | None = None

    @property
    def cells(self) -> dict[str, Cell]:
        return self.book.cells

    @property
    def stats(self) -> LaunchStats:
        return self.trials.stats

    # -- loading --------------------------------------------------------------------------------
    def load(self, entries: Iterable[LedgerEntry], claimed: Mapping[str, list[str]] | None = None, *,
             retry_failed: bool = False, store_states: Mapping[str, str] | None = None) -> dict[str, int]:
        """Take the ledger's points; re-queue active points no restored Tune trial holds.

        `claimed`: Tune trial id -> point ids of the trials a Tune restore will resume.
        `store_states`: the store's current state per point, to append rows where it lags.
        Returns counts: finished, resumed, rerun, retried."""
        claimed = claimed or {}
        entries = list(entries)
        planned = [e.with_facts(self.cells[e.row.cell.cell_id].facts) for e in entries
                   if e.row.cell.cell_id in self.cells]
        holders = {pid: tid for tid, pids in claimed.items() for pid in pids}
        counts, changes = self.book.load([e.row for e in planned], holders=holders, retry_failed=retry_failed,
                                         store_states=store_states,
                                         recorded_plans=self.ledger.plans())
        self.recorder.adopt({e.row.point_id: e.entry for e in planned if e.entry is not None})
        self.trials.restore(claimed)
        self._record(changes)
        return counts.as_dict()

    # -- the Searcher's side --------------------------------------------------------------------
    def stack_size(self, cell: Cell, queued: int) -> int:
        setting = self.plan.config.stack
        if setting == "auto":
            return auto_stack(cell, queued, self.plan.config.max_stack, self.host_memory, self.trials.concurrency,
                              device=self.device, measured=self.measured)
        return max(1, min(int(setting), queued))

    def suggest(self, tune_trial_id: str) -> TrialConfig | SweepDone | None:
        """A new trial's stack of one cell's queued points, None to wait, or SWEEP_DONE."""
        if self.stopping or not self.trials.gate_open():
            return None
        now = self.clock()
        cid = self.book.next_cell(now)
        if cid is None:
            if self.all_done():
                self.flush(force=True)
                return SWEEP_DONE
            return None
        cell = self.cells[cid]
        changes = self.book.assign(cid, self.stack_size(cell, len(self.book.queue[cid])), tune_trial_id, now)
        pids = [c.row.point_id for c in changes]
        self._record(changes)
        self.trials.assigned(tune_trial_id, pids)
        config = TrialConfig(cell, [c.row.lr for c in changes], pids, self._export_dir(cid, tune_trial_id),
                             export_best_only=not self.plan.config.export_weights,
                             micro_batch=self.book.micro_batch.get(cid), storage=self.storage,
                             scratch=self.plan.config.ray.scratch,
                             gpu=self.gpu_request(cell, tune_trial_id))
        if self.watcher is not None:
            self.watcher.proposed(tune_trial_id, float(cell.resources.get("GPU", 0.0)) if config.gpu is None
                                  else config.gpu)
        return config

    def gpu_request(self, cell: Cell, tune_trial_id: str) -> float | None:
        """The GPU share a new trial of `cell` asks Ray for (`sweeper.search.placement`), None: the cell's own."""
        declared = float(cell.resources.get("GPU", 0.0))
        live = self.trials.points
        wanted = len(live) + sum(1 for q in self.book.queue.values() if q)
        leads = sum(1 for tid in live if tid != tune_trial_id and is_lead(self.gpu_shares.get(tid, 0.0)))
        share = gpu_request(declared, wanted, self.pool_gpus, self.plan.config.resources.placement, leads)
        self.gpu_shares = {tid: v for tid, v in self.gpu_shares.items() if tid in live}
        self.gpu_shares[tune_trial_id] = share
        return share if share != declared else None

    def _export_dir(self, cid: str, tune_trial_id: str) -> str | None:
        """Where in the storage the trial writes its members' final weights: exports/ (all kept) or a
        staging folder from which the cell's best is kept (`sweeper.run.weights`); None when neither is asked for."""
        folder = weights.folder_name(cid)
        if self.plan.config.export_weights:
            # exports/<cell>/<trial>/<member>/{model.safetensors,config.json}; config.json names the point_id
            return exports_path(self.storage, folder, tune_trial_id)
        if self.plan.config.keep_weights == "best":
            return staging_path(self.storage, folder, tune_trial_id)
        return None

    def keep_best_weights(self, tune_trial_id: str, pids: list[str]) -> None:
        """After a trial ended: keep its cell's best point's weights if the trial wrote them."""
        if not pids or (self.plan.config.keep_weights != "best"):
            return
        cid = cell_of(pids[0])
        cell = self.cells.get(cid)
        if cell is None:
            return
        decision = self.book.decisions.get(cid)
        best = cell.point_id(decision.best.lr) if decision is not None and decision.best is not None else None
        folder = self._export_dir(cid, tune_trial_id)
        if folder is None:
            return
        exports = self.plan.config.export_weights
        kept_remote = None if self.storage.is_local else kept_path(self.storage, weights.folder_name(cid))
        try:
            weights.keep_best(self.plan.sweep_dir, cid, best, self.storage, folder, staged=not exports,
                              kept_in_storage=kept_remote)
            if exports:  # every member's weights, for `sweeper gamma`: into the sweep directory
                target = self.plan.sweep_dir / "exports" / weights.folder_name(cid) / tune_trial_id
                weights.collect(self.storage, folder, target)
        except OSError as exc:  # weights are a convenience: a full disk or a storage fault must not stop the sweep
            self.messages.append(f"{cid}: could not keep the best weights ({exc})")

    # -- the Callback's side --------------------------------------------------------------------
    def on_trial_start(self, tune_trial_id: str, pids: list[str]) -> None:
        now = self.clock()
        self.trials.started(tune_trial_id, pids, now)
        self._record(self.book.start(tune_trial_id, pids, now))

    def on_report(self, tune_trial_id: str, pids: list[str], report: StepReport) -> None:
        now = self.clock()
        self.trials.reporting(tune_trial_id, report.train_seconds, now)
        self._record(self.book.report(tune_trial_id, pids, report, now))
        self.flush()

    def on_trial_end(self, tune_trial_id: str, pids: list[str], last: StepReport | None, error: str | None) -> None:
        """A trial ended (normally, stopped, or with an error after Tune's retries)."""
        try:
            self._trial_end(tune_trial_id, pids, last, error)
        finally:
            if self.watcher is not None:
                self.watcher.ended(tune_trial_id)

    def _trial_end(self, tune_trial_id: str, pids: list[str], last: StepReport | None, error: str | None) -> None:
        now = self.clock()
        self.trials.stats.touch(tune_trial_id, now)
        if last is not None and last.done and not error:
            self.on_report(tune_trial_id, pids, last)
        unrestorable = self.trials.unrestorable(tune_trial_id, error)
        if is_transient_text(error):  # a full disk killed the trial (its checkpoint): stop, resume later
            self.record_fault(OSError(28, "No space left on device", "a trial's checkpoint"))
        fault = self.infra_fault_of(last, error)
        if fault is not None and not unrestorable and not self.stopping:
            self._record(self.book.infra_fault(tune_trial_id, pids, fault.kind, fault.message, now))
            self.trials.stats.infra_faults[fault.kind] = self.trials.stats.infra_faults.get(fault.kind, 0) + 1
            self.trials.ended(tune_trial_id, now)
            self.flush(force=True)
            return
        changes = self.book.trial_gone(tune_trial_id, pids, error=error if not self.fault else None,
                                       unrestorable=unrestorable, stopping=self.stopping, now=now)
        self._record(changes)
        self.trials.ended(tune_trial_id, now)
        self.flush(force=True)
        self.keep_best_weights(tune_trial_id, pids)

    def infra_fault_of(self, last: StepReport | None, error: str | None) -> InfraFault | None:
        """The infrastructure fault that ended a trial (`trials.infra`): the trial's own fault report, or
        the kind of the error Tune reports after its retries; None for the learning rates' own outcome."""
        if last is not None and last.fault is not None:
            return InfraFault.from_dict(last.fault)
        if error and not is_transient_text(error) and (kind := kind_of_text(error)) is not None:
            return InfraFault(kind, error)
        return None

    def forget_restored_trials(self, why: str) -> int:
        """Tune could not restore its last run: the points its trials held train again from the
        start, in a new Tune run. Returns how many points were re-queued."""
        held = [row for tid, pids in self.trials.forget_restored().items() for row in self.book.held(tid, pids)]
        self._record(self.book.requeue(held, f"re-run: {why}"))
        self.flush(force=True)
        return len(held)

    def should_stop(self, tune_trial_id: str, pids: list[str]) -> bool:
        """Stop a trial none of whose points is still its to train (a restored trial of finished points)."""
        return bool(pids) and not self.book.held(tune_trial_id, pids)

    def record_fault(self, exc: BaseException) -> bool:
        """The ledger or the store failed (disk full, ledger locked...): stop like Ctrl-C, so that
        in-flight points stay active and resume on the next launch. True the first time."""
        first = self.fault is None
        if first:
            self.fault = describe(exc, self.ledger.url)
            self.messages.append(f"stopping: {self.fault}")
        self.stopping = True
        return first

    # -- records and views ----------------------------------------------------------------------
    def _record(self, changes: list[Change]) -> None:
        self.trials.stats.points_finished += sum(c.ledger is LedgerOp.FINISH for c in changes)
        try:
            self.recorder.record(changes)
        finally:
            self.messages.extend(self.book.notes)
            self.book.notes.clear()

    def flush(self, force: bool = False) -> None:
        if self.book.decisions_changed:
            self.recorder.cells_dirty = True
            self.book.decisions_changed = False
        self.recorder.flush(self.cell_rows, force=force)

    def cell_rows(self) -> list[CellRow]:
        now = self.clock()
        rows = self.book.cell_rows(now)
        return rows + [row for cid, row in self.other_cells.items() if cid not in self.cells]

    def status(self, cid: str) -> CellStatus:
        return self.book.status(cid)

    def all_done(self) -> bool:
        return self.book.all_done()

    @property
    def expected_corpus(self) -> str | None:
        return self.book.expected_corpus

    @expected_corpus.setter
    def expected_corpus(self, value: str | None) -> None:
        self.book.expected_corpus = value
