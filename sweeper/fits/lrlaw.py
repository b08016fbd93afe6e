"""Optimal learning rate against size: a pure power law `LR*(x) = c·x^b`, fitted in log space.

Least squares of log LR* on log x (no irreducible term: the optimum LR keeps falling with
size). Intervals come from the same small-sample-calibrated residual bootstrap as the loss
fits (`sweeper.fits.powerlaw.small_sample_factor`), which for this linear model reproduces
the exact t interval under Gaussian scatter. With two sizes the line passes through both
points and there is no scatter to estimate, so there is no interval.

`predict_optimal_lr` is the planner's entry point for `prior: extrapolate`: it returns None
with fewer than two distinct sizes (the caller keeps the YAML's grid centre), and a
prediction whose `lo`/`hi` are None with two sizes (centre the grid there, but do not
narrow it: nothing bounds the error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sweeper.fits.estimate import MISSING, Estimate, estimate, percentile_interval, width_warnings
from sweeper.fits.powerlaw import DEFAULT_RESAMPLES, small_sample_factor

EXTRAPOLATION_WARN = 4.0  # warn when a target lies more than this factor beyond the fitted sizes


@dataclass(frozen=True)
class LRPrediction:
    """A predicted optimal LR and its 95% interval (None when it cannot be estimated)."""

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


@dataclass
class LRLawFit:
    x: np.ndarray
    lr: np.ndarray
    x_ref: float
    coef: Estimate = MISSING  # c in LR* = c·x^b (the LR at x = 1)
    exponent: Estimate = MISSING  # b
    dof: int = 0
    warnings: list[str] = field(default_factory=list)
    status: Literal["ok", "insufficient"] = "ok"
    _intercept: float = math.nan  # in log(x / x_ref)
    _slope: float = math.nan
    _draws: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n_points(self) -> int:
        return int(self.x.size)

    @property
    def trustworthy(self) -> bool:
        return self.status == "ok" and not self.warnings

    def predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Predicted LR* at xs with its 95% band (None without an interval)."""
        xs = np.asarray(xs, dtype=float)
        if self.status == "insufficient":
            return np.full(xs.shape, np.nan), None, None
        u = np.log(xs / self.x_ref)
        pred = np.exp(self._intercept + self._slope * u)
        if self._draws is None:
            return pred, None, None
        b0, b1 = self._draws
        lo, hi = percentile_interval(b0[:, None] + b1[:, None] * u[None, :], axis=0)
        return pred, np.exp(lo), np.exp(hi)

    def extrapolation_warnings(self, targets: np.ndarray) -> list[str]:
        out = []
        if self.status == "insufficient" or not self.x.size:
            return out
        lo, hi = float(self.x.min()), float(self.x.max())
        for t in np.asarray(targets, dtype=float):
            factor = max(t / hi, lo / t)
            if factor > EXTRAPOLATION_WARN:
                out.append(
                    f"target {t:.4g} lies {factor:.1f}× outside the fitted sizes [{lo:.4g}, {hi:.4g}]: straight-line "
                    "LR laws have under-predicted by more than 4× at scale; verify with a small bracket"
                )
        return out


def _line(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares intercept and slope of v on u, along the last axis."""
    mu, mv = u.mean(axis=-1, keepdims=True), v.mean(axis=-1, keepdims=True)
    du = u - mu
    slope = (du * (v - mv)).sum(axis=-1) / (du * du).sum(axis=-1)
    return mv[..., 0] - slope * mu[..., 0], slope


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
    order = np.argsort(x, kind="stable")
    x, lr = x[order], lr[order]
    x_ref = float(np.exp(np.mean(np.log(x)))) if x.size else 1.0
    fit = LRLawFit(x=x, lr=lr, x_ref=x_ref)
    n_distinct = np.unique(x).size
    if n_distinct < 2:
        fit.status = "insufficient"
        fit.warnings.append(
            ("no sizes" if n_distinct == 0 else "a single size")
            + ": an LR law needs optima at two or more sizes; not fitted"
        )
        return fit

    u, v = np.log(x / x_ref), np.log(lr)
    b0, b1 = (float(t) for t in _line(u, v))
    fit._intercept, fit._slope = b0, b1
    fit.dof = x.size - 2
    coef = math.exp(b0 - b1 * math.log(x_ref))
    if fit.dof <= 0:
        fit.coef, fit.exponent = Estimate(coef), Estimate(b1)
        fit.warnings.append("two sizes: the line passes through both optima; no scatter to estimate, so no interval")
        return fit

    resid = v - (b0 + b1 * u)
    lev = 1.0 / u.size + (u - u.mean()) ** 2 / np.sum((u - u.mean()) ** 2)
    adjusted = resid / np.sqrt(np.clip(1.0 - lev, 1e-12, None))
    adjusted = (adjusted - adjusted.mean()) * small_sample_factor(fit.dof)
    if resamples > 0:
        rng = np.random.default_rng(seed)
        v_star = (b0 + b1 * u)[None, :] + adjusted[rng.integers(0, u.size, size=(resamples, u.size))]
        d0, d1 = _line(np.broadcast_to(u, v_star.shape), v_star)
        fit._draws = (d0, d1)
        fit.coef = estimate(coef, np.exp(d0 - d1 * math.log(x_ref)))
        fit.exponent = estimate(b1, d1)
    else:
        fit.coef, fit.exponent = Estimate(coef), Estimate(b1)
    fit.warnings.extend(width_warnings({"LR exponent": fit.exponent}))
    return fit


def predict_optimal_lr(
    sizes: np.ndarray | list[float],
    lrs: np.ndarray | list[float],
    target: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> LRPrediction | None:
    """The optimal LR at `target` from the power law through (sizes, lrs), with a 95% interval.

    Returns None with fewer than two distinct sizes (keep the YAML's grid centre). With
    exactly two sizes, `lo` and `hi` are None (no scatter to estimate: do not narrow the
    grid). Sizes and target must be on the same axis (depths, or parameter counts).
    """
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target size must be finite and positive (got {target!r})")
    fit = fit_lr_law(sizes, lrs, resamples=resamples, seed=seed)
    if fit.status == "insufficient":
        return None
    pred, lo, hi = fit.predict(np.array([float(target)]))
    warnings = [*fit.warnings, *fit.extrapolation_warnings(np.array([float(target)]))]
    return LRPrediction(
        lr=float(pred[0]),
        lo=None if lo is None else float(lo[0]),
        hi=None if hi is None else float(hi[0]),
        n_points=fit.n_points,
        warnings=tuple(warnings),
    )
