"""Training noise from seeds: how much a (method, size)'s losses move from seed to seed.

The evaluation SE of a point (`PointRow.loss_se`) measures how well the held-out batches pin down that
model's loss; it says nothing of how a different seed (initialisation, data order) would have trained.
With two or more seeds of a (method, size) the seeds measure that directly:

- `seed_sd_best_loss`: the standard deviation, across the seeds, of each cell's best loss;
- `seed_sd_at_best_lr` / `seed_sd_at_neighbour_lr`: across the seeds that trained that learning rate
  (an `ok` point at it), the standard deviation of its loss;
- `seed_sd_gap`: across the seeds that trained both the cell's best LR and its neighbour's, the standard
  deviation of the difference `loss(neighbour) - loss(best)`: the training noise of the very gap the cell's
  bracket rests on (`n_seeds_gap` seeds).

A cell's bracket is *within noise* when its gap is under `NOISE_SES` times the noise of one gap: the seeds'
`seed_sd_gap` when at least two seeds trained both LRs (`noise: seeds`), else the paired evaluation SE of
the difference (`noise: eval`, `sweeper.records.noise`). With two seeds the sd has one degree of freedom:
it is an order of magnitude, not a precise number.

Standard library only; reads `optima`'s rows and each cell's `ok` losses by LR.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from sweeper.records.noise import NOISE_SES


def _key(lr: float) -> int:
    """Learning rates equal to 1e-4 (relative) share a key (grid values reached along two paths)."""
    return round(math.log(lr) * 1e4)


def _sd(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) >= 2 else None


def add_seed_noise(rows: list[dict[str, Any]], losses: Mapping[str, Mapping[float, float]]) -> None:
    """Set the seed-noise fields (module docstring) and `noise` on every row; `within_noise` from the seeds
    where they measure the gap. `losses`: per cell id, the final loss of each `ok` point by LR."""
    by_lr = {cid: {_key(lr): loss for lr, loss in pts.items()} for cid, pts in losses.items()}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((str(row["method"]), str(row["size"])), []).append(row)
    for group in groups.values():
        best = [float(r["best_loss"]) for r in group if r.get("best_loss") is not None]
        sd_best = _sd(best)
        for row in group:
            row["seed_sd_best_loss"] = sd_best
            row["n_seeds"] = len(group)
            seeds = [by_lr.get(r["cell_id"], {}) for r in group]
            row["seed_sd_at_best_lr"] = _at(seeds, row.get("best_lr"))
            row["seed_sd_at_neighbour_lr"] = _at(seeds, row.get("neighbour_lr"))
            gaps = []
            if row.get("best_lr") is not None and row.get("neighbour_lr") is not None:
                b, n = _key(row["best_lr"]), _key(row["neighbour_lr"])
                gaps = [s[n] - s[b] for s in seeds if b in s and n in s]
            row["seed_sd_gap"] = _sd(gaps)
            row["n_seeds_gap"] = len(gaps)
            if row.get("neighbour_gap") is None:
                row["noise"] = None
            elif row["seed_sd_gap"] is not None:
                row["noise"] = "seeds"
                row["within_noise"] = bool(row["neighbour_gap"] < NOISE_SES * row["seed_sd_gap"])
            else:
                row["noise"] = "eval"


def _at(seeds: list[dict[int, float]], lr: float | None) -> float | None:
    if lr is None:
        return None
    k = _key(lr)
    return _sd([s[k] for s in seeds if k in s])
