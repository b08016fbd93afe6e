"""One record per concept: a point's row, a cell's row, and the cell facts both repeat.

`PointRow` is the one shape of a point (one learning rate of a cell) everywhere in the
sweeper: the cell book holds the current row of each point, the recorder writes rows to the
ledger and the store, `repair` and the readers rebuild rows from them. Its constructor
validates and normalises (a state is a `PointState`, a non-finite number is None, only an
`ok` point has an objective). The other shapes are projections of it:

- `grid_point()`: what bracketing reads (`sweeper.search.bracketing.GridPoint`);
- `metrics()` / `from_ledger()`: the ledger entry's `metrics` attribute and back;
- `columns()` / `from_columns()`: a row of the store's `points` table and back
  (`POINT_COLUMNS` is that table's schema: name, type, meaning).

`CellRow` is likewise a cell's row of the store's `cells` table (`CELL_COLUMNS`), made by
`CellRow.of` from the cell's points and its bracketing decision, in the driver and in
`repair` alike. `CellFacts` is what both rows repeat about the cell (so a row reads alone).

A new column is a field here, its entry in `POINT_COLUMNS` (or `CELL_COLUMNS`) and its value
in `columns()`; a test checks that the three agree. Standard library and `sweeper.search.bracketing`
only (no polars: the store maps the column types).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sweeper.records.ids import CellId, PointId, canonical
from sweeper.records.states import CellStatus, PointState
from sweeper.search.bracketing import CellDecision, GridPoint

ColumnType = Literal["str", "int", "float"]


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    doc: str


def finite(value: Any) -> float | None:
    """A finite float, or None (None, NaN, infinities and non-numbers alike)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------------------------
# Cell facts


CELL_FACT_COLUMNS: tuple[Column, ...] = (
    Column("cell_id", "str", "method/size/s<seed> (sweeper.records.ids.CellId)"),
    Column("method", "str", "the sweep method (a scheme with its options)"),
    Column("family", "str", "llama | looped | vit"),
    Column("size", "str", "the size label: L<blocks> (depth sweep), T<loops> (loop-count sweep), or the size's name"),
    Column("depth", "int", "blocks of the network"),
    Column("loops", "int", "mean training (and evaluation) loop count of a loop-count sweep; null otherwise"),
    Column("width", "int", "model width"),
    Column("seed", "int", "the cell's seed"),
    Column("params", "int", "parameters of one member, embeddings included"),
)
POINT_CELL_COLUMNS: tuple[Column, ...] = (
    Column("params_nonembed", "int", "parameters without the embeddings"),
    Column("flops_per_token", "float", "training FLOPs per token (6N + attention)"),
)


@dataclass(frozen=True)
class CellFacts:
    """What a point row and a cell row repeat about their cell."""

    cell_id: str
    method: str
    family: str | None = None
    size: str = ""
    depth: int | None = None
    loops: int | None = None
    width: int | None = None
    seed: int = 0
    params: int | None = None
    params_nonembed: int | None = None
    flops_per_token: float | None = None

    def __post_init__(self) -> None:
        CellId.parse(self.cell_id)  # a malformed id is a bug, found here

    @property
    def id(self) -> CellId:
        return CellId.parse(self.cell_id)

    @classmethod
    def from_attrs(cls, cell_id: str, attrs: Mapping[str, Any], *, loop_axis: bool = False) -> CellFacts:
        """From a mapping that names the facts (ledger study attributes, a manifest entry, a store row).

        Written before store version 2 (no `loops` key), a loop-count sweep's (`loop_axis`) `depth`
        held the loop count: it is read as the loop count, and the number of blocks as unknown."""
        parsed = CellId.parse(cell_id)
        depth, loops = _int(attrs.get("depth")), _int(attrs.get("loops"))
        if loop_axis and "loops" not in attrs:
            depth, loops = None, depth
        return cls(
            cell_id=cell_id, method=str(attrs.get("method") or parsed.method), family=attrs.get("family"),
            size=str(attrs.get("size") or parsed.size), depth=depth, loops=loops, width=_int(attrs.get("width")),
            seed=_int(attrs.get("seed")) if attrs.get("seed") is not None else parsed.seed,
            params=_int(attrs.get("params")), params_nonembed=_int(attrs.get("params_nonembed")),
            flops_per_token=finite(attrs.get("flops_per_token")),
        )

    def attrs(self) -> dict[str, Any]:
        """The facts as a mapping (ledger study attributes, manifest entries)."""
        return {"method": self.method, "family": self.family, "size": self.size, "depth": self.depth,
                "loops": self.loops, "width": self.width, "seed": self.seed, "params": self.params,
                "params_nonembed": self.params_nonembed, "flops_per_token": self.flops_per_token}


# ----------------------------------------------------------------------------------------------
# Point rows


POINT_COLUMNS: tuple[Column, ...] = (
    Column("point_id", "str", "<cell id>/lr=<lr> (sweeper.records.ids.PointId), e.g. layerrope/L48/s0/lr=0.002"),
    *CELL_FACT_COLUMNS,
    *POINT_CELL_COLUMNS,
    Column("lr", "float", "the learning rate (6 significant digits)"),
    Column("state", "str", "queued | running | ok | diverged | failed (sweeper.records.states.PointState)"),
    Column("objective", "float", "what bracketing minimises (final eval loss, or error rate); null unless ok"),
    Column("loss", "float", "final evaluation loss; null unless ok"),
    Column("accuracy", "float", "top-1 accuracy (ViT), else null"),
    Column("init_loss", "float", "loss at initialisation (for LR sensitivity)"),
    Column("diverged_step", "int", "the step at which the divergence rules stopped it"),
    Column("reason", "str", "why it diverged or failed"),
    Column("steps", "int", "steps trained so far / in total"),
    Column("tokens", "int", "tokens trained so far / in total"),
    Column("train_seconds", "float", "training time of its Tune trial so far"),
    Column("trial_id", "str", "the Ray Tune trial that trains (or trained) it"),
    Column("attempt", "int", "how many times it was assigned to a Tune trial"),
    Column("started_at", "float", "unix seconds"),
    Column("finished_at", "float", "unix seconds"),
    Column("corpus", "str", "data fingerprint"),
)


@dataclass(frozen=True)
class PointRow:
    """One point as the sweeper knows it now (the store keeps every row; the last one wins)."""

    cell: CellFacts
    lr: float
    state: PointState = PointState.QUEUED
    attempt: int = 0
    tune_trial_id: str | None = None  # the Ray Tune trial holding (or that held) it
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
    point_id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        lr = finite(self.lr)
        if lr is None or lr <= 0:
            raise ValueError(f"{self.cell.cell_id}: a point's learning rate must be a finite number > 0 (got {self.lr!r})")
        set_ = object.__setattr__
        set_(self, "lr", canonical(lr))
        set_(self, "state", PointState(self.state))
        for name in ("objective", "loss", "accuracy", "init_loss", "started_at", "finished_at"):
            set_(self, name, finite(getattr(self, name)))
        set_(self, "train_seconds", finite(self.train_seconds) or 0.0)
        set_(self, "steps", _int(self.steps) or 0)
        set_(self, "tokens", _int(self.tokens) or 0)
        set_(self, "attempt", _int(self.attempt) or 0)
        set_(self, "diverged_step", _int(self.diverged_step))
        if self.objective is not None and self.state is not PointState.OK:
            raise ValueError(f"{self.cell.cell_id} lr={self.lr:g}: only an ok point has an objective "
                             f"(state {self.state}, objective {self.objective})")
        set_(self, "point_id", str(PointId(self.cell.id, self.lr)))

    def evolve(self, **changes: Any) -> PointRow:
        """A copy with `changes` (validated like a new row)."""
        return replace(self, **changes)

    @property
    def assigned(self) -> bool:
        """Active and held by a Tune trial."""
        return self.state.is_active and self.tune_trial_id is not None

    # -- projections ----------------------------------------------------------------------------
    def grid_point(self) -> GridPoint:
        return GridPoint(self.lr, self.state, self.objective)

    def metrics(self) -> dict[str, Any]:
        """The ledger entry's `metrics` attribute (every final number of the point)."""
        return {
            "objective": self.objective, "loss": self.loss, "accuracy": self.accuracy, "init_loss": self.init_loss,
            "diverged_step": self.diverged_step, "reason": self.reason, "steps": self.steps, "tokens": self.tokens,
            "train_seconds": self.train_seconds, "started_at": self.started_at, "finished_at": self.finished_at,
            "corpus": self.corpus, "lr": self.lr, "attempt": self.attempt,
        }

    @classmethod
    def from_ledger(cls, cell: CellFacts, lr: float, state: PointState | str, *, attempt: int,
                    tune_trial_id: str | None, objective: float | None, metrics: Mapping[str, Any]) -> PointRow:
        """The row a ledger entry records (its `metrics`, or just `started_at` while it runs)."""
        state = PointState(state)
        if objective is None and state is PointState.OK:
            objective = metrics.get("objective")
        return cls(
            cell=cell, lr=lr, state=state, attempt=attempt, tune_trial_id=tune_trial_id,
            objective=objective if state is PointState.OK else None, loss=metrics.get("loss"),
            accuracy=metrics.get("accuracy"), init_loss=metrics.get("init_loss"),
            diverged_step=metrics.get("diverged_step"), reason=metrics.get("reason"), steps=metrics.get("steps") or 0,
            tokens=metrics.get("tokens") or 0, train_seconds=metrics.get("train_seconds") or 0.0,
            started_at=metrics.get("started_at"), finished_at=metrics.get("finished_at"), corpus=metrics.get("corpus"),
        )

    def columns(self) -> dict[str, Any]:
        """The row of the store's `points` table (POINT_COLUMNS, in order)."""
        c = self.cell
        return {
            "point_id": self.point_id, "cell_id": c.cell_id, "method": c.method, "family": c.family, "size": c.size,
            "depth": c.depth, "loops": c.loops, "width": c.width, "seed": c.seed, "params": c.params,
            "params_nonembed": c.params_nonembed, "flops_per_token": c.flops_per_token, "lr": self.lr,
            "state": self.state.value, "objective": self.objective, "loss": self.loss, "accuracy": self.accuracy,
            "init_loss": self.init_loss, "diverged_step": self.diverged_step, "reason": self.reason,
            "steps": self.steps, "tokens": self.tokens, "train_seconds": self.train_seconds,
            "trial_id": self.tune_trial_id, "attempt": self.attempt, "started_at": self.started_at,
            "finished_at": self.finished_at, "corpus": self.corpus,
        }

    @classmethod
    def from_columns(cls, row: Mapping[str, Any]) -> PointRow:
        """A stored row back as a PointRow (an objective on a row that is not ok is dropped)."""
        state = PointState(row["state"])
        return cls(
            cell=CellFacts.from_attrs(row["cell_id"], row), lr=row["lr"], state=state,
            attempt=row.get("attempt") or 0, tune_trial_id=row.get("trial_id"),
            objective=row.get("objective") if state is PointState.OK else None, loss=row.get("loss"),
            accuracy=row.get("accuracy"), init_loss=row.get("init_loss"), diverged_step=row.get("diverged_step"),
            reason=row.get("reason"), steps=row.get("steps") or 0, tokens=row.get("tokens") or 0,
            train_seconds=row.get("train_seconds") or 0.0, started_at=row.get("started_at"),
            finished_at=row.get("finished_at"), corpus=row.get("corpus"),
        )


# ----------------------------------------------------------------------------------------------
# Cell rows


CELL_COLUMNS: tuple[Column, ...] = (
    *CELL_FACT_COLUMNS,
    Column("status", "str", "pending | running | bracketed | edge | diverged | failed (sweeper.records.states.CellStatus)"),
    Column("n_points", "int", "finished points"),
    Column("n_running", "int", "points a Tune trial holds"),
    Column("n_diverged", "int", "diverged points"),
    Column("best_lr", "float", "the grid best"),
    Column("best_objective", "float", "the grid best's objective"),
    Column("interp_lr", "float", "the vertex of the parabola in log LR through the best point and its neighbours"),
    Column("interp_objective", "float", "the parabola's value there (a model, not a measured loss)"),
    Column("updated_at", "float", "unix seconds of this snapshot"),
)


@dataclass(frozen=True)
class CellRow:
    """A cell's status and optimum, as the store's `cells` table holds it."""

    cell: CellFacts
    status: CellStatus
    n_points: int = 0
    n_running: int = 0
    n_diverged: int = 0
    best_lr: float | None = None
    best_objective: float | None = None
    interp_lr: float | None = None
    interp_objective: float | None = None
    updated_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", CellStatus(self.status))
        for name in ("best_lr", "best_objective", "interp_lr", "interp_objective", "updated_at"):
            object.__setattr__(self, name, finite(getattr(self, name)))

    @classmethod
    def of(cls, cell: CellFacts, points: Iterable[PointRow], decision: CellDecision | None, now: float) -> CellRow:
        """A cell's row from its points and its bracketing decision (None: not decided yet)."""
        points = list(points)
        best = decision.best if decision is not None else None
        return cls(
            cell=cell, status=cell_status(decision, points), n_points=sum(p.state.is_finished for p in points),
            n_running=sum(p.assigned for p in points),
            n_diverged=sum(p.state is PointState.DIVERGED for p in points),
            best_lr=best.lr if best else None, best_objective=best.objective if best else None,
            interp_lr=decision.interp_lr if decision else None,
            interp_objective=decision.interp_objective if decision else None, updated_at=now,
        )

    def columns(self) -> dict[str, Any]:
        """The row of the store's `cells` table (CELL_COLUMNS, in order)."""
        c = self.cell
        return {
            "cell_id": c.cell_id, "method": c.method, "family": c.family, "size": c.size, "depth": c.depth,
            "loops": c.loops, "width": c.width, "seed": c.seed, "params": c.params, "status": self.status.value,
            "n_points": self.n_points, "n_running": self.n_running, "n_diverged": self.n_diverged,
            "best_lr": self.best_lr, "best_objective": self.best_objective, "interp_lr": self.interp_lr,
            "interp_objective": self.interp_objective, "updated_at": self.updated_at,
        }

    @classmethod
    def from_columns(cls, row: Mapping[str, Any]) -> CellRow:
        return cls(
            cell=CellFacts.from_attrs(row["cell_id"], row), status=row.get("status") or CellStatus.PENDING,
            n_points=row.get("n_points") or 0, n_running=row.get("n_running") or 0,
            n_diverged=row.get("n_diverged") or 0, best_lr=row.get("best_lr"),
            best_objective=row.get("best_objective"), interp_lr=row.get("interp_lr"),
            interp_objective=row.get("interp_objective"), updated_at=row.get("updated_at"),
        )


def cell_status(decision: CellDecision | None, points: Iterable[PointRow]) -> CellStatus:
    """The decision's status once it is done; before, `running` once a point was assigned or has
    finished, else `pending`."""
    if decision is None:
        return CellStatus.PENDING
    if decision.done:
        return CellStatus(decision.status)
    started = any(p.assigned or p.state.is_finished for p in points)
    return CellStatus.RUNNING if started else CellStatus.PENDING


def cell_order(row: Mapping[str, Any]) -> tuple[str, float, float, str, int]:
    """How tables list cells: by method, then size (loop count, depth, parameters), then seed."""
    return (str(row.get("method")), row.get("loops") or row.get("depth") or 0, row.get("params") or 0,
            str(row.get("size")), row.get("seed") or 0)


# ----------------------------------------------------------------------------------------------
# Learning curves


CURVE_COLUMNS: tuple[Column, ...] = (
    Column("point_id", "str", "the point"),
    Column("cell_id", "str", "its cell"),
    Column("method", "str", "the cell's method"),
    Column("size", "str", "the cell's size label"),
    Column("seed", "int", "the cell's seed"),
    Column("lr", "float", "the point's learning rate"),
    Column("attempt", "int", "the point's attempt (a re-run starts a new curve)"),
    Column("step", "int", "optimizer steps done"),
    Column("tokens", "int", "training tokens seen"),
    Column("train_loss", "float", "mean training loss since the last report"),
    Column("eval_loss", "float", "null on steps without evaluation"),
    Column("time", "float", "unix seconds (the driver's clock)"),
)


@dataclass(frozen=True)
class CurvePoint:
    """One report of one point: a row of the store's `curves` table."""

    point: PointRow
    step: int
    tokens: int
    train_loss: float | None
    eval_loss: float | None
    time: float

    def columns(self) -> dict[str, Any]:
        p = self.point
        return {"point_id": p.point_id, "cell_id": p.cell.cell_id, "method": p.cell.method, "size": p.cell.size,
                "seed": p.cell.seed, "lr": p.lr, "attempt": p.attempt, "step": self.step, "tokens": self.tokens,
                "train_loss": finite(self.train_loss), "eval_loss": finite(self.eval_loss), "time": self.time}
