"""The value types of a cell's learning-rate search: a tried point (`GridPoint`), the policy's
settings (`LRPolicy`) and what the policy decided (`CellDecision`).

The policy itself (`decide`, `initial_grid`, ...) is `sweeper.search.bracketing`; these types
live here, below every layer, because the records (`CellRow.of`), the sweep file (`LRSection.to_policy`)
and the analysis read them too. Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from sweeper.core.states import CellStatus, PointState


@dataclass(frozen=True)
class GridPoint:
    lr: float
    state: PointState
    objective: float | None = None  # final objective of an `ok` point
    # final evaluation loss of an `ok` or `stalled` point: a stalled point has no objective (never an optimum),
    # but where its loss falls with LR says which way the cell learns (`sweeper.search.bracketing`); not
    # compared, so two points equal as before
    loss: float | None = field(default=None, compare=False)

    @property
    def is_ok(self) -> bool:
        return self.state == "ok" and self.objective is not None and math.isfinite(self.objective)

    @property
    def is_finished_info(self) -> bool:
        """Finished with information about the loss landscape (ok, or worse than any finite result)."""
        return PointState(self.state).counts_as_diverged or self.is_ok


@dataclass(frozen=True)
class LRPolicy:
    lo: float = 1e-6
    hi: float = 1.0
    center: float = 3e-3
    points: int = 5
    factor: float = 2.0
    grid: tuple[float, ...] | None = None
    refine: bool | Literal["vertex"] = True  # True: both half steps; "vertex": see the module docstring
    extend_by: int = 1
    max_points: int = 12
    vertex_offset: float = 0.5  # half steps between the best point and the vertex for a vertex probe
    refine_min_gain: float = 0.0
    vertex_first: bool = False
    failed_neighbour: Literal["skip", "half_step"] = "skip"
    pair_fallback: bool = False  # a 2-point first grid that failed whole tries the centre's other neighbour
    failed_side_last: bool = False  # a side known only by a failed point waits while the other side extends
    close_after_failures: int = 0  # a side of the best point with this many failed points and nothing else is closed
    fixed: float | None = None  # a fixed recipe: this one learning rate, no search (see `decide`)
    prior_from: int = 2  # prior: extrapolate: the fewest smaller sizes a size's first grid waits for (see prior.py)

    def __post_init__(self) -> None:
        if not 0 < self.lo < self.hi:
            raise ValueError(f"bounds must satisfy 0 < lo < hi (got {self.lo}, {self.hi})")
        if self.factor <= 1:
            raise ValueError(f"factor must be > 1 (got {self.factor})")
        if self.points < 1 or self.max_points < 1 or self.extend_by < 1:
            raise ValueError("points, max_points and extend_by must be at least 1")
        if self.refine not in (True, False, "vertex"):
            raise ValueError(f"refine must be true, false or 'vertex' (got {self.refine!r})")
        if not 0 <= self.vertex_offset < 2:
            raise ValueError(f"vertex_offset must lie in [0, 2) half steps (got {self.vertex_offset})")
        if not 0 <= self.refine_min_gain < 1:
            raise ValueError(f"refine_min_gain must lie in [0, 1) (got {self.refine_min_gain})")
        if self.fixed is not None and not self.lo <= self.fixed <= self.hi:
            raise ValueError(f"the fixed learning rate {self.fixed:g} lies outside the bounds [{self.lo:g}, {self.hi:g}]")
        if self.prior_from < 2:
            raise ValueError(f"prior_from must be at least 2 (a law needs two sizes; got {self.prior_from})")
        if self.failed_neighbour not in ("skip", "half_step"):
            raise ValueError(f"failed_neighbour must be 'skip' or 'half_step' (got {self.failed_neighbour!r})")

    @property
    def half_step(self) -> float:
        """The ratio of a refinement step: half the grid step in log LR."""
        return math.sqrt(self.factor)


@dataclass(frozen=True)
class CellDecision:
    status: CellStatus
    next_lrs: tuple[float, ...] = ()
    best: GridPoint | None = None
    interp_lr: float | None = None
    interp_objective: float | None = None
    reason: str = ""
    neighbours: tuple[GridPoint | None, GridPoint | None] = field(default=(None, None))

    @property
    def done(self) -> bool:
        return CellStatus(self.status).is_done
