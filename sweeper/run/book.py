"""The cell book: every cell's points, queue of learning rates and bracketing decision.

Pure (no Ray, no ledger, no store, no clock): the caller hands it typed events — a stack of
points assigned to a Tune trial, points started, a step report, a Tune trial gone — with the
time, and gets back the `Change`s to record (the new `PointRow` of each point touched, the
ledger operation it needs, a learning-curve row) while the book keeps the current row of every
point and re-decides the cells it touched. `sweeper.run.recorder` writes the changes;
`sweeper.run.sweep_run` wires the book, the Tune-trial bookkeeping and the recorder together.

Rules
- Point states change only through `PointEvent`s and the one table `TRANSITIONS`; an event a
  point's state does not allow is a bug and raises. A report about a point that is not the
  reporting trial's to train (finished already: a restored trial replaying steps; or re-queued
  since) changes nothing; its reason is counted in `ignored`.
- A point is finished `ok` or `stalled` only by a final report (`done`; stalled: its final
  evaluation loss is not `divergence.stall_margin` below the frequency-only loss, the trial
  says so), `diverged` as soon as a report says so; a trial that ends otherwise fails its points, unless the sweep is stopping (Ctrl-C, a
  storage fault), when they stay active and the next launch resumes them.
- A finished point is never assigned again in a launch (`--retry-failed` re-queues failed ones at
  load; `infra_failed` ones are re-queued at load without being asked).
- Infrastructure faults (`infra_fault`: out of memory, storage, a lost node or actor, preemption;
  `trials.infra`) never fail a point: it is queued again after a backoff (out of memory: its cell's
  stacks are halved, and at one learning rate a stack its micro-batch), and after `infra_retries` of
  them in one launch it ends `infra_failed`, which its cell waits for (`sweeper.search.bracketing`).
- New learning rates come from `sweeper.search.bracketing.decide` only, first ones from
  `sweeper.search.prior.first_grid`. Every learning rate a cell decides to train joins its
  *plan* (`plans`), and each assignment carries the plan so far to the ledger, in the same
  commit as the point's entry: a relaunch queues again the planned learning rates that no
  entry holds and re-derives nothing (see `sweeper.records`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from models.family import get_family
from sweeper.core.ids import cell_of
from sweeper.core.rows import CellRow, CurvePoint, PointRow, cell_status, encode_batches, encode_loop_losses, finite
from sweeper.core.states import CellStatus, PointState
from sweeper.core.grid import CellDecision, GridPoint
from sweeper.search.bracketing import decide
from sweeper.search.planner import Cell
from sweeper.search.prior import first_grid
from trials.spec import MemberReport, PointResult, StepReport


class PointEvent(Enum):
    ASSIGN = "assign"  # given to a Tune trial (again)
    START = "start"  # the trial runs it
    DIVERGE = "diverge"
    COMPLETE = "complete"  # a final report: ok
    STALL = "stall"  # a final report: trained to the end, learned nothing beyond token frequencies
    FAIL = "fail"
    REQUEUE = "requeue"  # its trial is gone: train it again from the start
    RETRY = "retry"  # --retry-failed at load (and every infra_failed point)
    INFRA_FAIL = "infra_fail"  # infrastructure faults outlasted the retries of this launch


_Q, _R, _OK, _DIV, _ST, _FAIL, _INFRA = (PointState.QUEUED, PointState.RUNNING, PointState.OK, PointState.DIVERGED,
                                         PointState.STALLED, PointState.FAILED, PointState.INFRA_FAILED)
TRANSITIONS: dict[tuple[PointState, PointEvent], PointState] = {
    (_Q, PointEvent.ASSIGN): _Q,
    (_Q, PointEvent.START): _R,
    (_Q, PointEvent.DIVERGE): _DIV, (_R, PointEvent.DIVERGE): _DIV,
    (_Q, PointEvent.COMPLETE): _OK, (_R, PointEvent.COMPLETE): _OK,
    (_Q, PointEvent.STALL): _ST, (_R, PointEvent.STALL): _ST,
    (_Q, PointEvent.FAIL): _FAIL, (_R, PointEvent.FAIL): _FAIL,
    (_Q, PointEvent.REQUEUE): _Q, (_R, PointEvent.REQUEUE): _Q,
    (_Q, PointEvent.INFRA_FAIL): _INFRA, (_R, PointEvent.INFRA_FAIL): _INFRA,
    (_FAIL, PointEvent.RETRY): _Q, (_INFRA, PointEvent.RETRY): _Q,
}


class IllegalTransition(RuntimeError):
    """An event a point's state does not allow (a bug in the caller)."""


def transition(state: PointState, event: PointEvent) -> PointState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"a {state} point cannot {event.value}") from None


class LedgerOp(Enum):
    NONE = "none"
    ASSIGN = "assign"  # open an entry for the point, or update its open one (state, attempt, Tune trial)
    START = "start"  # state running, started_at
    FINISH = "finish"  # final state, objective and metrics


@dataclass(frozen=True)
class Change:
    """One thing to record about a point, in order: the ledger first, then the store."""

    row: PointRow
    ledger: LedgerOp = LedgerOp.NONE
    store: bool = True  # append the row to the store's points table
    report: tuple[int, float] | None = None  # (step, eval loss): a ledger intermediate value
    curve: CurvePoint | None = None
    plan: tuple[float, ...] = ()  # with ASSIGN: every learning rate the cell has planned so far


@dataclass
class LoadCounts:
    finished: int = 0
    resumed: int = 0
    rerun: int = 0
    retried: int = 0
    infra_retried: int = 0  # infra_failed points of an earlier launch, queued again

    def as_dict(self) -> dict[str, int]:
        return {"finished": self.finished, "resumed": self.resumed, "rerun": self.rerun, "retried": self.retried,
                "infra_retried": self.infra_retried}


@dataclass(frozen=True)
class InfraRetry:
    """How a launch retries points that infrastructure faults ended: `retries` new trials per point, the
    first after `backoff` seconds, doubling."""

    retries: int = 3
    backoff: float = 10.0

    def delay(self, attempt: int) -> float:
        return self.backoff * 2 ** max(0, attempt - 1)


class CellBook:
    def __init__(self, cells: Iterable[Cell]) -> None:
        self.cells: dict[str, Cell] = {c.cell_id: c for c in cells}
        self.points: dict[str, dict[str, PointRow]] = {cid: {} for cid in self.cells}
        self.queue: dict[str, list[float]] = {cid: [] for cid in self.cells}
        self.decisions: dict[str, CellDecision] = {}
        self.waiting: dict[str, str] = {}  # cell -> why it cannot start yet
        self.plans: dict[str, list[float]] = {cid: [] for cid in self.cells}  # cell -> every LR it decided to train
        self.expected_corpus: str | None = None
        self.notes: list[str] = []  # notable events, for the live display
        self.ignored: Counter[str] = Counter()  # events that changed nothing, by reason
        self.decisions_changed = True  # a decision changed since the caller last looked
        self.unigram: dict[str, object] | None = None  # the data's unigram entropy as the first final result gave it
        self.infra = InfraRetry()
        self.infra_attempts: Counter[str] = Counter()  # point -> infrastructure retries in this launch
        self.not_before: dict[str, float] = {}  # point -> earliest time of its retry (the backoff)
        self.stack_cap: dict[str, int] = {}  # cell -> largest stack since one of its stacks ran out of memory
        self.micro_batch: dict[str, int] = {}  # cell -> micro-batch since a one-point stack ran out of memory

    # -- loading --------------------------------------------------------------------------------
    def load(self, rows: Iterable[PointRow], *, holders: Mapping[str, str] | None = None, retry_failed: bool = False,
             store_states: Mapping[str, str] | None = None,
             recorded_plans: Mapping[str, list[float]] | None = None) -> tuple[LoadCounts, list[Change]]:
        """Take the ledger's points (their current rows); re-queue active points no restored Tune
        trial holds.

        `holders`: point id -> the restored Tune trial that will resume it. `store_states`: the
        store's state per point (a row is appended where the store lags). `recorded_plans`: each
        cell's plan as the ledger recorded it (its learning rates never assigned before a kill are
        queued again, see `_requeue_planned`)."""
        holders, store_states = holders or {}, store_states or {}
        counts, changes = LoadCounts(), []
        for row in rows:
            cid = row.cell.cell_id
            if cid not in self.cells:
                continue
            self.points[cid][row.point_id] = row
            if row.corpus and self.expected_corpus is None:
                self.expected_corpus = row.corpus
            again = row.state.retried_on_relaunch or (retry_failed and row.state is PointState.FAILED)
            if row.state.is_finished and not again:
                counts.finished += 1
                if store_states.get(row.point_id) != row.state:
                    changes.append(Change(row))
            elif row.state.is_finished:  # retry: a new ledger entry, attempt counting on
                if row.state.retried_on_relaunch:
                    counts.infra_retried += 1
                else:
                    counts.retried += 1
                new = self._set(row, PointEvent.RETRY, tune_trial_id=None, reason=None, objective=None)
                self.queue[cid].append(new.lr)
                changes.append(Change(new))
            elif row.tune_trial_id is not None and holders.get(row.point_id) == row.tune_trial_id:
                counts.resumed += 1
                if store_states.get(row.point_id) != row.state:
                    changes.append(Change(row))
            else:  # stale: its trial is gone; run it again from the start
                changes.append(self._requeue(row, "re-run: its trial did not survive the last launch"))
                counts.rerun += 1
        for cid, plan in (recorded_plans or {}).items():
            self._requeue_planned(cid, plan)
        for cid in self.cells:
            self.refresh(cid)
        return counts, changes

    def _requeue_planned(self, cid: str, plan: list[float]) -> None:
        """Queue again the planned learning rates of a cell that were never assigned.

        The queue lives in memory only. A driver killed after the first points of a decision
        (the first grid, a refinement, an extension) were assigned but before the rest were would
        otherwise resume with part of it, which `decide` takes for the whole: it extends or stops
        from there and explores other learning rates than an uninterrupted run."""
        if cid not in self.cells or not self.points[cid]:
            return  # nothing of the cell was assigned: nothing of its plan started, it is decided afresh
        policy = self.cells[cid].policy  # the LR policy may have changed since: stay inside its bounds
        known = {row.lr for row in self.points[cid].values()}
        planned = {float(lr) for lr in plan if policy.lo <= float(lr) <= policy.hi}
        self.plans[cid] = sorted(planned | known | set(self.plans[cid]))
        waiting = known | set(self.queue[cid])
        self.queue[cid].extend(lr for lr in self.plans[cid] if lr not in waiting)

    # -- decisions ------------------------------------------------------------------------------
    def grid_points(self, cid: str) -> list[GridPoint]:
        known = {row.lr for row in self.points[cid].values()}
        pts = [row.grid_point() for row in self.points[cid].values()]
        pts += [GridPoint(lr, PointState.QUEUED) for lr in self.queue[cid] if lr not in known]
        return pts

    def refresh(self, cid: str) -> CellDecision:
        """Re-decide a cell and queue what it proposes."""
        cell = self.cells[cid]
        pts = self.grid_points(cid)
        initial = None
        if not pts:
            first = first_grid(cid, cell.x, cell.policy, cell.prior, self._smaller(cell))
            if first.note:
                self.notes.append(first.note)
            if first.lrs is None:
                self.waiting[cid] = first.waiting or "waiting"
                d = CellDecision("pending", reason=self.waiting[cid])
                self.decisions[cid] = d
                return d
            initial = first.lrs
        d = decide(pts, cell.policy, initial=initial)
        if d.next_lrs:
            self.queue[cid].extend(d.next_lrs)
            self.plans[cid].extend(d.next_lrs)
            d = decide(self.grid_points(cid), cell.policy)
        self.waiting.pop(cid, None)
        previous = self.decisions.get(cid)
        if previous != d:
            self.decisions_changed = True
        self.decisions[cid] = d
        if d.done and not (previous and previous.done):
            for other in [c for c in self.waiting if self.cells[c].method == cell.method]:
                self.refresh(other)  # a finished size may be what a prior was waiting for
        return d

    def _smaller(self, cell: Cell) -> list[tuple[float, CellDecision | None]]:
        # The same seed's smaller sizes only: pooled over seeds, a size would open on whichever
        # seeds happened to be done, and its grid would depend on the order trials finish.
        return [(c.x, self.decisions.get(c.cell_id)) for c in self.cells.values()
                if c.method == cell.method and c.seed == cell.seed and c.x < cell.x]

    def status(self, cid: str) -> CellStatus:
        return cell_status(self.decisions.get(cid), self.points[cid].values())

    def cell_rows(self, now: float) -> list[CellRow]:
        return [CellRow.of(cell.facts, self.points[cid].values(), self.decisions.get(cid), now)
                for cid, cell in self.cells.items()]

    def all_done(self) -> bool:
        if any(self.queue.values()):
            return False
        if any(row.state.is_active for pts in self.points.values() for row in pts.values()):
            return False
        return all(self.decisions.get(cid) is not None and self.decisions[cid].done for cid in self.cells)

    # -- assigning stacks -----------------------------------------------------------------------
    def _ready(self, cid: str, now: float | None) -> list[float]:
        """The cell's queued learning rates whose infrastructure backoff is over (all of them without `now`)."""
        if now is None or not self.not_before:
            return list(self.queue[cid])
        cell = self.cells[cid]
        return [lr for lr in self.queue[cid] if self.not_before.get(cell.point_id(lr), 0.0) <= now]

    def next_cell(self, now: float | None = None) -> str | None:
        """The cell whose queued points go next: the longest work first (it packs the machine
        best); ties keep the sweep's order. None when nothing is queued (or every queued point
        waits for its backoff after an infrastructure fault)."""
        ready = [cid for cid, q in self.queue.items() if q and self._ready(cid, now)]
        if not ready:
            return None
        order = {cid: i for i, cid in enumerate(self.cells)}
        return min(ready, key=lambda c: (-self.cells[c].flops_per_token * self.cells[c].tokens_per_point, order[c]))

    def assign(self, cid: str, k: int, tune_trial_id: str, now: float | None = None) -> list[Change]:
        """The next `k` ready queued learning rates of cell `cid` (at most its stack cap after running
        out of memory) become one Tune trial's points."""
        k = min(k, self.stack_cap.get(cid, k))
        lrs = self._ready(cid, now)[:k]
        for lr in lrs:
            self.queue[cid].remove(lr)
        cell = self.cells[cid]
        changes = []
        for lr in lrs:
            row = self.points[cid].get(cell.point_id(lr)) or PointRow(cell.facts, lr)
            new = self._set(row, PointEvent.ASSIGN, attempt=row.attempt + 1, tune_trial_id=tune_trial_id,
                            steps=0, tokens=0, train_seconds=0.0, started_at=None, finished_at=None)
            changes.append(Change(new, LedgerOp.ASSIGN, plan=tuple(self.plans[cid])))
        self.refresh(cid)
        return changes

    # -- Tune trial events ----------------------------------------------------------------------
    def held(self, tune_trial_id: str, point_ids: Iterable[str]) -> list[PointRow]:
        """The still-active points that this Tune trial holds."""
        out = []
        for pid in point_ids:
            row = self._row(pid)
            if row is not None and row.state.is_active and row.tune_trial_id == tune_trial_id:
                out.append(row)
        return out

    def start(self, tune_trial_id: str, point_ids: Iterable[str], now: float) -> list[Change]:
        changes = []
        for row in self.held(tune_trial_id, point_ids):
            if row.state is PointState.QUEUED:
                new = self._set(row, PointEvent.START, started_at=now)
                changes.append(Change(new, LedgerOp.START))
        return changes

    def report(self, tune_trial_id: str, point_ids: Iterable[str], report: StepReport, now: float) -> list[Change]:
        """A Tune trial's step report: progress of its points; finished ones are decided."""
        finals = {r.point_id: r for r in report.results or []}
        mine = {row.point_id: row for row in self.held(tune_trial_id, point_ids)}
        changes: list[Change] = []
        touched: set[str] = set()
        for member in report.members:
            row = mine.get(member.point_id)
            if row is None:
                self.ignored[self._why_ignored(tune_trial_id, member.point_id)] += 1
                continue
            became_running = row.state is PointState.QUEUED
            if became_running:
                row = self._set(row, PointEvent.START, started_at=row.started_at or now)
                changes.append(Change(row, LedgerOp.START, store=False))
            row = self._put(row.evolve(steps=report.step, tokens=report.tokens, train_seconds=report.train_seconds))
            train_loss, eval_loss = finite(member.train_loss), finite(member.eval_loss)
            curve = CurvePoint(row, report.step, report.tokens, train_loss, eval_loss, now,
                               eval_loss_se=finite(member.eval_loss_se))
            progress = became_running or eval_loss is not None
            step_report = (report.step, eval_loss) if eval_loss is not None else None
            if member.state == PointState.DIVERGED or report.done:
                changes.append(Change(row, store=False, report=step_report, curve=curve))
                outcome = {PointState.DIVERGED: PointEvent.DIVERGE, PointState.OK: PointEvent.COMPLETE,
                           PointState.STALLED: PointEvent.STALL}.get(PointState(member.state), PointEvent.FAIL)
                changes.append(self._finish(row, outcome, member, finals.get(row.point_id), now))
                touched.add(row.cell.cell_id)
            else:
                changes.append(Change(row, store=progress, report=step_report, curve=curve))
        for cid in touched:
            self.refresh(cid)
        return changes

    def trial_gone(self, tune_trial_id: str, point_ids: Iterable[str], *, error: str | None, unrestorable: bool,
                   stopping: bool, now: float) -> list[Change]:
        """A Tune trial ended without (more) reports for its points: normally, stopped, or with an
        error after Tune's retries. `unrestorable`: a trial of an earlier launch that failed before
        its first report here could not be restored (typically: Tune's last experiment snapshot
        names a checkpoint that Tune had already replaced and deleted when the driver was killed);
        its points did nothing wrong and train again from scratch. `stopping`: the sweep stops
        (Ctrl-C, a storage fault): the points stay active and the next launch resumes them."""
        changes = []
        touched = set()
        for row in self.held(tune_trial_id, point_ids):
            if unrestorable:
                change = self._requeue(row, f"re-run: its trial could not be restored ({(error or '')[:200]})")
                self.notes.append(f"{row.point_id}: {change.row.reason}")
            elif error:
                change = self._fail(row, error, now)
            elif stopping:
                continue
            else:
                change = self._fail(row, "the trial ended without a final report", now)
            changes.append(change)
            touched.add(row.cell.cell_id)
        for cid in touched:
            self.refresh(cid)
        return changes

    def infra_fault(self, tune_trial_id: str, point_ids: Iterable[str], kind: str, message: str, now: float,
                    *, micro_batch: int | None = None) -> list[Change]:
        """A Tune trial ended by an infrastructure fault (`trials.infra`): its points are queued again
        after a backoff, or end `infra_failed` once they had `infra.retries` retries in this launch.
        Out of memory: the cell's stacks are halved from now on (two trials for the points of one), and
        a one-point stack gets half its micro-batch (`micro_batch`: the trial's; a divisor of the batch)."""
        held = self.held(tune_trial_id, point_ids)
        if not held:
            return []
        cid = held[0].cell.cell_id
        if kind == "oom":
            if len(held) > 1:
                self.stack_cap[cid] = min(self.stack_cap.get(cid, len(held)), (len(held) + 1) // 2)
            else:
                smaller = self._smaller_micro_batch(cid, micro_batch)
                if smaller is not None:
                    self.micro_batch[cid] = smaller
        changes = []
        for row in held:
            attempt = self.infra_attempts[row.point_id] + 1
            self.infra_attempts[row.point_id] = attempt
            what = f"{kind}: {message}"[:300]
            if attempt > self.infra.retries:
                new = self._set(row, PointEvent.INFRA_FAIL, tune_trial_id=None, finished_at=now,
                                reason=f"infrastructure fault after {self.infra.retries} retries ({what})")
                changes.append(Change(new, LedgerOp.FINISH))
                self.notes.append(f"{row.point_id}: infra_failed ({what}); the next launch trains it again")
                continue
            delay = self.infra.delay(attempt)
            self.not_before[row.point_id] = now + delay
            change = self._requeue(row, f"infrastructure fault ({what}): retry {attempt} of {self.infra.retries} "
                                        f"in {delay:g} s")
            self.notes.append(f"{row.point_id}: {change.row.reason}")
            changes.append(change)
        self.refresh(cid)
        return changes

    def _smaller_micro_batch(self, cid: str, current: int | None) -> int | None:
        """The largest divisor of the batch below half the current micro-batch (None: at 1 already, or the
        family does not split batches)."""
        cell = self.cells[cid]
        batch = int(cell.train.batch_size)
        now = self.micro_batch.get(cid) or current or cell.train.micro_batch or batch
        if not get_family(cell.family).micro_batch or now <= 1:
            return None
        return max(m for m in range(1, now // 2 + 1) if batch % m == 0)

    def waiting_for_backoff(self, now: float) -> bool:
        """Some queued point waits for its backoff after an infrastructure fault."""
        return any(q and len(self._ready(cid, now)) < len(q) for cid, q in self.queue.items())

    def requeue(self, rows: Iterable[PointRow], reason: str) -> list[Change]:
        """Points whose Tune trial will never report (a Tune run that could not be restored)
        train again from the start."""
        changes = [self._requeue(row, reason) for row in rows]
        for cid in self.cells:
            self.refresh(cid)
        return changes

    # -- one point ------------------------------------------------------------------------------
    def _row(self, pid: str) -> PointRow | None:
        try:
            cid = cell_of(pid)
        except ValueError:  # not one of ours
            return None
        return self.points.get(cid, {}).get(pid)

    def _why_ignored(self, tune_trial_id: str, pid: str) -> str:
        row = self._row(pid)
        if row is None:
            return "a report about a point this sweep does not know"
        if row.state.is_finished:
            return f"a report about a {row.state} point (a restored trial replaying finished work)"
        return "a report about a point another Tune trial holds now"

    def _put(self, row: PointRow) -> PointRow:
        self.points[row.cell.cell_id][row.point_id] = row
        return row

    def _set(self, row: PointRow, event: PointEvent, **changes: object) -> PointRow:
        return self._put(row.evolve(state=transition(row.state, event), **changes))

    def _requeue(self, row: PointRow, reason: str) -> Change:
        """An active point whose trial is gone trains again from the start (same attempt)."""
        new = self._set(row, PointEvent.REQUEUE, tune_trial_id=None, reason=reason)
        self.queue[new.cell.cell_id].append(new.lr)
        return Change(new)

    def _fail(self, row: PointRow, reason: str, now: float) -> Change:
        return self._finish(row, PointEvent.FAIL, None, None, now, reason=reason)

    def _finish(self, row: PointRow, event: PointEvent, member: MemberReport | None, final: PointResult | None,
                now: float, *, reason: str | None = None) -> Change:
        """A point's final row: its numbers from the final result, its state checked (an ok point
        needs a finite objective, and its data fingerprint must be the sweep's)."""
        reason = reason or (member.reason if member else None) or (final.reason if final else None)
        diverged_step = member.diverged_step if member and member.diverged_step is not None else (
            final.diverged_step if final else None)
        numbers: dict[str, object] = {
            "init_loss": final.init_loss if final else row.init_loss,
            "accuracy": final.accuracy if final else None,
            "corpus": (final.corpus if final else None) or row.corpus,
        }
        if final is not None and final.steps is not None:
            numbers["steps"] = int(final.steps)
        if final is not None and final.tokens is not None:
            numbers["tokens"] = int(final.tokens)
        loss = objective = loss_se = None
        if event in (PointEvent.COMPLETE, PointEvent.STALL):
            loss = finite(final.loss if final else (member.eval_loss if member else None))
            loss_se = finite(final.loss_se if final else (member.eval_loss_se if member else None))
            if event is PointEvent.COMPLETE:
                objective = finite(final.objective if final else loss)
                if objective is None:
                    event, reason = PointEvent.FAIL, "finished without a finite evaluation loss"
                    loss = loss_se = None
        if final is not None:
            numbers["unigram_loss"] = final.unigram_loss
            if self.unigram is None and final.unigram_entropy is not None:
                self.unigram = {"nats": final.unigram_entropy, "counted": final.unigram_counted,
                                "exact": final.unigram_exact, "kind": None, "fingerprint": final.corpus}
            if loss is not None and final.loss_batches:
                numbers["loss_batches"] = encode_batches(final.loss_batches)
            if loss is not None:  # the final evaluation's other numbers: by loop count, LAMBADA
                numbers["loop_losses"] = encode_loop_losses(final.loop_losses)
                numbers["lambada_ppl"] = final.lambada_ppl
        corpus = numbers["corpus"]
        if corpus and self.expected_corpus is None:
            self.expected_corpus = str(corpus)
        elif corpus and corpus != self.expected_corpus:
            event = PointEvent.FAIL
            reason = (f"data fingerprint {corpus} differs from the sweep's {self.expected_corpus}: "
                      "the corpus changed since the sweep started")
            loss = objective = loss_se = None
            for key in ("loss_batches", "loop_losses", "lambada_ppl"):
                numbers.pop(key, None)
            self.notes.append(f"{row.point_id}: {reason}")
        new = self._set(row, event, reason=reason, diverged_step=diverged_step, loss=loss, objective=objective,
                        loss_se=loss_se, finished_at=now, **numbers)
        return Change(new, LedgerOp.FINISH)
