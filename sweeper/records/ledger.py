"""The ledger of record: an Optuna storage with one study per cell and one ledger entry (an
Optuna trial) per point.

Optuna gives a durable, concurrent-reader store with a UI (`optuna-dashboard
sqlite:///DIR/ledger.db`) and any backend a cluster offers (SQLite by default, PostgreSQL
or MySQL by URL, a journal file). The driver is its only writer; it drives the storage
directly (no sampler: the bracketing policy picks the learning rates).

Mapping
- study `cell_id` (e.g. `layerrope/L48/s0`), direction minimize, user attrs describing the cell;
- a ledger entry per point (an Optuna trial; not to be confused with the Ray Tune trial that
  trains it): param `lr` (log-float), user attrs `point_id`, `state`, `attempt`, `tune_trial_id`,
  `plan` (every learning rate its cell had planned when the entry was created: written in the
  entry's one commit), `started_at` (once it runs) and `metrics` (every final number:
  `PointRow.metrics()`);
  intermediate values = eval losses;
- states: RUNNING = queued or running (see the `state` attr), COMPLETE = ok (value = the
  objective), PRUNED = diverged, or stalled when the `state` attr says so (like a diverged
  point, a stalled one is no optimum; its attr `reason` says it learned nothing beyond token
  frequencies, and its metrics keep its loss), FAIL = failed (attr `reason`), or infra_failed when the
  `state` attr says so (an infrastructure fault outlasted the driver's retries). A point retried after
  a failure gets a new entry; the newest entry of a point_id is the point.

`Ledger` is the contract the driver writes through (one commit per call); `OptunaLedger`
implements it over any Optuna storage.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.distributions import FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState, create_trial

from sweeper.records.crash_points import durable_write
from sweeper.core.rows import CellFacts, PointRow
from sweeper.core.states import ACTIVE_STATES, PointState
from sweeper.records.storage_errors import lock_timeout

LEDGER_FILE = "ledger.db"

_STATE_OF: dict[TrialState, PointState] = {TrialState.COMPLETE: PointState.OK, TrialState.PRUNED: PointState.DIVERGED,
                                           TrialState.FAIL: PointState.FAILED}


def storage_url(setting: str, sweep_dir: Path) -> str:
    """The Optuna storage URL for the YAML's `ledger` setting."""
    if setting == "sqlite":
        return f"sqlite:///{(sweep_dir / LEDGER_FILE).resolve()}"
    return setting


@dataclass(frozen=True)
class LedgerEntry:
    """A point as the ledger records it: its current row, and its open entry id while it is
    active (finished entries are never written again: None)."""

    row: PointRow
    entry: int | None
    number: int  # the entry's order within its cell (the newest entry of a point is the point)

    def with_facts(self, facts: CellFacts) -> LedgerEntry:
        """The same entry with the planner's facts about its cell (they name the blocks and the loop
        count exactly; a ledger written before store version 2 did not)."""
        return replace(self, row=replace(self.row, cell=facts))


def _clean(value: Any) -> Any:
    """JSON-safe user attrs: NaN/inf become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class Ledger(Protocol):
    """The record of a sweep: every point and its final numbers, written before the store.

    Each call is one durable commit; readers see a point's entry as the last call left it."""

    url: str

    def open(self, row: PointRow, bounds: tuple[float, float], cell_attrs: Mapping[str, Any], *,
             plan: Sequence[float] = ()) -> int:
        """A new entry for a point just assigned, in one commit with `plan` (its cell's planned
        learning rates so far); its cell's entry, with `cell_attrs`, on first use (attributes a
        kill left unwritten are completed)."""
        ...

    def reassign(self, entry: int, row: PointRow) -> None:
        """An open entry's point is assigned again (state queued, attempt, Tune trial)."""
        ...

    def start(self, entry: int, row: PointRow) -> None:
        """Its point runs (state running, started_at)."""
        ...

    def report(self, entry: int, step: int, value: float) -> None:
        """An evaluation loss at `step`."""
        ...

    def finish(self, entry: int, row: PointRow) -> None:
        """Its point finished: state, objective, metrics (never written again)."""
        ...

    def cells(self) -> dict[str, dict[str, Any]]:
        """Every cell with its attributes."""
        ...

    def plans(self) -> dict[str, list[float]]:
        """Every cell's planned learning rates: the union of the plans its entries recorded."""
        ...

    def load(self, *, loop_axis: bool = False) -> list[LedgerEntry]:
        """The current entry of every point (`loop_axis`: see `CellFacts.from_attrs`)."""
        ...


class OptunaLedger:
    """A `Ledger` over an Optuna storage. Opens its storage lazily (Ray Tune pickles objects that
    reach its callbacks)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._storage: Any = None
        self._study_ids: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "_storage": None, "_study_ids": {}}

    @property
    def storage(self) -> Any:
        if self._storage is None:
            self._storage = open_storage(self.url)
        return self._storage

    # -- writing ------------------------------------------------------------------------------
    def study_id(self, cell_id: str, attrs: Mapping[str, Any] | None = None) -> int:
        """The cell's study, created with `attrs` if need be; cached once its attributes are complete."""
        if cell_id in self._study_ids:
            return self._study_ids[cell_id]
        try:
            sid = self.storage.get_study_id_from_name(cell_id)
            written = self.storage.get_study_user_attrs(sid) if attrs else {}
        except KeyError:
            try:
                with durable_write("ledger:study"):
                    sid = self.storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], study_name=cell_id)
            except optuna.exceptions.DuplicatedStudyError:
                sid = self.storage.get_study_id_from_name(cell_id)
            written = {}
        # One commit per attribute: a kill between them leaves some unwritten; the next use completes them.
        for key, value in (attrs or {}).items():
            if key not in written:
                with durable_write("ledger:cell-attr"):
                    self.storage.set_study_user_attr(sid, key, _clean(value))
        self._study_ids[cell_id] = sid
        return sid

    def open(self, row: PointRow, bounds: tuple[float, float], cell_attrs: Mapping[str, Any], *,
             plan: Sequence[float] = ()) -> int:
        sid = self.study_id(row.cell.cell_id, cell_attrs)
        lo, hi = min(bounds[0], row.lr), max(bounds[1], row.lr)
        template = create_trial(
            state=TrialState.RUNNING,
            params={"lr": row.lr},
            distributions={"lr": FloatDistribution(lo, hi, log=True)},
            user_attrs={"point_id": row.point_id, "state": "queued", "attempt": row.attempt,
                        "tune_trial_id": row.tune_trial_id, "plan": [float(lr) for lr in plan]},
        )
        with durable_write("ledger:open"):
            return int(self.storage.create_new_trial(sid, template_trial=template))

    def _update(self, entry: int, **attrs: Any) -> None:
        for key, value in attrs.items():  # one commit each
            with durable_write(f"ledger:{key}"):
                self.storage.set_trial_user_attr(entry, key, _clean(value))

    def reassign(self, entry: int, row: PointRow) -> None:
        self._update(entry, state="queued", attempt=row.attempt, tune_trial_id=row.tune_trial_id)

    def start(self, entry: int, row: PointRow) -> None:
        self._update(entry, state="running", started_at=row.started_at)

    def report(self, entry: int, step: int, value: float) -> None:
        if math.isfinite(value):
            with durable_write("ledger:report"):
                self.storage.set_trial_intermediate_value(entry, step, value)

    def finish(self, entry: int, row: PointRow) -> None:
        """Record a finished point: ok → COMPLETE(objective), diverged and stalled → PRUNED (the
        `state` attr tells them apart), failed and infra_failed → FAIL (the same)."""
        metrics = row.metrics()
        extra = {"reason": metrics["reason"]} if metrics.get("reason") else {}
        self._update(entry, state=row.state.value, metrics=metrics, **extra)
        with durable_write("ledger:finish"):
            if row.state is PointState.OK and row.objective is not None:
                self.storage.set_trial_state_values(entry, TrialState.COMPLETE, [float(row.objective)])
            elif row.state.counts_as_diverged:
                self.storage.set_trial_state_values(entry, TrialState.PRUNED)
            else:
                self.storage.set_trial_state_values(entry, TrialState.FAIL)

    # -- reading ------------------------------------------------------------------------------
    def cells(self) -> dict[str, dict[str, Any]]:
        return {s.study_name: dict(s.user_attrs) for s in self.storage.get_all_studies()}

    def plans(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for study in self.storage.get_all_studies():
            planned: set[float] = set()
            legacy = study.user_attrs.get("initial_grid")  # a ledger written before plans were recorded
            if isinstance(legacy, list):
                planned.update(float(lr) for lr in legacy)
            sid = self.storage.get_study_id_from_name(study.study_name)
            for t in self.storage.get_all_trials(sid, deepcopy=False):
                plan = t.user_attrs.get("plan")
                if isinstance(plan, list):
                    planned.update(float(lr) for lr in plan)
            if planned:
                out[study.study_name] = sorted(planned)
        return out

    def load(self, *, loop_axis: bool = False) -> list[LedgerEntry]:
        out: list[LedgerEntry] = []
        for study in self.storage.get_all_studies():
            sid = self.storage.get_study_id_from_name(study.study_name)  # not cached: see `study_id`
            facts = CellFacts.from_attrs(study.study_name, study.user_attrs, loop_axis=loop_axis)
            latest: dict[str, tuple[int, PointRow]] = {}
            for t in self.storage.get_all_trials(sid, deepcopy=False):
                pid = t.user_attrs.get("point_id")
                if pid is None or "lr" not in t.params:
                    continue
                if t.state == TrialState.RUNNING:
                    recorded = t.user_attrs.get("state")
                    state = PointState(recorded) if recorded in ACTIVE_STATES else PointState.RUNNING
                elif t.state == TrialState.PRUNED and t.user_attrs.get("state") == PointState.STALLED.value:
                    state = PointState.STALLED
                elif t.state == TrialState.FAIL and t.user_attrs.get("state") == PointState.INFRA_FAILED.value:
                    state = PointState.INFRA_FAILED
                elif t.state in _STATE_OF:
                    state = _STATE_OF[t.state]
                else:
                    continue
                row = PointRow.from_ledger(
                    facts, float(t.params["lr"]), state, attempt=int(t.user_attrs.get("attempt", 0)),
                    tune_trial_id=t.user_attrs.get("tune_trial_id"),
                    objective=t.value if t.state == TrialState.COMPLETE else None,
                    # A point still running has no metrics yet; its start time resumes with it.
                    metrics=dict(t.user_attrs.get("metrics") or {"started_at": t.user_attrs.get("started_at")}),
                )
                previous = latest.get(pid)
                if previous is None or t.number > previous[0]:
                    latest[pid] = (t.number, row)
            for number, row in sorted(latest.values(), key=lambda item: item[1].lr):
                entry = None
                if row.state.is_active:  # the driver writes only these again
                    entry = self.storage.get_trial_id_from_study_id_trial_number(sid, number)
                out.append(LedgerEntry(row, entry, number))
        return out


def open_storage(url: str) -> Any:
    """An Optuna storage for a URL: RDB (sqlite/postgresql/mysql) or `journal:PATH`."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if url.startswith("journal:"):
        return JournalStorage(JournalFileBackend(os.path.expanduser(url[len("journal:"):])))
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": lock_timeout()}}
    return optuna.storages.RDBStorage(url, **kwargs)
