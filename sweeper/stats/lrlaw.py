"""Optimal learning rate against size: a pure power law `LR*(x) = c·x^b`, fitted in log space.

Least squares of log LR* on log x (no irreducible term: the optimum LR keeps falling with
size), with the calibrated residual bootstrap of `sweeper.stats.loglog`. With two sizes the
line passes through both points and there is no interval.

`predict_optimal_lr` is the planner's entry point for `prior: extrapolate`: it returns None
with fewer than two distinct sizes (the caller keeps the YAML's grid centre), and a
prediction whose `lo`/`hi` are None with two sizes (centre the grid there, but do not
narrow it: nothing bounds the error). Its interval is a *prediction* interval: where the new
size's own optimum will lie (the law's uncertainty plus the scatter of optima about it), not
where the law lies; a grid narrowed to the law's confidence interval misses the optimum
whenever that size sits as far off the line as the fitted sizes do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sweeper.stats.estimate import width_warnings
from sweeper.stats.loglog import EXTRAPOLATION_WARN, PowerLawFit, fit_power_law

__all__ = ["EXTRAPOLATION_WARN", "LRLawFit", "LRPrediction", "fit_lr_law", "predict_optimal_lr"]

LRLawFit = PowerLawFit  # the LR law is a pure power law; the name says what it holds
DEFAULT_RESAMPLES = 2000
EXTRAPOLATION_NOTE = (": straight-line LR laws have under-predicted by more than 4× at scale; verify with a small "
                      "bracket")


@dataclass(frozen=True)
class LRPrediction:
    """A predicted optimal LR and the 95% prediction interval of that size's optimum (None when it
    cannot be estimated)."""

    lr: float
    lo: float | None
    hi: float | None
    n_points: int
    warnings: tuple[str, ...] = ()

    @property
    def ratio(self) -> float | None:
        """hi/lo: how many-fold the interval spans (None without an interval)."""
        if self.lo is None or self.hi is None or self.lo <= 0:
            return None
        return self.hi / self.lo


def fit_lr_law(
    sizes: np.ndarray | list[float],
    lrs: np.ndarray | list[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> LRLawFit:
    """Fit log LR* = a + b·log x by least squares, with calibrated residual-bootstrap intervals."""
    x = np.asarray(sizes, dtype=float)
    lr = np.asarray(lrs, dtype=float)
    if x.shape != lr.shape or x.ndim != 1:
        raise ValueError(f"sizes and lrs must be 1-D arrays of the same length (got {x.shape} and {lr.shape})")
    if not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise ValueError("sizes must be finite and positive")
    if not (np.all(np.isfinite(lr)) and np.all(lr > 0)):
        raise ValueError("learning rates must be finite and positive")
    fit = fit_power_law(x, lr, resamples=resamples, seed=seed, what="an LR law")
    if fit.status == "ok" and fit.dof > 0:
        fit.warnings.extend(width_warnings({"LR exponent": fit.exponent}))
    return fit


def predict_optimal_lr(
    sizes: np.ndarray | list[float],
    lrs: np.ndarray | list[float],
    target: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    interval: Literal["prediction", "confidence"] = "prediction",
) -> LRPrediction | None:
    """The optimal LR at `target` from the power law through (sizes, lrs), with the 95% prediction
    interval of the optimum measured at that size.

    Returns None with fewer than two distinct sizes (keep the YAML's grid centre). With
    exactly two sizes, `lo` and `hi` are None (no scatter to estimate: do not narrow the
    grid). Sizes and target must be on the same axis (depths, or parameter counts).
    `interval="confidence"` returns the law's own band instead (what the planner used before;
    kept for comparison by `sweeper bench prior`).
    """
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target size must be finite and positive (got {target!r})")
    fit = fit_lr_law(sizes, lrs, resamples=resamples, seed=seed)
    if fit.status == "insufficient":
        return None
    pred, lo, hi = fit.predict(np.array([float(target)]), interval=interval, seed=seed)
    warnings = [*fit.warnings, *fit.extrapolation_warnings(np.array([float(target)]), EXTRAPOLATION_NOTE)]
    return LRPrediction(
        lr=float(pred[0]),
        lo=None if lo is None else float(lo[0]),
        hi=None if hi is None else float(hi[0]),
        n_points=fit.n_points,
        warnings=tuple(warnings),
    )
