"""A cell's first learning rates: the YAML's grid, or (`prior: extrapolate`) a grid centred on
the LR law of the method's smaller sizes, spanning the 95% prediction interval of the new size's
optimum (`sweeper.search.bracketing.predicted_grid`).

Pure: given the cell and the decisions of its smaller cells (the same method and seed:
`sweeper.run.book`, so that a seed's grids never depend on how far the other seeds got), `first_grid` says which
learning rates to start from, or that the cell must wait for smaller sizes (and why). The LR
law is `sweeper.stats.lrlaw.predict_optimal_lr` (numbers only, no store).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sweeper.stats.lrlaw import predict_optimal_lr
from sweeper.core.grid import CellDecision, LRPolicy
from sweeper.search.bracketing import initial_grid, predicted_grid

WAITING = "waiting for smaller sizes (prior: extrapolate)"


@dataclass(frozen=True)
class FirstGrid:
    lrs: list[float] | None  # None: wait (see `waiting`)
    waiting: str | None = None
    note: str | None = None  # a line for the live display (the prior used, or why none could be)


def bracketed_optimum(decision: CellDecision | None) -> float | None:
    """The optimum a bracketed cell lends the prior: its interpolated LR, else its grid best."""
    if decision is None or decision.status != "bracketed" or decision.best is None:
        return None
    return decision.interp_lr or decision.best.lr


def first_grid(cell_id: str, x: float, policy: LRPolicy, prior: str,
               smaller: Sequence[tuple[float, CellDecision | None]]) -> FirstGrid:
    """The first grid of a cell at size `x`; `smaller`: (x, decision) of the method's smaller cells.

    A size waits for every smaller size, or for three of them (enough for an interval that can
    narrow the grid); with fewer than `policy.prior_from` smaller sizes (at least two: a law needs
    two) it does not wait and starts from the YAML's grid."""
    if policy.fixed is not None or prior != "extrapolate" or len({sx for sx, _ in smaller}) < policy.prior_from:
        return FirstGrid(initial_grid(policy))
    done = [(sx, d) for sx, d in smaller if d is not None and d.done]
    known = [(sx, lr) for sx, d in done if (lr := bracketed_optimum(d)) is not None]
    if len(done) < len(smaller) and len({sx for sx, _ in known}) < 3:
        return FirstGrid(None, waiting=WAITING)
    if len({sx for sx, _ in known}) < 2:
        return FirstGrid(initial_grid(policy))
    try:
        pred = predict_optimal_lr([sx for sx, _ in known], [lr for _, lr in known], x)
    except Exception as exc:  # a failed fit falls back to the YAML's grid, visibly
        return FirstGrid(initial_grid(policy), note=f"{cell_id}: LR prior unavailable ({exc}); using the YAML's grid")
    if pred is None or not (math.isfinite(pred.lr) and pred.lr > 0):
        return FirstGrid(initial_grid(policy))
    # Without an interval (two sizes) the YAML's grid size, re-centred; else spanning the
    # 95% prediction interval of this size's optimum.
    grid = predicted_grid(policy, pred.lr, pred.lo, pred.hi)
    span = "no interval" if pred.lo is None or pred.hi is None else f"[{pred.lo:.3g}, {pred.hi:.3g}] (95% prediction)"
    note = (f"{cell_id}: prior LR {pred.lr:.3g} {span} from {len(known)} smaller sizes: "
            f"grid {', '.join(f'{lr:.3g}' for lr in grid)}")
    return FirstGrid(grid, note=note)
