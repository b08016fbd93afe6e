"""Learning-rate sensitivity of one cell (Wortsman et al. 2023) and its near-optimal LR range.

Sensitivity = mean over the swept LRs of the final loss capped at the loss at
initialisation, minus the best final loss. A diverged point counts at the cap (it learned
nothing useful); failed points (crashes) are left out, since their loss is unknown rather
than bad. The value depends on which LRs were swept: compare methods on the same LR range
(`common_lrs`), because adaptive bracketing gives each cell its own grid.

The near-optimal range is the span of finished LRs whose loss is within 0.25% of the best
(DeepSeek LLM, StepLaw); it is flagged when it touches the edge of the swept grid, where
the true range may extend further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

NEAR_OPTIMAL = 0.0025  # relative loss tolerance of the near-optimal range


@dataclass(frozen=True)
class Sensitivity:
    value: float | None
    best_loss: float | None
    best_lr: float | None
    near_opt_lo: float | None
    near_opt_hi: float | None
    n_lrs: int
    n_diverged: int
    lr_min: float | None
    lr_max: float | None
    near_opt_at_edge: bool
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "value": self.value,
            "best_loss": self.best_loss,
            "best_lr": self.best_lr,
            "near_opt_lo": self.near_opt_lo,
            "near_opt_hi": self.near_opt_hi,
            "near_opt_at_edge": self.near_opt_at_edge,
            "n_lrs": self.n_lrs,
            "n_diverged": self.n_diverged,
            "lr_min": self.lr_min,
            "lr_max": self.lr_max,
            "warnings": list(self.warnings),
        }


def lr_sensitivity(
    lrs: np.ndarray | list[float],
    losses: np.ndarray | list[float],
    diverged: np.ndarray | list[bool],
    init_loss: float | None,
    *,
    tolerance: float = NEAR_OPTIMAL,
) -> Sensitivity:
    """Sensitivity of one cell from its finished points (ok: finite loss; diverged: flagged).

    `losses` of diverged points are ignored. Without an initial loss the cap is unknown:
    the value is then None if any point diverged, and uncapped (with a warning) otherwise.
    """
    lrs = np.asarray(lrs, dtype=float)
    losses = np.asarray(losses, dtype=float)
    diverged = np.asarray(diverged, dtype=bool)
    if not (lrs.shape == losses.shape == diverged.shape):
        raise ValueError("lrs, losses and diverged must have the same length")
    ok = ~diverged & np.isfinite(losses)
    n, n_div = int(lrs.size), int(diverged.sum())
    warnings: list[str] = []
    lr_min = float(lrs.min()) if n else None
    lr_max = float(lrs.max()) if n else None
    if not ok.any():
        reason = "every swept LR diverged" if n else "no finished points"
        return Sensitivity(None, None, None, None, None, n, n_div, lr_min, lr_max, False, [f"{reason}: no sensitivity"])

    best_i = int(np.argmin(np.where(ok, losses, np.inf)))
    best = float(losses[best_i])
    near = ok & (losses <= best * (1.0 + tolerance))
    near_lo, near_hi = float(lrs[near].min()), float(lrs[near].max())
    at_edge = bool(n >= 2 and (near_lo <= lr_min or near_hi >= lr_max))  # type: ignore[operator]
    if at_edge:
        warnings.append("the near-optimal range touches the edge of the swept LRs: it may extend further")

    cap = init_loss if init_loss is not None and math.isfinite(init_loss) else None
    if cap is None:
        if n_div:
            warnings.append("no loss at initialisation recorded: diverged points cannot be capped; no sensitivity")
            value = None
        else:
            warnings.append("no loss at initialisation recorded: losses left uncapped")
            value = float(np.mean(losses[ok]) - best)
    else:
        capped = np.where(ok, np.minimum(np.where(ok, losses, cap), cap), cap)
        value = float(np.mean(capped) - best)
    if n < 3:
        warnings.append(f"only {n} swept LR(s): the sensitivity average is not meaningful")
    return Sensitivity(value, best, float(lrs[best_i]), near_lo, near_hi, n, n_div, lr_min, lr_max, at_edge, warnings)


def common_lrs(grids: list[np.ndarray], rel_tol: float = 1e-6) -> np.ndarray:
    """The LRs present (to a relative tolerance) in every one of `grids`."""
    if not grids:
        return np.array([])
    common = np.unique(np.asarray(grids[0], dtype=float))
    for grid in grids[1:]:
        grid = np.asarray(grid, dtype=float)
        keep = [lr for lr in common if np.any(np.abs(grid - lr) <= rel_tol * lr)]
        common = np.array(keep, dtype=float)
    return common


def distinct_lrs(grids: list[np.ndarray], rel_tol: float = 1e-6) -> list[float]:
    """The distinct learning rates of several grids (equal within `rel_tol`), ascending."""
    out: list[float] = []
    for lr in sorted(float(v) for grid in grids for v in grid):
        if not out or abs(lr - out[-1]) > rel_tol * lr:
            out.append(lr)
    return out
