"""A planted loss surface: what a simulated trial reports instead of training (`sweeper launch --simulate`).

Per method (the sweep's method names), at size x (the sweep's x axis: depth, loop count or
parameters) and learning rate lr:

    L(x, lr) = E + A·x^-alpha + c·(ln lr − ln lr*(x))²,   lr*(x) = k·x^b

plus seed noise (relative, `noise`; the same for the same point and seed every time, so a
resumed simulation reports what an uninterrupted one does). Above `cliff`·lr*(x) the run
diverges; beyond `fails_above` (a size) every LR diverges (a scheme that cannot train that
deep); below `stall_below`·lr*(x) the run stalls at `stall_loss` at best. Over training the
loss falls from `init_loss` to its final value along `(1 − progress)^curve`.

Time: a step's FLOPs (6·N per token, the planner's count, times the members still training)
divided by the trial's rate — on a GPU its share of its device (`sweeper.sim.devices`: `throughput`
× its declared GPU fraction × `sharing.solo_speedup`, shared with the trials Ray put on the same
device), or `cpu_throughput` per CPU for CPU-only trials — divided by `time_compression` (a GPU
trial's on the pool's clock, `sweeper.sim.clock`: waits for the orchestration count at 1×).

A method can instead take its losses from a recorded table (`table:`, e.g. the StepLaw grids):
each size of the sweep names one group of the table (the values of its group columns), and the
loss at a learning rate is the recorded one, linearly interpolated in ln lr between two recorded
learning rates; a learning rate outside the group's recorded range is a `failed` point (as in
`sweeper replay`: the table cannot say what it would have done). The driver reads the file
(`sweeper.sim.simulation.load_surface`) and fills `recorded`, so trials never read it.

Pure logic: pydantic and the standard library (and the recorded-table type); no torch, no Ray, no polars.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from sweeper.search.recorded import RecordedGroup


class SurfaceTable(BaseModel):
    """A method whose losses come from a recorded table (`sweeper replay`'s kind of CSV; its groups are
    `sweeper.search.recorded.RecordedGroup`s, the type replay reads too)."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(description="the CSV, relative to the surface file (or absolute)")
    lr_column: str = "lr"
    loss_column: str = "loss"
    duplicates: Literal["min", "mean"] = Field("min", description="several runs of a group at one LR: keep the "
                                                                 "lowest loss or average them")
    sizes: dict[float, dict[str, Any]] = Field(description="the sweep's size x -> its group's column values")
    recorded: dict[float, RecordedGroup] = Field(default_factory=dict,
                                                description="filled from `file` when the surface is loaded")

    @model_validator(mode="after")
    def _same_columns(self) -> SurfaceTable:
        if not self.sizes:
            raise ValueError("sizes: map at least one size to its group's column values")
        columns = {tuple(sorted(v)) for v in self.sizes.values()}
        if len(columns) > 1 or not next(iter(columns)):
            raise ValueError("sizes: every size must name the same, non-empty set of group columns "
                             f"(got {sorted(columns)})")
        return self

    @property
    def group_columns(self) -> list[str]:
        return list(next(iter(self.sizes.values())))

    def grid(self, x: float) -> RecordedGroup:
        for size, grid in self.recorded.items():
            if math.isclose(size, x, rel_tol=1e-9):
                return grid
        raise KeyError(f"no recorded group for size {x:g} (sizes: {', '.join(f'{s:g}' for s in self.sizes)})")


ANALYTIC = ("E", "A", "alpha", "lr_k", "lr_b")
ANALYTIC_ONLY = ("c", "cliff", "fails_above", "stall_below", "stall_loss")


class SurfaceMethod(BaseModel):
    """One method's planted truth."""

    model_config = ConfigDict(extra="forbid")

    E: float | None = Field(None, description="irreducible loss")
    A: PositiveFloat | None = Field(None, description="size term's scale: A·x^-alpha")
    alpha: float | None = Field(None, description="size exponent of the loss (planted, what `sweeper fit` should "
                                                   "recover)")
    lr_k: PositiveFloat | None = Field(None, description="optimal LR at size 1: lr*(x) = lr_k·x^lr_b")
    lr_b: float | None = Field(None, description="size exponent of the optimal LR (planted)")
    c: PositiveFloat = Field(0.02, description="curvature of the LR valley in (ln lr)²")
    cliff: PositiveFloat = Field(4.0, description="divergence above cliff·lr*(x)")
    fails_above: float | None = Field(None, description="every LR diverges at sizes above this")
    stall_below: PositiveFloat | None = Field(None, description="below stall_below·lr*(x) the loss stalls")
    stall_loss: float | None = Field(None, description="the loss a stalled run ends at, at best")

    table: SurfaceTable | None = Field(None, description="take the losses from a recorded table instead")

    @model_validator(mode="after")
    def _one_kind(self) -> SurfaceMethod:
        if self.table is not None:
            extra = [k for k in (*ANALYTIC, *ANALYTIC_ONLY) if k in self.model_fields_set]
            if extra:
                raise ValueError(f"a method with a table takes its losses from it: drop {', '.join(extra)}")
            return self
        missing = [k for k in ANALYTIC if getattr(self, k) is None]
        if missing:
            raise ValueError(f"give {', '.join(missing)} (the planted law) or a table")
        if (self.stall_below is None) != (self.stall_loss is None):
            raise ValueError("stall_below and stall_loss: give both or neither")
        return self

    @property
    def planted(self) -> bool:
        """A planted law (exponents to recover), not a recorded table."""
        return self.table is None

    def optimal_lr(self, x: float) -> float:
        if self.table is not None:
            grid = self.table.grid(x)
            return grid.lrs[grid.best_index]
        return self.lr_k * x ** self.lr_b  # type: ignore[operator]

    def optimal_loss(self, x: float) -> float:
        if self.table is not None:
            grid = self.table.grid(x)
            return grid.losses[grid.best_index]
        return self.E + self.A * x ** -self.alpha  # type: ignore[operator]

    def valley_loss(self, x: float, lr: float) -> float | None:
        """The noise-free loss at `lr` ignoring divergence and stalls (a table: None outside its range)."""
        if self.table is not None:
            return self.table.grid(x).interpolated_loss(lr)
        return self.optimal_loss(x) + self.c * math.log(lr / self.optimal_lr(x)) ** 2

    def outside_table(self, x: float, lr: float) -> str | None:
        """Why a table method cannot say what `lr` does at size x (None: it can, or not a table)."""
        if self.table is None or self.table.grid(x).interpolated_loss(lr) is not None:
            return None
        grid = self.table.grid(x)
        return (f"simulated: lr {lr:.4g} is outside the recorded range [{grid.lrs[0]:.4g}, {grid.lrs[-1]:.4g}] "
                f"of size {x:g} in {self.table.file}")


class Pool(BaseModel):
    """The virtual Ray pool a simulation runs on (one node with these resources)."""

    model_config = ConfigDict(extra="forbid")

    gpus: PositiveInt = 64
    cpus: PositiveInt = 1024  # Ray CPU slots (bookkeeping: simulated trials sleep)
    gpu_memory_gb: PositiveFloat = 141.0  # the declared device memory (an H200)


class Sharing(BaseModel):
    """How trials share one device of the virtual pool (`sweeper.sim.devices`)."""

    model_config = ConfigDict(extra="forbid")

    solo_speedup: float = Field(1.0, ge=1.0, description=(
        "how much faster than its declared GPU fraction's share of `throughput` a trial runs when it has the "
        "device to itself (capped at the whole device); trials whose demands exceed a device time-slice it"))


class Surface(BaseModel):
    """A planted surface file (`sweeps/surfaces/*.yaml`)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    pool: Pool = Field(default_factory=Pool)
    throughput: PositiveFloat = 2e14  # training FLOP/s of one whole GPU
    sharing: Sharing = Field(default_factory=Sharing)  # how trials on one GPU share it
    cpu_throughput: PositiveFloat = 5e10  # training FLOP/s of one CPU core
    time_compression: PositiveFloat = 1000.0  # simulated seconds per wall second
    min_report_seconds: float = Field(0.5, ge=0)  # wall seconds between two reports at least (others are coalesced)
    noise: float = Field(0.001, ge=0)  # relative seed-to-seed noise of a final loss (one standard deviation)
    init_loss: PositiveFloat | None = None  # the loss at step 0; default ln(vocab)
    curve: PositiveFloat = 2.0  # loss(progress) = final + (init − final)·(1 − progress)^curve
    methods: dict[str, SurfaceMethod]

    def fingerprint(self) -> str:
        """Of what the reported losses depend on (not the pool, the clock or the report spacing)."""
        result = self.model_dump(mode="json", include={"methods", "noise", "init_loss", "curve"})
        for method in result["methods"].values():
            if method.get("table") is None:  # a planted law: the fingerprint it had before tables existed
                method.pop("table", None)
        return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()[:16]


def _unit_normal(*key: Any) -> float:
    """A standard normal draw fixed by `key` (the same on every machine and every run)."""
    seed = int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little")
    return random.Random(seed).gauss(0.0, 1.0)


def final_loss(method: SurfaceMethod, x: float, lr: float, seed: int, noise: float, key: str) -> float | None:
    """The point's final loss, or None when it diverges (or, for a table, lies outside its range)."""
    if method.table is not None:
        recorded = method.valley_loss(x, lr)
        return None if recorded is None else recorded * (1.0 + noise * _unit_normal(key, x, f"{lr:.6g}", seed))
    star = method.optimal_lr(x)
    if (method.fails_above is not None and x > method.fails_above) or lr > method.cliff * star:
        return None
    loss = method.optimal_loss(x) + method.c * math.log(lr / star) ** 2
    if method.stall_below is not None and lr < method.stall_below * star:
        loss = max(loss, float(method.stall_loss))  # type: ignore[arg-type]
    return loss * (1.0 + noise * _unit_normal(key, x, f"{lr:.6g}", seed))


def diverged_step(method: SurfaceMethod, x: float, lr: float, steps: int) -> int:
    """The step a diverging point diverges at: earlier the further above the cliff."""
    star = method.optimal_lr(x)
    over = lr / (method.cliff * star) if lr > method.cliff * star else 1.0
    return max(1, min(steps - 1, int(0.1 * steps / over)))


def loss_at(final: float, init: float, progress: float, curve: float) -> float:
    return final + (init - final) * (1.0 - min(1.0, max(0.0, progress))) ** curve
