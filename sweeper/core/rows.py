"""One record per concept: a point's row, a cell's row, and the cell facts both repeat.

`PointRow` is the one shape of a point (one learning rate of a cell) everywhere in the
sweeper: the cell book holds the current row of each point, the recorder writes rows to the
ledger and the store, `repair` and the readers rebuild rows from them. Its constructor
validates and normalises (a state is a `PointState`, a non-finite number is None, only an
`ok` point has an objective). The other shapes are projections of it:

- `grid_point()`: what bracketing reads (`sweeper.core.grid.GridPoint`);
- `metrics()` / `from_ledger()`: the ledger entry's `metrics` attribute and back;
- `columns()` / `from_columns()`: a row of the store's `points` table and back
  (`POINT_COLUMNS` is that table's schema: name, type, meaning).

`CellRow` is likewise a cell's row of the store's `cells` table (`CELL_COLUMNS`), made by
`CellRow.of` from the cell's points and its bracketing decision, in the driver and in
`repair` alike. `CellFacts` is what both rows repeat about the cell (so a row reads alone).

A new column is a field here, declared with `column(type, meaning)`: the store's schema
(`POINT_COLUMNS`, `CELL_COLUMNS`), `columns()` and `from_columns()` follow from it (a number the
ledger should keep goes into `metrics()` too). Standard library and the rest of `sweeper.core`
only (no polars: the store maps the column types).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, Literal

from sweeper.core.ids import CellId, PointId, canonical
from sweeper.core.states import CellStatus, PointState
from sweeper.core.grid import CellDecision, GridPoint

ColumnType = Literal["str", "int", "float"]


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    doc: str


def column(type_: ColumnType, doc: str, *, name: str | None = None, cells: bool = True, **kw: Any) -> Any:
    """A record field that is a column of the store's tables (`name`: the column's, when it differs
    from the field's; `cells`: for a cell fact, whether the cells table repeats it too)."""
    return field(metadata={"column": (type_, doc, name), "cells": cells}, **kw)


def _columns(cls: type, *, cells_only: bool = False) -> tuple[Column, ...]:
    out = []
    for f in fields(cls):
        if "column" in f.metadata and (f.metadata["cells"] or not cells_only):
            type_, doc, name = f.metadata["column"]
            out.append(Column(name or f.name, type_, doc))
    return tuple(out)


def _values(record: Any, *, cells_only: bool = False) -> dict[str, Any]:
    out = {}
    for f in fields(record):
        if "column" in f.metadata and (f.metadata["cells"] or not cells_only):
            value = getattr(record, f.name)
            out[f.metadata["column"][2] or f.name] = value.value if isinstance(value, Enum) else value
    return out


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


@dataclass(frozen=True)
class CellFacts:
    """What a point row and a cell row repeat about their cell."""

    cell_id: str = column("str", "method/size/s<seed> (sweeper.core.ids.CellId)")
    method: str = column("str", "the sweep method (a scheme with its options)")
    family: str | None = column("str", "llama | looped | vit", default=None)
    size: str = column("str", "the size label: L<blocks> (depth sweep), T<loops> (loop-count sweep), or the size's "
                              "name", default="")
    depth: int | None = column("int", "blocks of the network", default=None)
    loops: int | None = column("int", "mean training (and evaluation) loop count of a loop-count sweep; null otherwise",
                               default=None)
    width: int | None = column("int", "model width", default=None)
    seed: int = column("int", "the cell's seed", default=0)
    params: int | None = column("int", "parameters of one member, embeddings included", default=None)
    params_nonembed: int | None = column("int", "parameters without the embeddings", cells=False, default=None)
    flops_per_token: float | None = column("float", "training FLOPs per token (6N + attention)", cells=False,
                                           default=None)

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
        attrs = _values(self)
        del attrs["cell_id"]
        return attrs


# ----------------------------------------------------------------------------------------------
# Point rows


@dataclass(frozen=True)
class PointRow:
    """One point as the sweeper knows it now (the store keeps every row; the last one wins)."""

    cell: CellFacts
    lr: float = column("float", "the learning rate (6 significant digits)")
    state: PointState = column("str", "queued | running | ok | diverged | stalled | failed | infra_failed "
                                      "(sweeper.core.states.PointState)", default=PointState.QUEUED)
    objective: float | None = column("float", "what bracketing minimises (final eval loss, or error rate); null "
                                              "unless ok", default=None)
    loss: float | None = column("float", "final evaluation loss; null unless ok or stalled", default=None)
    loss_se: float | None = column("float", "standard error of `loss`: of the mean over the eval batches", default=None)
    accuracy: float | None = column("float", "top-1 accuracy (ViT), else null", default=None)
    init_loss: float | None = column("float", "loss at initialisation (for LR sensitivity)", default=None)
    diverged_step: int | None = column("int", "the step at which the divergence rules stopped it", default=None)
    reason: str | None = column("str", "why it diverged, stalled or failed", default=None)
    steps: int = column("int", "steps trained so far / in total", default=0)
    tokens: int = column("int", "tokens trained so far / in total", default=0)
    train_seconds: float = column("float", "training time of its Tune trial so far", default=0.0)
    tune_trial_id: str | None = column("str", "the Ray Tune trial that trains (or trained) it", name="trial_id",
                                       default=None)
    attempt: int = column("int", "how many times it was assigned to a Tune trial", default=0)
    started_at: float | None = column("float", "unix seconds", default=None)
    finished_at: float | None = column("float", "unix seconds", default=None)
    corpus: str | None = column("str", "data fingerprint", default=None)
    unigram_loss: float | None = column("float", "the loss of predicting by training token (class) frequencies on the "
                                                 "eval batches: what a stalled point did not beat", default=None)
    loss_batches: str | None = column("str", "the final evaluation's mean loss per eval batch, a JSON list (the "
                                             "same batches for every point of a sweep: differences pair up)",
                                      default=None)
    loop_losses: str | None = column("str", "a looped model evaluated at several loop counts (eval_loops): the final "
                                            "evaluation's loss at each, a JSON map {\"count\": loss} (`loss` is the "
                                            "largest count's); null otherwise", default=None)
    lambada_ppl: float | None = column("float", "LAMBADA last-word perplexity at the end of training (eval.tasks: "
                                                "[lambada]); null unless ok or stalled with the task", default=None)
    point_id: str = field(init=False, compare=False)  # <cell id>/lr=<lr> (sweeper.core.ids.PointId)

    def __post_init__(self) -> None:
        lr = finite(self.lr)
        if lr is None or lr <= 0:
            raise ValueError(f"{self.cell.cell_id}: a point's learning rate must be a finite number > 0 (got {self.lr!r})")
        set_ = object.__setattr__
        set_(self, "lr", canonical(lr))
        set_(self, "state", PointState(self.state))
        for name in ("objective", "loss", "loss_se", "accuracy", "init_loss", "started_at", "finished_at",
                     "unigram_loss", "lambada_ppl"):
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
        return GridPoint(self.lr, self.state, self.objective, self.loss)

    def batch_losses(self) -> list[float] | None:
        """The final evaluation's per-batch mean losses (None when not recorded)."""
        return decode_batches(self.loss_batches)

    def loop_loss_map(self) -> dict[int, float] | None:
        """{loop count: final evaluation loss} (None when not recorded)."""
        return decode_loop_losses(self.loop_losses)

    def metrics(self) -> dict[str, Any]:
        """The ledger entry's `metrics` attribute (every final number of the point)."""
        return {
            "objective": self.objective, "loss": self.loss, "accuracy": self.accuracy, "init_loss": self.init_loss,
            "diverged_step": self.diverged_step, "reason": self.reason, "steps": self.steps, "tokens": self.tokens,
            "train_seconds": self.train_seconds, "started_at": self.started_at, "finished_at": self.finished_at,
            "corpus": self.corpus, "lr": self.lr, "attempt": self.attempt, "loss_se": self.loss_se,
            "unigram_loss": self.unigram_loss, "loss_batches": self.loss_batches,
            "loop_losses": self.loop_losses, "lambada_ppl": self.lambada_ppl,
        }

    @classmethod
    def from_ledger(cls, cell: CellFacts, lr: float, state: PointState | str, *, attempt: int,
                    tune_trial_id: str | None, objective: float | None, metrics: Mapping[str, Any]) -> PointRow:
        """The row a ledger entry records (its `metrics`, or just `started_at` while it runs); an
        objective on a point that is not ok is dropped."""
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
            loss_se=metrics.get("loss_se"), unigram_loss=metrics.get("unigram_loss"),
            loss_batches=metrics.get("loss_batches"), loop_losses=metrics.get("loop_losses"),
            lambada_ppl=metrics.get("lambada_ppl"),
        )

    def columns(self) -> dict[str, Any]:
        """The row of the store's `points` table (POINT_COLUMNS, in order)."""
        return {"point_id": self.point_id, **_values(self.cell), **_values(self)}

    @classmethod
    def from_columns(cls, row: Mapping[str, Any]) -> PointRow:
        """A stored row back as a PointRow."""
        return cls.from_ledger(CellFacts.from_attrs(row["cell_id"], row), row["lr"], row["state"],
                               attempt=row.get("attempt") or 0, tune_trial_id=row.get("trial_id"),
                               objective=row.get("objective"), metrics=row)


POINT_COLUMNS: tuple[Column, ...] = (
    Column("point_id", "str", "<cell id>/lr=<lr> (sweeper.core.ids.PointId), e.g. layerrope/L48/s0/lr=0.002"),
    *_columns(CellFacts),
    *_columns(PointRow),
)


# ----------------------------------------------------------------------------------------------
# Cell rows


@dataclass(frozen=True)
class CellRow:
    """A cell's status and optimum, as the store's `cells` table holds it."""

    cell: CellFacts
    status: CellStatus = column("str", "pending | running | bracketed | edge | diverged | stalled | failed | fixed "
                                       "(sweeper.core.states.CellStatus)", default=CellStatus.PENDING)
    n_points: int = column("int", "finished points", default=0)
    n_running: int = column("int", "points a Tune trial holds", default=0)
    n_diverged: int = column("int", "diverged points", default=0)
    n_stalled: int = column("int", "stalled points (learned nothing beyond token frequencies)", default=0)
    best_lr: float | None = column("float", "the grid best", default=None)
    best_objective: float | None = column("float", "the grid best's objective", default=None)
    interp_lr: float | None = column("float", "the vertex of the parabola in log LR through the best point and its "
                                              "neighbours", default=None)
    interp_objective: float | None = column("float", "the parabola's value there (a model, not a measured loss)",
                                            default=None)
    updated_at: float | None = column("float", "unix seconds of this snapshot", default=None)

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
            n_stalled=sum(p.state is PointState.STALLED for p in points),
            best_lr=best.lr if best else None, best_objective=best.objective if best else None,
            interp_lr=decision.interp_lr if decision else None,
            interp_objective=decision.interp_objective if decision else None, updated_at=now,
        )

    def columns(self) -> dict[str, Any]:
        """The row of the store's `cells` table (CELL_COLUMNS, in order)."""
        return {**_values(self.cell, cells_only=True), **_values(self)}

    @classmethod
    def from_columns(cls, row: Mapping[str, Any]) -> CellRow:
        values = {f.name: row.get(f.name) for f in fields(cls) if "column" in f.metadata}
        return cls(cell=CellFacts.from_attrs(row["cell_id"], row), **{k: v for k, v in values.items() if v is not None})


CELL_COLUMNS: tuple[Column, ...] = (*_columns(CellFacts, cells_only=True), *_columns(CellRow))


def encode_batches(values: Iterable[float] | None) -> str | None:
    """Per-batch losses as the store keeps them: a JSON list, 7 significant digits (far below any SE)."""
    if values is None:
        return None
    out = [finite(v) for v in values]
    return json.dumps([float(f"{v:.7g}") if v is not None else None for v in out], separators=(",", ":"))


def decode_batches(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        values = json.loads(text)
    except ValueError:
        return None
    if not isinstance(values, list):
        return None
    out = [finite(v) for v in values]
    return None if any(v is None for v in out) else out  # type: ignore[return-value]


def encode_loop_losses(values: Mapping[str, float] | Mapping[int, float] | None) -> str | None:
    """Losses by loop count as the store keeps them: a JSON map, counts ascending, 7 significant digits."""
    if not values:
        return None
    items = sorted((int(k), finite(v)) for k, v in values.items())
    return json.dumps({str(k): (float(f"{v:.7g}") if v is not None else None) for k, v in items}, separators=(",", ":"))


def decode_loop_losses(text: str | None) -> dict[int, float] | None:
    if not text:
        return None
    try:
        values = json.loads(text)
        out = {int(k): finite(v) for k, v in values.items()}
    except (ValueError, AttributeError, TypeError):
        return None
    return None if not out or any(v is None for v in out.values()) else dict(sorted(out.items()))  # type: ignore[arg-type]


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
    Column("eval_loss_se", "float", "standard error of eval_loss over the eval batches"),
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
    eval_loss_se: float | None = None

    def columns(self) -> dict[str, Any]:
        p = self.point
        return {"point_id": p.point_id, "cell_id": p.cell.cell_id, "method": p.cell.method, "size": p.cell.size,
                "seed": p.cell.seed, "lr": p.lr, "attempt": p.attempt, "step": self.step, "tokens": self.tokens,
                "train_loss": finite(self.train_loss), "eval_loss": finite(self.eval_loss),
                "eval_loss_se": finite(self.eval_loss_se), "time": self.time}
