"""Is a cell's optimum measured above the evaluation noise? The best point against its neighbours.

Every finished point keeps the standard error of its final loss over the eval batches
(`PointRow.loss_se`) and the per-batch losses (`PointRow.loss_batches`). Every point of a sweep
is evaluated on the same held-out batches, so the SE of a *difference* between two points is
paired: `stdev(per-batch differences) / sqrt(n)`. It is what decides whether two grid points are
distinguishable, and it is several times smaller than the SE of one point, whose share from "how
unusual are these held-out batches" is common to both (measured on the quickstart: 0.007 against
0.031 at 32 batches). Without batch losses (a store written before version 3, or batches of
different counts) the difference's SE is `sqrt(se_a² + se_b²)`, which overstates it.

A cell's bracket is *within noise* when its best point and an `ok` neighbour differ by less than
`NOISE_SES` standard errors of their difference: the grid cannot tell them apart, and the optimum
is uncertain by a grid step. (A diverged or stalled neighbour is never within noise.)

Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sweeper.core.rows import PointRow
from sweeper.core.states import PointState

NOISE_SES = 2.0  # a difference below this many SEs is within noise


@dataclass(frozen=True)
class Difference:
    """`other.loss - best.loss`, with its standard error."""

    neighbour_lr: float
    difference: float
    se: float
    paired: bool  # over the same eval batches (else from the two points' own SEs)

    @property
    def within_noise(self) -> bool:
        return self.difference < NOISE_SES * self.se


def difference(best: PointRow, other: PointRow) -> Difference | None:
    """The loss difference of two finished points and its SE (None: a loss or an SE is missing)."""
    if best.loss is None or other.loss is None:
        return None
    a, b = best.batch_losses(), other.batch_losses()
    if a is not None and b is not None and len(a) == len(b) and len(a) >= 2:
        se = statistics.stdev([y - x for x, y in zip(a, b)]) / math.sqrt(len(a))
        return Difference(other.lr, other.loss - best.loss, se, True)
    if best.loss_se is None or other.loss_se is None:
        return None
    return Difference(other.lr, other.loss - best.loss, math.hypot(best.loss_se, other.loss_se), False)


def neighbours(points: Iterable[PointRow], best: PointRow) -> tuple[PointRow | None, PointRow | None]:
    """The best point's neighbours in LR among the informative points (ok, diverged, stalled)."""
    informative = sorted((p for p in points if p.grid_point().is_finished_info), key=lambda p: p.lr)
    i = next((k for k, p in enumerate(informative) if p.lr == best.lr), None)
    if i is None:
        return None, None
    return (informative[i - 1] if i > 0 else None, informative[i + 1] if i + 1 < len(informative) else None)


def closest_neighbour(points: Sequence[PointRow], best: PointRow) -> Difference | None:
    """Of the best point's `ok` neighbours, the one nearest in loss (in SEs), when the objective is
    the loss (an error-rate objective has no SE here)."""
    if best.objective is None or best.loss is None or not math.isclose(best.objective, best.loss, rel_tol=1e-9):
        return None
    out = [difference(best, n) for n in neighbours(points, best) if n is not None and n.state is PointState.OK]
    found = [d for d in out if d is not None]
    return min(found, key=lambda d: d.difference / d.se if d.se > 0 else math.inf) if found else None
