"""The driver's picture of a sweep: cells, points, the queue, and the single writer.

`SweepState` turns trial events (a stack assigned, a trial started, a report, a trial
ended) into point states, bracketing decisions, ledger writes and store rows. Ray calls
it through the thin adapters in `sweeper.tune` (a Searcher asks `next_stack`, a driver-side
Callback feeds reports and ends); it holds no Ray object, so it is tested directly.

Rules it enforces
- a finished point (ok, diverged, failed) is never assigned again, and a report about a
  finished point (a restored trial replaying steps) is ignored;
- a point is finished `ok` only by a final report (`done`), `diverged` as soon as a report
  says so; a trial that ends otherwise fails its points, unless the sweep is stopping
  (Ctrl-C), when they stay active and the next launch resumes them;
- the ledger is written before the store (the ledger is the record; the store can be
  rebuilt from it), and both only from here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sweeper.search.bracketing import ACTIVE_STATES, CellDecision, GridPoint, decide, initial_grid, predicted_grid
from sweeper.records.ledger import Ledger, LedgerPoint
from sweeper.search.planner import Cell, Plan, auto_stack

FINISHED = "FINISHED"  # what `next_stack` returns when every cell is done (the Searcher maps it)
FLUSH_SECONDS = 1.0


@dataclass
class PointRecord:
    point_id: str
    cell_id: str
    lr: float
    state: str = "queued"
    attempt: int = 0
    tune_trial_id: str | None = None
    ledger_trial: int | None = None
    objective: float | None = None
    loss: float | None = None
    accuracy: float | None = None
    init_loss: float | None = None
    diverged_step: int | None = None
    reason: str | None = None
    steps: int = 0
    tokens: int = 0
    train_seconds: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    corpus: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("ok", "diverged", "failed")

    @property
    def assigned(self) -> bool:
        return self.state in ACTIVE_STATES and self.tune_trial_id is not None

    def grid_point(self) -> GridPoint:
        return GridPoint(self.lr, self.state, self.objective)  # type: ignore[arg-type]

    def metrics(self) -> dict[str, Any]:
        return {
            "objective": self.objective, "loss": self.loss, "accuracy": self.accuracy, "init_loss": self.init_loss,
            "diverged_step": self.diverged_step, "reason": self.reason, "steps": self.steps, "tokens": self.tokens,
            "train_seconds": self.train_seconds, "started_at": self.started_at, "finished_at": self.finished_at,
            "corpus": self.corpus,
        }


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


@dataclass
class LaunchStats:
    started: float
    train_seconds: float = 0.0  # summed over trials, this launch only
    points_finished: int = 0
    trials_started: int = 0
    trial_seconds: dict[str, float] = field(default_factory=dict)  # last train_seconds seen per Tune trial
    trial_spans: dict[str, list[float]] = field(default_factory=dict)  # [started, last event] per Tune trial (driver clock)

    @property
    def alive_seconds(self) -> float:
        """Summed lifetime of the trials (start to end as the driver saw them): training plus each
        trial's own overhead (start-up, checkpoints, reports); the rest of the slot-time is idle."""
        return sum(end - start for start, end in self.trial_spans.values())

    def touch(self, tune_trial_id: str, now: float) -> None:
        self.trial_spans.setdefault(tune_trial_id, [now, now])[1] = now


class SweepState:
    def __init__(
        self,
        plan: Plan,
        ledger: Ledger,
        store: Any,
        *,
        concurrency: int = 1,
        host_memory: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan = plan
        self.cells: dict[str, Cell] = plan.by_id()
        self.ledger = ledger
        self.store = store
        self.concurrency = concurrency
        self.host_memory = host_memory
        self.clock = clock
        self.points: dict[str, dict[str, PointRecord]] = {cid: {} for cid in self.cells}
        self.queue: dict[str, list[float]] = {cid: [] for cid in self.cells}
        self.decisions: dict[str, CellDecision] = {}
        self.waiting: dict[str, str] = {}  # cell -> why it cannot start yet
        self.trial_points: dict[str, list[str]] = {}
        self.initial_grids: dict[str, list[float]] = {}  # cell -> its first grid (recorded in the ledger)
        self.restored_trials: set[str] = set()
        self.reported_trials: set[str] = set()  # Tune trials that reported at least once in this launch
        self.other_cells: dict[str, dict[str, Any]] = {}  # cells of earlier launches not in this plan
        self.stopping = False
        self.fault: str | None = None  # why the ledger or the store could not be written (the sweep stops)
        self.expected_corpus: str | None = None
        self.stats = LaunchStats(started=clock())
        self._point_rows: list[dict[str, Any]] = []
        self._curve_rows: list[dict[str, Any]] = []
        self._cells_dirty = True
        self._last_flush = 0.0
        self.messages: list[str] = []  # notable events for the live display

    # -- loading --------------------------------------------------------------------------------
    def load(
        self,
        ledger_points: dict[str, list[LedgerPoint]],
        claimed: dict[str, list[str]] | None = None,
        *,
        retry_failed: bool = False,
        store_states: dict[str, str] | None = None,
    ) -> dict[str, int]:
        """Take the ledger's points; re-queue active points no restored Tune trial holds.

        `claimed`: Tune trial id -> point ids of the trials a Tune restore will resume.
        `store_states`: the store's current state per point, to append rows where it lags.
        Returns counts: finished, resumed, rerun, retried.
        """
        claimed = claimed or {}
        holder = {pid: tid for tid, pids in claimed.items() for pid in pids}
        counts = {"finished": 0, "resumed": 0, "rerun": 0, "retried": 0}
        store_states = store_states or {}
        for cid, points in ledger_points.items():
            if cid not in self.cells:
                continue
            for lp in points:
                rec = PointRecord(point_id=lp.point_id, cell_id=cid, lr=lp.lr, state=lp.state, attempt=lp.attempt,
                                  tune_trial_id=lp.tune_trial_id, ledger_trial=lp.trial_id if lp.trial_id >= 0 else None,
                                  objective=_finite(lp.objective))
                _apply_metrics(rec, lp.metrics)
                self.points[cid][lp.point_id] = rec
                if rec.corpus and self.expected_corpus is None:
                    self.expected_corpus = rec.corpus
                if rec.finished and not (retry_failed and rec.state == "failed"):
                    counts["finished"] += 1
                    if store_states.get(rec.point_id) != rec.state:
                        self._row(rec)
                elif rec.state == "failed":  # retry: a new ledger trial, attempt counting on
                    rec.state, rec.ledger_trial, rec.tune_trial_id, rec.reason = "queued", None, None, None
                    rec.objective = None
                    self.queue[cid].append(rec.lr)
                    counts["retried"] += 1
                    self._row(rec)
                elif holder.get(rec.point_id) == rec.tune_trial_id and rec.tune_trial_id is not None:
                    counts["resumed"] += 1
                    self.trial_points.setdefault(rec.tune_trial_id, [])
                    if store_states.get(rec.point_id) != rec.state:
                        self._row(rec)
                else:  # stale: its trial is gone; run it again from the start
                    self._requeue(rec, "re-run: its trial did not survive the last launch")
                    counts["rerun"] += 1
        for tid, pids in claimed.items():
            self.trial_points[tid] = list(pids)
            self.restored_trials.add(tid)
        self._requeue_initial_grids()
        for cid in self.cells:
            self.refresh(cid)
        return counts

    def _requeue_initial_grids(self) -> None:
        """Queue again the learning rates of a cell's initial grid that were never assigned.

        The queue lives in memory only. A driver killed after a cell's first stacks were assigned
        but before the rest of its initial grid was would otherwise resume with a partial grid,
        which `decide` treats as the whole grid: it extends from there and explores other learning
        rates than an uninterrupted run. The grid a cell started from is recorded in its ledger
        study (`initial_grid`) when its first point is opened.
        """
        recorded = {cid: attrs.get("initial_grid") for cid, attrs in self.ledger.cells().items()}
        for cid, grid in recorded.items():
            if cid not in self.cells or not self.points[cid] or not isinstance(grid, list):
                continue
            self.initial_grids[cid] = [float(lr) for lr in grid]
            known = {rec.lr for rec in self.points[cid].values()} | set(self.queue[cid])
            policy = self.cells[cid].policy  # the LR policy may have changed since: stay inside its bounds
            self.queue[cid].extend(lr for lr in self.initial_grids[cid]
                                   if lr not in known and policy.lo <= lr <= policy.hi)

    # -- decisions ------------------------------------------------------------------------------
    def grid_points(self, cid: str) -> list[GridPoint]:
        known = {rec.lr for rec in self.points[cid].values()}
        pts = [rec.grid_point() for rec in self.points[cid].values()]
        pts += [GridPoint(lr, "queued") for lr in self.queue[cid] if lr not in known]
        return pts

    def refresh(self, cid: str) -> CellDecision:
        """Re-decide a cell and queue what it proposes."""
        cell = self.cells[cid]
        pts = self.grid_points(cid)
        initial = None
        if not pts:
            initial = self._initial_grid(cell)
            if initial is not None:
                self.initial_grids[cid] = list(initial[: cell.policy.max_points])
            if initial is None:
                d = CellDecision("pending", reason=self.waiting.get(cid, "waiting"))
                self.decisions[cid] = d
                return d
        d = decide(pts, cell.policy, initial=initial)
        if d.next_lrs:
            self.queue[cid].extend(d.next_lrs)
            d = decide(self.grid_points(cid), cell.policy)
        self.waiting.pop(cid, None)
        previous = self.decisions.get(cid)
        if previous != d:
            self._cells_dirty = True
        self.decisions[cid] = d
        if d.done and not (previous and previous.done):
            for other in [c for c in self.waiting if self.cells[c].method == cell.method]:
                self.refresh(other)  # a finished size may be what a prior was waiting for
        return d

    def _initial_grid(self, cell: Cell) -> list[float] | None:
        """The first grid of a cell; None while a prior must wait for smaller sizes."""
        if cell.prior != "extrapolate":
            return initial_grid(cell.policy)
        smaller = [c for c in self.cells.values() if c.method == cell.method and c.x < cell.x]
        if len({c.x for c in smaller}) < 2:
            return initial_grid(cell.policy)  # no law can come from fewer than two smaller sizes
        done = [c for c in smaller if self.decisions.get(c.cell_id) and self.decisions[c.cell_id].done]
        known = [(c.x, self._optimum(c.cell_id)) for c in done]
        known = [(x, lr) for x, lr in known if lr is not None]
        # Wait for every smaller size, or for three (enough for an interval that can narrow the grid).
        if len(done) < len(smaller) and len({x for x, _ in known}) < 3:
            self.waiting[cell.cell_id] = "waiting for smaller sizes (prior: extrapolate)"
            return None
        if len({x for x, _ in known}) < 2:
            return initial_grid(cell.policy)
        try:
            from sweeper.analysis.fits import predict_optimal_lr

            pred = predict_optimal_lr([x for x, _ in known], [lr for _, lr in known], cell.x)
        except Exception as exc:  # a failed fit falls back to the YAML's grid, visibly
            self.messages.append(f"{cell.cell_id}: LR prior unavailable ({exc}); using the YAML's grid")
            return initial_grid(cell.policy)
        if pred is None or not (math.isfinite(pred.lr) and pred.lr > 0):
            return initial_grid(cell.policy)
        # Without an interval (two sizes) the YAML's grid size, re-centred; else spanning the
        # 95% prediction interval of this size's optimum.
        grid = predicted_grid(cell.policy, pred.lr, pred.lo, pred.hi)
        span = "no interval" if pred.lo is None or pred.hi is None else f"[{pred.lo:.3g}, {pred.hi:.3g}] (95% prediction)"
        self.messages.append(
            f"{cell.cell_id}: prior LR {pred.lr:.3g} {span} from {len(known)} smaller sizes: "
            f"grid {', '.join(f'{x:.3g}' for x in grid)}"
        )
        return grid

    def _optimum(self, cid: str) -> float | None:
        d = self.decisions.get(cid)
        if d is None or d.status != "bracketed" or d.best is None:
            return None
        return d.interp_lr or d.best.lr

    def display_status(self, cid: str) -> str:
        d = self.decisions.get(cid)
        if d is None:
            return "pending"
        if d.done:
            return d.status
        started = any(rec.assigned or rec.finished for rec in self.points[cid].values())
        return "running" if started else "pending"

    def all_done(self) -> bool:
        if any(self.queue.values()):
            return False
        if any(rec.state in ACTIVE_STATES for pts in self.points.values() for rec in pts.values()):
            return False
        return all(self.decisions.get(cid) is not None and self.decisions[cid].done for cid in self.cells)

    # -- assigning stacks -----------------------------------------------------------------------
    def stack_size(self, cell: Cell, queued: int) -> int:
        setting = self.plan.config.stack
        if setting == "auto":
            return auto_stack(cell, queued, self.plan.config.max_stack, self.host_memory, self.concurrency)
        return max(1, min(int(setting), queued))

    def next_stack(self, tune_trial_id: str) -> dict[str, Any] | str | None:
        """The config of a new trial (a stack of one cell's queued points), None to wait, or FINISHED."""
        if self.stopping:
            return None
        if len(self.trial_points) >= self.concurrency:
            return None  # the YAML's concurrency, also when a restored Tune experiment allowed more
        ready = [cid for cid, q in self.queue.items() if q]
        if not ready:
            if self.all_done():
                self.flush(force=True)
                return FINISHED
            return None
        # Longest work first packs the machine best; ties keep the sweep's order.
        order = {cid: i for i, cid in enumerate(self.cells)}
        cid = min(ready, key=lambda c: (-self.cells[c].flops_per_token * self.cells[c].tokens_per_point, order[c]))
        cell = self.cells[cid]
        k = self.stack_size(cell, len(self.queue[cid]))
        lrs, self.queue[cid] = self.queue[cid][:k], self.queue[cid][k:]
        now = self.clock()
        pids = []
        for lr in lrs:
            pid = cell.point_id(lr)
            rec = self.points[cid].get(pid) or PointRecord(point_id=pid, cell_id=cid, lr=lr)
            self.points[cid][pid] = rec
            rec.attempt += 1
            rec.state, rec.tune_trial_id = "queued", tune_trial_id
            rec.steps, rec.tokens, rec.train_seconds, rec.started_at, rec.finished_at = 0, 0, 0.0, None, None
            if rec.ledger_trial is None:
                rec.ledger_trial = self.ledger.open_point(
                    cid, pid, lr, (cell.policy.lo, cell.policy.hi), attempt=rec.attempt,
                    tune_trial_id=tune_trial_id,
                    cell_attrs={**cell_attrs(cell), "initial_grid": self.initial_grids.get(cid)},
                )
            else:
                self.ledger.update(rec.ledger_trial, state="queued", attempt=rec.attempt, tune_trial_id=tune_trial_id)
            self._row(rec, now)
            pids.append(pid)
        self.trial_points[tune_trial_id] = pids
        self.stats.trials_started += 1
        self.refresh(cid)
        return trial_config(cell, lrs, pids, export=self.plan.config.export_weights, sweep_dir=str(self.plan.sweep_dir),
                            tune_trial_id=tune_trial_id)

    # -- trial events ---------------------------------------------------------------------------
    def _mine(self, tune_trial_id: str, pids: Iterable[str]) -> list[PointRecord]:
        """The still-active points that this Tune trial holds."""
        out = []
        for pid in pids:
            rec = self._record(pid)
            if rec is not None and not rec.finished and rec.tune_trial_id == tune_trial_id:
                out.append(rec)
        return out

    def _record(self, pid: str) -> PointRecord | None:
        cid = pid.rsplit("/lr=", 1)[0]
        return self.points.get(cid, {}).get(pid)

    def on_trial_start(self, tune_trial_id: str, pids: list[str]) -> None:
        now = self.clock()
        self.stats.touch(tune_trial_id, now)
        self.trial_points.setdefault(tune_trial_id, list(pids))
        for rec in self._mine(tune_trial_id, pids):
            if rec.state == "queued":
                rec.state, rec.started_at = "running", now
                self.ledger.update(rec.ledger_trial, state="running", started_at=now)  # type: ignore[arg-type]
                self._row(rec, now)

    def on_result(self, tune_trial_id: str, pids: list[str], result: dict[str, Any]) -> None:
        now = self.clock()
        members = result.get("members") or []
        step = int(result.get("step") or 0)
        tokens = int(result.get("tokens") or 0)
        seconds = float(result.get("train_seconds") or 0.0)
        done = bool(result.get("done"))
        self._count_training(tune_trial_id, seconds)
        self.reported_trials.add(tune_trial_id)
        self.stats.touch(tune_trial_id, now)
        finals = {r.get("point_id"): r for r in result.get("results") or [] if isinstance(r, dict)}
        touched: set[str] = set()
        mine = {rec.point_id: rec for rec in self._mine(tune_trial_id, pids)}
        for member in members:
            rec = mine.get(member.get("point_id"))
            if rec is None:
                continue
            became_running = rec.state == "queued"
            if became_running:
                rec.state, rec.started_at = "running", rec.started_at or now
                self.ledger.update(rec.ledger_trial, state="running", started_at=rec.started_at)  # type: ignore[arg-type]
            rec.steps, rec.tokens, rec.train_seconds = step, tokens, seconds
            train_loss, eval_loss = _finite(member.get("train_loss")), _finite(member.get("eval_loss"))
            self._curve_rows.append({
                "point_id": rec.point_id, "cell_id": rec.cell_id, "method": self.cells[rec.cell_id].method,
                "size": self.cells[rec.cell_id].size, "seed": self.cells[rec.cell_id].seed, "lr": rec.lr,
                "attempt": rec.attempt, "step": step, "tokens": tokens, "train_loss": train_loss,
                "eval_loss": eval_loss, "time": now,
            })
            if eval_loss is not None and rec.ledger_trial is not None:
                self.ledger.report(rec.ledger_trial, step, eval_loss)
            state = member.get("state")
            if state == "diverged":
                self._finish(rec, "diverged", member, finals.get(rec.point_id), now)
                touched.add(rec.cell_id)
            elif done:
                outcome = "ok" if state == "ok" else "failed"
                self._finish(rec, outcome, member, finals.get(rec.point_id), now)
                touched.add(rec.cell_id)
            elif became_running or eval_loss is not None:
                self._row(rec, now)  # progress rows: when it starts and at every evaluation
        for cid in touched:
            self.refresh(cid)
        self.flush()

    def on_trial_end(self, tune_trial_id: str, pids: list[str], result: dict[str, Any] | None, error: str | None) -> None:
        """A trial ended (normally, stopped, or with an error after Tune's retries)."""
        now = self.clock()
        self.stats.touch(tune_trial_id, now)
        if result and result.get("done") and not error:
            self.on_result(tune_trial_id, pids, {**result, "members": result.get("members") or []})
        touched = set()
        unrestorable = bool(error) and tune_trial_id in self.restored_trials and tune_trial_id not in self.reported_trials
        from sweeper.records.storage_errors import is_transient_text

        if is_transient_text(error):  # a full disk killed the trial (its checkpoint): stop, resume later
            self.record_fault(OSError(28, "No space left on device", "a trial's checkpoint"))
        for rec in self._mine(tune_trial_id, pids):
            if unrestorable:
                # A trial of an earlier launch that failed before its first report here could not be
                # restored (typically: Tune's last experiment snapshot names a checkpoint that Tune had
                # already replaced and deleted when the driver was killed). Its points did nothing wrong:
                # re-run them from scratch, as points whose trial did not survive the last launch.
                self._requeue(rec, f"re-run: its trial could not be restored ({error[:200]})", now)
                self.messages.append(f"{rec.point_id}: {rec.reason}")
            elif error and not self.fault:
                self._finish(rec, "failed", {"reason": error}, None, now)
            elif self.stopping:
                continue  # interrupted (or a storage fault): stays active, the next launch resumes it
            else:
                self._finish(rec, "failed", {"reason": "the trial ended without a final report"}, None, now)
            touched.add(rec.cell_id)
        self.trial_points.pop(tune_trial_id, None)
        for cid in touched:
            self.refresh(cid)
        self.flush(force=True)

    def forget_restored_trials(self, why: str) -> int:
        """Tune could not restore its last run: the points its trials held train again from the
        start, in a new Tune run. Returns how many points were re-queued."""
        now = self.clock()
        requeued = 0
        for tid in sorted(self.restored_trials):
            for rec in self._mine(tid, self.trial_points.pop(tid, [])):
                self._requeue(rec, f"re-run: {why}", now)
                requeued += 1
        self.restored_trials.clear()
        for cid in self.cells:
            self.refresh(cid)
        self.flush(force=True)
        return requeued

    def _requeue(self, rec: PointRecord, reason: str, now: float | None = None) -> None:
        """An active point whose trial is gone trains again from the start (same attempt)."""
        rec.state, rec.tune_trial_id, rec.reason = "queued", None, reason
        self.queue[rec.cell_id].append(rec.lr)
        self._row(rec, now)

    def record_fault(self, exc: BaseException) -> bool:
        """The ledger or the store failed (disk full, ledger locked...): stop like Ctrl-C, so that
        in-flight points stay active and resume on the next launch. True the first time."""
        first = self.fault is None
        if first:
            from sweeper.records.storage_errors import describe

            self.fault = describe(exc, self.ledger.url)
            self.messages.append(f"stopping: {self.fault}")
        self.stopping = True
        return first

    def should_stop(self, tune_trial_id: str, pids: list[str]) -> bool:
        """Stop a trial none of whose points is still its to train (a restored trial of finished points)."""
        return bool(pids) and not self._mine(tune_trial_id, pids)

    def _count_training(self, tune_trial_id: str, seconds: float) -> None:
        last = self.stats.trial_seconds.get(tune_trial_id)
        if last is None:
            # A restored trial reports time from before this launch: count from its first report here.
            last = seconds if tune_trial_id in self.restored_trials else 0.0
        if seconds > last:
            self.stats.train_seconds += seconds - last
        self.stats.trial_seconds[tune_trial_id] = max(seconds, last)

    def _finish(self, rec: PointRecord, outcome: str, member: dict[str, Any], final: dict[str, Any] | None,
                now: float) -> None:
        final = final or {}
        rec.reason = member.get("reason") or final.get("reason")
        rec.diverged_step = member.get("diverged_step") if member.get("diverged_step") is not None else final.get("diverged_step")
        rec.init_loss = _finite(final.get("init_loss", rec.init_loss))
        rec.accuracy = _finite(final.get("accuracy"))
        rec.corpus = final.get("corpus") or rec.corpus
        if final.get("steps") is not None:
            rec.steps = int(final["steps"])
        if final.get("tokens") is not None:
            rec.tokens = int(final["tokens"])
        if outcome == "ok":
            loss = _finite(final.get("loss", member.get("eval_loss")))
            objective = _finite(final.get("objective", loss))
            if objective is None:
                outcome, rec.reason = "failed", "finished without a finite evaluation loss"
            rec.loss, rec.objective = loss, objective
        else:
            rec.loss = rec.objective = None
        if rec.corpus and self.expected_corpus is None:
            self.expected_corpus = rec.corpus
        elif rec.corpus and rec.corpus != self.expected_corpus:
            outcome = "failed"
            rec.reason = (f"data fingerprint {rec.corpus} differs from the sweep's {self.expected_corpus}: "
                          "the corpus changed since the sweep started")
            rec.loss = rec.objective = None
            self.messages.append(f"{rec.point_id}: {rec.reason}")
        rec.state, rec.finished_at = outcome, now
        if rec.ledger_trial is not None:
            self.ledger.finish(rec.ledger_trial, outcome, rec.objective,
                               {**rec.metrics(), "lr": rec.lr, "attempt": rec.attempt})
        self.stats.points_finished += 1
        self._row(rec, now)

    # -- store ------------------------------------------------------------------------------------
    def _row(self, rec: PointRecord, now: float | None = None) -> None:
        cell = self.cells[rec.cell_id]
        self._point_rows.append({
            "point_id": rec.point_id, "cell_id": rec.cell_id, "method": cell.method, "family": cell.family,
            "size": cell.size, "depth": cell.depth, "width": cell.width, "seed": cell.seed, "params": cell.params,
            "params_nonembed": cell.params_nonembed, "flops_per_token": cell.flops_per_token, "lr": rec.lr,
            "state": rec.state, "objective": rec.objective, "loss": rec.loss, "accuracy": rec.accuracy,
            "init_loss": rec.init_loss, "diverged_step": rec.diverged_step, "reason": rec.reason, "steps": rec.steps,
            "tokens": rec.tokens, "train_seconds": rec.train_seconds, "trial_id": rec.tune_trial_id,
            "attempt": rec.attempt, "started_at": rec.started_at, "finished_at": rec.finished_at,
            "corpus": rec.corpus,
        })
        self._cells_dirty = True

    def cell_rows(self) -> list[dict[str, Any]]:
        now = self.clock()
        rows = []
        for cid, cell in self.cells.items():
            d = self.decisions.get(cid) or CellDecision("pending")
            recs = list(self.points[cid].values())
            rows.append({
                "cell_id": cid, "method": cell.method, "family": cell.family, "size": cell.size, "depth": cell.depth,
                "width": cell.width, "seed": cell.seed, "params": cell.params, "status": self.display_status(cid),
                "n_points": sum(r.finished for r in recs), "n_running": sum(r.assigned for r in recs),
                "n_diverged": sum(r.state == "diverged" for r in recs),
                "best_lr": d.best.lr if d.best else None, "best_objective": d.best.objective if d.best else None,
                "interp_lr": d.interp_lr, "interp_objective": d.interp_objective, "updated_at": now,
            })
        rows += [dict(row) for cid, row in self.other_cells.items() if cid not in self.cells]
        return rows

    def flush(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_flush < FLUSH_SECONDS:
            return
        if self._point_rows:
            rows, self._point_rows = self._point_rows, []
            try:
                self.store.append_points(rows)
            except BaseException:  # e.g. a full disk: keep the rows for the next flush
                self._point_rows = rows + self._point_rows
                raise
        if self._curve_rows:
            rows, self._curve_rows = self._curve_rows, []
            try:
                self.store.append_curves(rows)
            except BaseException:
                self._curve_rows = rows + self._curve_rows
                raise
        if self._cells_dirty:
            self.store.write_cells(self.cell_rows())
            self._cells_dirty = False
        self._last_flush = now


def _apply_metrics(rec: PointRecord, metrics: dict[str, Any]) -> None:
    for key in ("loss", "accuracy", "init_loss", "train_seconds", "started_at", "finished_at"):
        setattr(rec, key, _finite(metrics.get(key)))
    rec.train_seconds = rec.train_seconds or 0.0
    rec.reason = metrics.get("reason")
    rec.corpus = metrics.get("corpus")
    rec.diverged_step = metrics.get("diverged_step")
    rec.steps = int(metrics.get("steps") or 0)
    rec.tokens = int(metrics.get("tokens") or 0)
    if rec.objective is None:
        rec.objective = _finite(metrics.get("objective")) if rec.state == "ok" else None


def cell_attrs(cell: Cell) -> dict[str, Any]:
    """Study user attrs of a cell in the ledger (readable in optuna-dashboard)."""
    return {
        "method": cell.method, "scheme": cell.scheme, "family": cell.family, "size": cell.size, "depth": cell.depth,
        "width": cell.width, "seed": cell.seed, "params": cell.params, "params_nonembed": cell.params_nonembed,
        "flops_per_token": cell.flops_per_token, "tokens_per_point": cell.tokens_per_point,
        "fingerprint": cell.fingerprint,
    }


def trial_config(cell: Cell, lrs: list[float], pids: list[str], *, export: bool, sweep_dir: str,
                 tune_trial_id: str) -> dict[str, Any]:
    """The Ray Tune config of one trial: the trial spec plus what the sweeper's adapters read."""
    from trials.spec import TrialSpec

    spec = TrialSpec(model=cell.model, train=cell.train, data=cell.data, divergence=cell.divergence,
                     lrs=list(lrs), seed=cell.seed, point_ids=list(pids))
    config: dict[str, Any] = {"spec": spec.to_dict(), "cell_id": cell.cell_id, "resources": dict(cell.resources)}
    if export:
        # exports/<cell>/<trial>/<member>/{model.safetensors,config.json}; config.json names the point_id
        config["export_dir"] = f"{sweep_dir}/exports/{cell.cell_id.replace('/', '_')}/{tune_trial_id}"
    return config
