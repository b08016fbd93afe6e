"""The one writer of a running sweep's records: the ledger first, then the store.

The cell book says what changed (`sweeper.run.book.Change`); the recorder makes it durable,
in order: the ledger entry of the point at once (the ledger is the record: a kill loses
nothing it holds), the store's rows buffered and appended at most every `FLUSH_SECONDS`
(the store is derived: a relaunch re-derives what a kill lost, from the ledger). A failed
store append keeps its rows for the next flush. Nothing else in the driver writes to the
ledger or the store, so a backend (`sweeper.records.ledger.Ledger`, `sweeper.records.store.Store`)
plugs in here, and so do the experiment trackers (`sweeper.tracking.Tracking`): they are handed the
rows of each flush once the store holds them, so a tracker never shows what the store lost, and a
tracker that fails loses nothing of the ledger or the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sweeper.records.ledger import Ledger
from sweeper.core.rows import CellRow, PointRow
from sweeper.records.store import Store
from sweeper.run.book import Change, LedgerOp
from sweeper.search.planner import Cell
from sweeper.tracking.core import Tracking

FLUSH_SECONDS = 1.0


class Recorder:
    def __init__(self, ledger: Ledger, store: Store, cells: Mapping[str, Cell], *,
                 clock: Callable[[], float] = time.time, tracking: Tracking | None = None) -> None:
        self.ledger = ledger
        self.tracking = tracking
        self.store = store
        self.cells = cells
        self.clock = clock
        self.entries: dict[str, int] = {}  # point id -> its open ledger entry (active points only)
        self._point_rows: list[PointRow] = []
        self._curve_rows: list[dict[str, Any]] = []
        self.cells_dirty = True
        self._last_flush = 0.0

    def adopt(self, entries: Mapping[str, int]) -> None:
        """The open ledger entries of the active points a relaunch found."""
        self.entries.update(entries)

    def record(self, changes: Iterable[Change]) -> None:
        for change in changes:
            self._ledger(change)
            if change.curve is not None:
                self._curve_rows.append(change.curve.columns())
            if change.store:
                self._point_rows.append(change.row)
                self.cells_dirty = True

    def _ledger(self, change: Change) -> None:
        row = change.row
        entry = self.entries.get(row.point_id)
        if change.ledger is LedgerOp.ASSIGN:
            if entry is None:
                cell = self.cells[row.cell.cell_id]
                self.entries[row.point_id] = self.ledger.open(row, (cell.policy.lo, cell.policy.hi),
                                                              cell.ledger_attrs(), plan=change.plan)
            else:
                self.ledger.reassign(entry, row)
        elif change.ledger is LedgerOp.START and entry is not None:
            self.ledger.start(entry, row)
        if change.report is not None and entry is not None:
            self.ledger.report(entry, *change.report)
        if change.ledger is LedgerOp.FINISH and entry is not None:
            self.ledger.finish(entry, row)
            del self.entries[row.point_id]  # a finished entry is never written again

    def flush(self, cell_rows: Callable[[], list[CellRow]], *, force: bool = False) -> None:
        """Append the buffered rows and, when anything changed, rewrite the cells snapshot."""
        now = self.clock()
        if not force and now - self._last_flush < FLUSH_SECONDS:
            return
        rows: list[PointRow] = []
        curves: list[dict[str, Any]] = []
        cells: list[CellRow] = []
        if self._point_rows:
            rows, self._point_rows = self._point_rows, []
            try:
                self.store.append_points(rows)
            except BaseException:  # e.g. a full disk: keep the rows for the next flush
                self._point_rows = rows + self._point_rows
                raise
        if self._curve_rows:
            curves, self._curve_rows = self._curve_rows, []
            try:
                self.store.append_curves(curves)
            except BaseException:
                self._curve_rows = curves + self._curve_rows
                raise
        if self.cells_dirty:
            cells = cell_rows()
            self.store.write_cells(cells)
            self.cells_dirty = False
        self._last_flush = now
        if self.tracking is not None:
            self.tracking.record(rows, curves, cells)
