"""What every tracker receives, and the fan-out that feeds them without ever stopping a sweep.

A *tracker* (`Tracker`) mirrors a sweep into one experiment tracker: a run per point (`PointRun`:
its name is the point id, its config the cell's facts, the LR and the sweep's recipe), its learning
curves against tokens, its outcome when it finishes, and its cell's status and optimum when the cell
is done. `Tracking` is what the recorder (`sweeper.run.recorder`) and `sweeper track` hand rows to:
it decides when a point's run starts, which curve rows are new, when it finishes and when a cell
ends, and calls every tracker on a background thread, so a slow server never holds the driver. A
tracker that raises is dropped with one warning (`warn`); the ledger and the store were written
before any tracker saw the rows, so nothing is lost, and `sweeper track DIR --to NAME` back-fills
it later. Run ids derive from point ids (`stable_run_id`), so a relaunch resumes a run, never
duplicates it.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sweeper.core.rows import CellRow, PointRow
from sweeper.core.states import CellStatus, PointState

CLOSE_TIMEOUT_S = 120.0  # how long the end of a launch waits for the trackers to catch up


def stable_run_id(sweep: str, key: str) -> str:
    """A tracker run id for a point (or a cell) of a sweep: the same on every launch and back-fill."""
    return hashlib.sha256(f"{sweep}\x1f{key}".encode()).hexdigest()[:24]


@dataclass(frozen=True)
class PointRun:
    """One point as a tracker run."""

    sweep: str
    point_id: str
    cell_id: str
    lr: float
    config: dict[str, Any]  # method, size, seed, lr, the cell's facts, and `recipe` (model, train, data, divergence)

    @property
    def run_id(self) -> str:
        return stable_run_id(self.sweep, self.point_id)

    @classmethod
    def of(cls, sweep: str, row: PointRow, recipe: Mapping[str, Any] | None) -> PointRun:
        facts = row.cell.attrs()
        config = {"sweep": sweep, "cell_id": row.cell.cell_id, "point_id": row.point_id, **facts, "lr": row.lr,
                  "recipe": dict(recipe or {})}
        return cls(sweep, row.point_id, row.cell.cell_id, row.lr, config)


def outcome_of(row: PointRow) -> dict[str, Any]:
    """A finished point's summary: its outcome (ok, diverged, stalled, failed) with the reason, and its final numbers."""
    return {"outcome": row.state.value, "reason": row.reason, "objective": row.objective, "loss": row.loss,
            "accuracy": row.accuracy, "init_loss": row.init_loss, "diverged_step": row.diverged_step,
            "steps": row.steps, "tokens": row.tokens, "train_seconds": row.train_seconds, "attempt": row.attempt}


def cell_summary(row: CellRow) -> dict[str, Any]:
    """A done cell's status and bracketed optimum."""
    return {"status": row.status.value, "best_lr": row.best_lr, "best_objective": row.best_objective,
            "interp_lr": row.interp_lr, "interp_objective": row.interp_objective, "n_points": row.n_points,
            "n_diverged": row.n_diverged}


def flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as dotted keys with text values (MLflow params, TensorBoard text)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat(value, name + "."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return out


class Tracker(Protocol):
    """One experiment tracker. Calls come from one thread, in order; any of them may raise."""

    name: str

    def start(self, run: PointRun) -> None:
        """Open (or resume) the point's run: name, group, config."""

    def log(self, run: PointRun, curve: Sequence[Mapping[str, Any]]) -> None:
        """Curve rows of the point's current attempt (`tokens`, `train_loss`, `eval_loss`), in order."""

    def finish(self, run: PointRun, outcome: Mapping[str, Any]) -> None:
        """The point finished: its summary (`outcome_of`); the run is closed."""

    def cell(self, sweep: str, cell_id: str, summary: Mapping[str, Any]) -> None:
        """The cell is done: its status and optimum (`cell_summary`), written to its group."""

    def close(self) -> None:
        """The launch (or back-fill) ends: close what is open (active points resume next time)."""


@dataclass
class _Batch:
    points: list[PointRow]
    curves: list[Mapping[str, Any]]
    cells: list[CellRow]


@dataclass
class Tracking:
    """The fan-out from the recorder to the trackers (see the module's docstring)."""

    sweep: str
    trackers: list[Tracker]
    recipes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # cell id -> the recipe
    warn: Callable[[str], None] = print
    background: bool = True

    def __post_init__(self) -> None:
        self.failed: dict[str, str] = {}  # tracker name -> why it was dropped
        self._rows: dict[str, PointRow] = {}  # point id -> the point's last row seen
        self._runs: dict[str, PointRun] = {}  # points whose run is open in this process
        self._finished: set[str] = set()
        self._cells: dict[str, CellStatus] = {}  # the last status told per cell
        self._queue: queue.Queue[_Batch | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if self.background and self.trackers:
            self._thread = threading.Thread(target=self._work, name="sweeper-tracking", daemon=True)
            self._thread.start()

    def record(self, points: Sequence[PointRow] = (), curves: Sequence[Mapping[str, Any]] = (),
               cells: Sequence[CellRow] = ()) -> None:
        """Rows the store has just made durable (points, then their curves, then the cells snapshot)."""
        if not self.trackers or not (points or curves or cells):
            return
        batch = _Batch(list(points), list(curves), list(cells))
        if self._thread is not None:
            self._queue.put(batch)
        else:
            self._apply(batch)

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Send what is queued, then close every tracker (waits at most `timeout` seconds)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.warn(f"tracking: the trackers did not catch up within {timeout:.0f} s; what they missed is in "
                          "the store (`sweeper track DIR --to NAME` back-fills it)")
            self._thread = None
        else:
            self._close_trackers()

    # -- the worker --------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                self._close_trackers()
                return
            self._apply(batch)

    def _apply(self, batch: _Batch) -> None:
        for row in batch.points:
            self._rows[row.point_id] = row
            if row.state is not PointState.QUEUED:
                self._start(row)
        by_point: dict[str, list[Mapping[str, Any]]] = {}
        for curve in batch.curves:
            row = self._rows.get(str(curve["point_id"]))
            if row is not None and int(curve.get("attempt") or 0) == row.attempt:  # a re-run's old curve stays out
                by_point.setdefault(row.point_id, []).append(curve)
        for pid, rows in by_point.items():
            run = self._start(self._rows[pid])
            self._each("log", run, sorted(rows, key=lambda r: (r.get("tokens") or 0, r.get("step") or 0)))
        for row in batch.points:
            if row.state.is_finished and row.point_id not in self._finished and self._rows[row.point_id] is row:
                run = self._start(row)
                self._finished.add(row.point_id)
                self._each("finish", run, outcome_of(row))
                del self._runs[row.point_id]
        for cell in batch.cells:
            cid = cell.cell.cell_id
            if cell.status.is_done and self._cells.get(cid) != cell.status:
                self._each("cell", self.sweep, cid, cell_summary(cell))
            self._cells[cid] = cell.status

    def _start(self, row: PointRow) -> PointRun:
        run = self._runs.get(row.point_id)
        if run is None:
            run = PointRun.of(self.sweep, row, self.recipes.get(row.cell.cell_id))
            self._runs[row.point_id] = run
            self._finished.discard(row.point_id)  # a failed point retried (`--retry-failed`) runs again
            self._each("start", run)
        return run

    def _each(self, method: str, *args: Any) -> None:
        for tracker in self.trackers:
            if tracker.name in self.failed:
                continue
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:  # any failure of a tracker: drop it, keep the sweep
                self._drop(tracker, exc)

    def _drop(self, tracker: Tracker, exc: BaseException) -> None:
        detail = (str(exc).strip().splitlines() or [""])[0][:300]
        self.failed[tracker.name] = f"{type(exc).__name__}: {detail}"
        self.warn(f"tracking: {tracker.name} failed ({self.failed[tracker.name]}); the sweep goes on and the ledger "
                  f"and the store keep every result; `sweeper track DIR --to {tracker.name}` back-fills it later")
        try:
            tracker.close()
        except Exception:  # it already failed once; its warning is out
            pass

    def _close_trackers(self) -> None:
        for tracker in self.trackers:
            if tracker.name in self.failed:
                continue
            try:
                tracker.close()
            except Exception as exc:
                self._drop(tracker, exc)
