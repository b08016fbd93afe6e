"""A recorded LR table: final losses of real runs, several learning rates per group (StepLaw's
grids: one group per (N, D, batch size), up to 12 LRs on a √2 grid). The one type that both readers
of such a table use: `sweeper replay` (the search replayed on it, `sweeper.search.replay`) and a
simulated sweep's table methods (`sweeper.sim.surface`: each size of the sweep takes one group).

The CSV is read and checked by `sweeper.search.replay.load_table` (polars); this module needs only
pydantic, so that a simulated trial carries its recorded groups without polars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

DEFAULT_TOLERANCE = 0.01  # relative: recorded LRs are rounded to 4 significant digits; grid steps are ≥ 10%


class RecordedGroup(BaseModel):
    """One group's recorded learning rates (ascending) and final losses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: dict[str, Any] = Field(default_factory=dict, description="the group's column values")
    lrs: tuple[PositiveFloat, ...]
    losses: tuple[float, ...]

    @property
    def values(self) -> tuple[Any, ...]:
        """The group's column values, in the table's group-column order."""
        return tuple(self.key.values())

    @property
    def best_index(self) -> int:
        return min(range(len(self.lrs)), key=lambda i: (self.losses[i], self.lrs[i]))

    @property
    def best_lr(self) -> float:
        return self.lrs[self.best_index]

    @property
    def best_loss(self) -> float:
        return self.losses[self.best_index]

    @property
    def optimum_on_edge(self) -> bool:
        """The recorded optimum is the lowest or highest recorded LR (or the group has fewer than 3)."""
        return self.best_index in (0, len(self.lrs) - 1)

    def loss_at(self, lr: float, tolerance: float = DEFAULT_TOLERANCE) -> float | None:
        """The recorded loss at `lr` (within a relative tolerance), or None when none was recorded: what a
        replayed search reads (a learning rate the table does not hold is a failed point)."""
        best: tuple[float, float] | None = None
        for recorded, loss in zip(self.lrs, self.losses):
            gap = abs(math.log(lr / recorded))
            if gap <= math.log1p(tolerance) and (best is None or gap < best[0]):
                best = (gap, loss)
        return None if best is None else best[1]

    def interpolated_loss(self, lr: float, tolerance: float = DEFAULT_TOLERANCE) -> float | None:
        """The recorded loss at `lr`, linear in ln lr between recorded LRs; None outside the recorded range
        (within a relative tolerance): what a simulated trial of a table method reports."""
        lo, hi = self.lrs[0], self.lrs[-1]
        if lr < lo / (1 + tolerance) or lr > hi * (1 + tolerance):
            return None
        lr = min(hi, max(lo, lr))
        for i in range(len(self.lrs) - 1):
            a, b = self.lrs[i], self.lrs[i + 1]
            if a <= lr <= b:
                w = math.log(lr / a) / math.log(b / a)
                return (1 - w) * self.losses[i] + w * self.losses[i + 1]
        return self.losses[0]  # a single recorded LR


@dataclass(frozen=True)
class RecordedTable:
    """A recorded table, split into its groups."""

    source: str
    group_columns: tuple[str, ...]
    groups: tuple[RecordedGroup, ...]
    ratio: float  # the table's grid ratio (√2 for StepLaw)
    rows: int
    merged: int = 0  # runs folded into another run of their group at the same LR (`duplicates`)
    dropped: int = 0  # runs left out for want of a finite loss (`missing_loss="drop"`)
