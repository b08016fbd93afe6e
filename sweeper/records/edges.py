"""Where a cell's optimum sits in what was tried: its neighbours, and the bracket audit of `sweeper optima --edges`.

A cell's best `ok` point is *at an edge* when it has no informative neighbour (ok, diverged or stalled)
on a side: `low` (it is the lowest learning rate tried), `high` (the highest), or `both` (the only one).
Such an optimum is one-sided: the true optimum may lie beyond what was tried (Marin's LR sweep had to be
relaunched for that, their issue #7856). The audit lists every such cell with the learning rates a
bracketing search would try next: the project's `decide`, unbounded, stepping by the sweep's grid ratio
(an import's recorded ratio, else the smallest step between the cell's own learning rates, else 2).

`neighbour_fields` adds, to every row of `sweeper optima`, the best point's neighbours and the loss
gaps to them (a diverged or stalled neighbour has no gap: it counts as worse than any finite loss).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.core.grid import LRPolicy
from sweeper.core.rows import PointRow
from sweeper.core.states import PointState
from sweeper.records.fold import current_points
from sweeper.records.manifest import read_manifest
from sweeper.records.noise import neighbours
from sweeper.records.store import load_points
from sweeper.search.bracketing import decide

DEFAULT_RATIO = 2.0


def _gap(best: PointRow, other: PointRow | None) -> tuple[float | None, str | None]:
    if other is None:
        return None, None
    if other.state is PointState.OK and other.loss is not None and best.loss is not None:
        return other.loss - best.loss, "ok"
    return None, str(other.state)


def neighbour_fields(points: Sequence[PointRow], best: PointRow | None) -> dict[str, Any]:
    """`edge` (None, low, high or both), and per side the neighbour's LR, state and loss gap to the best."""
    if best is None:
        return {"edge": None, "low_lr": None, "low_state": None, "low_gap": None,
                "high_lr": None, "high_state": None, "high_gap": None}
    left, right = neighbours(points, best)
    low_gap, low_state = _gap(best, left)
    high_gap, high_state = _gap(best, right)
    edge = "both" if left is None and right is None else "low" if left is None else "high" if right is None else None
    return {"edge": edge, "low_lr": left.lr if left else None, "low_state": low_state, "low_gap": low_gap,
            "high_lr": right.lr if right else None, "high_state": high_state, "high_gap": high_gap}


def cell_ratio(lrs: Sequence[float], ratio: float | None) -> float:
    """The step a bracketing search takes: the given ratio, else the cell's smallest step, else 2."""
    if ratio is not None and ratio > 1:
        return float(ratio)
    steps = [b / a for a, b in zip(sorted(lrs), sorted(lrs)[1:]) if b / a > 1.0001]
    return min(steps) if steps else DEFAULT_RATIO


def next_lrs(points: Sequence[PointRow], ratio: float) -> tuple[float, ...]:
    """The learning rates `decide` proposes for the cell with no bound, no refinement, no cap."""
    policy = LRPolicy(lo=1e-12, hi=1e6, factor=ratio, refine=False, max_points=1_000_000)
    return decide([p.grid_point() for p in points], policy).next_lrs


def edge_audit(sweep_dir: str | Path) -> dict[str, Any]:
    """The one-sided optima of a sweep (`edges`: one row per cell whose best point is at an edge), and the
    cells with no optimum at all (`no_optimum`: every informative point diverged or stalled)."""
    sweep_dir = Path(sweep_dir)
    manifest = read_manifest(sweep_dir)
    ratio = manifest.imported.grid_ratio if manifest.imported is not None else None
    points = current_points(PointRow.from_columns(row) for row in load_points(sweep_dir).iter_rows(named=True))
    edges, none_found = [], []
    n_with_optimum = 0
    for cid in sorted(points):
        pts = [p for p in points[cid].values() if p.state.is_finished]
        ok = [p for p in pts if p.state is PointState.OK and p.objective is not None]
        step = cell_ratio([p.lr for p in pts], ratio)
        lrs = sorted(p.lr for p in pts if p.grid_point().is_finished_info)
        if not ok:
            if lrs:
                none_found.append({"cell_id": cid, "tried": [lrs[0], lrs[-1]], "n_points": len(lrs),
                                   "next_lrs": list(next_lrs(pts, step))})
            continue
        n_with_optimum += 1
        best = min(ok, key=lambda p: (p.objective, p.lr))
        fields = neighbour_fields(pts, best)
        if fields["edge"] is None:
            continue
        edges.append({"cell_id": cid, "method": best.cell.method, "size": best.cell.size, "seed": best.cell.seed,
                      "side": fields["edge"], "best_lr": best.lr, "best_loss": best.loss,
                      "tried": [lrs[0], lrs[-1]], "n_points": len(lrs), "ratio": step,
                      "next_lrs": list(next_lrs(pts, step)),
                      "steps_from_other_edge": round(math.log(lrs[-1] / lrs[0]) / math.log(step), 2)
                      if len(lrs) > 1 else 0.0})
    return {"cells": len(points), "cells_with_optimum": n_with_optimum, "edges": edges, "no_optimum": none_found}
