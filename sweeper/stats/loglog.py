"""A pure power law `y = c·x^b`, fitted by least squares of log y on log x, with intervals.

Two uses: the plain log-log slope of loss against scale (reported next to the form with an
irreducible term), and the optimal-LR law (`sweeper.stats.lrlaw`). Intervals come from the
small-sample-calibrated residual bootstrap (`sweeper.stats.estimate.small_sample_factor`),
which for this linear model reproduces the exact t interval under Gaussian scatter. With two
distinct x the line passes through both points: no scatter to estimate, so no interval.

Two intervals: the *confidence* interval bounds the fitted line (where the law is); the
*prediction* interval bounds one new observation at x (the line's uncertainty plus the
scatter of points about it: each bootstrap line plus one resampled, calibrated residual).
A grid for a new size must cover where that size's optimum will be: a prediction interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sweeper.stats.estimate import MISSING, Estimate, estimate, percentile_interval, small_sample_factor

EXTRAPOLATION_WARN = 4.0  # warn when a target lies more than this factor outside the fitted x


@dataclass
class PowerLawFit:
    x: np.ndarray
    y: np.ndarray
    x_ref: float
    coef: Estimate = MISSING  # c: the value at x = 1
    exponent: Estimate = MISSING  # b
    dof: int = 0
    warnings: list[str] = field(default_factory=list)
    status: Literal["ok", "insufficient"] = "ok"
    _intercept: float = math.nan  # in log(x / x_ref)
    _slope: float = math.nan
    _draws: tuple[np.ndarray, np.ndarray] | None = None
    _noise: np.ndarray | None = None  # calibrated residuals (log space), for prediction intervals

    @property
    def n_points(self) -> int:
        return int(self.x.size)

    @property
    def trustworthy(self) -> bool:
        return self.status == "ok" and not self.warnings

    def predict(
        self, xs: np.ndarray, *, interval: Literal["confidence", "prediction"] = "confidence", seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Predicted y at xs with its 95% band (None without an interval): the line's confidence
        band, or the prediction interval of one new observation (`seed` draws its residuals)."""
        xs = np.asarray(xs, dtype=float)
        if self.status == "insufficient":
            return np.full(xs.shape, np.nan), None, None
        u = np.log(xs / self.x_ref)
        with np.errstate(over="ignore"):
            pred = np.exp(self._intercept + self._slope * u)
            if self._draws is None:
                return pred, None, None
            b0, b1 = self._draws
            lines = b0[:, None] + b1[:, None] * u[None, :]
            if interval == "prediction":
                if self._noise is None:
                    return pred, None, None
                lines = lines + np.random.default_rng(seed).choice(self._noise, size=lines.shape)
            lo, hi = percentile_interval(lines, axis=0)
            return pred, np.exp(lo), np.exp(hi)

    def extrapolation_warnings(self, targets: np.ndarray, note: str = "") -> list[str]:
        out = []
        if self.status == "insufficient" or not self.x.size:
            return out
        lo, hi = float(self.x.min()), float(self.x.max())
        for t in np.asarray(targets, dtype=float):
            factor = max(t / hi, lo / t)
            if factor > EXTRAPOLATION_WARN:
                out.append(f"target {t:.4g} lies {factor:.1f}× outside the fitted sizes [{lo:.4g}, {hi:.4g}]{note}")
        return out


def line(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares intercept and slope of v on u, along the last axis."""
    mu, mv = u.mean(axis=-1, keepdims=True), v.mean(axis=-1, keepdims=True)
    du = u - mu
    slope = (du * (v - mv)).sum(axis=-1) / (du * du).sum(axis=-1)
    return mv[..., 0] - slope * mu[..., 0], slope


def fit_power_law(
    x: np.ndarray | list[float],
    y: np.ndarray | list[float],
    *,
    resamples: int = 2000,
    seed: int = 0,
    what: str = "a power law",
) -> PowerLawFit:
    """Fit log y = a + b·log x by least squares, with calibrated residual-bootstrap intervals.

    Inputs must be finite and positive (the caller says which quantity in its own error).
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    x_ref = float(np.exp(np.mean(np.log(x)))) if x.size else 1.0
    fit = PowerLawFit(x=x, y=y, x_ref=x_ref)
    n_distinct = np.unique(x).size
    if n_distinct < 2:
        fit.status = "insufficient"
        fit.warnings.append(("no sizes" if n_distinct == 0 else "a single size")
                            + f": {what} needs two or more sizes; not fitted")
        return fit

    u, v = np.log(x / x_ref), np.log(y)
    b0, b1 = (float(t) for t in line(u, v))
    fit._intercept, fit._slope = b0, b1
    fit.dof = x.size - 2
    with np.errstate(over="ignore"):  # a coefficient beyond float range is reported as null, not a crash
        coef = float(np.exp(b0 - b1 * math.log(x_ref)))
    if fit.dof <= 0:
        fit.coef, fit.exponent = Estimate(coef), Estimate(b1)
        fit.warnings.append(f"{what} through two sizes: the line passes through both; no scatter to estimate, "
                            "so no interval")
        return fit

    resid = v - (b0 + b1 * u)
    lev = 1.0 / u.size + (u - u.mean()) ** 2 / np.sum((u - u.mean()) ** 2)
    adjusted = resid / np.sqrt(np.clip(1.0 - lev, 1e-12, None))
    adjusted = (adjusted - adjusted.mean()) * small_sample_factor(fit.dof)
    if resamples > 0:
        rng = np.random.default_rng(seed)
        v_star = (b0 + b1 * u)[None, :] + adjusted[rng.integers(0, u.size, size=(resamples, u.size))]
        d0, d1 = line(np.broadcast_to(u, v_star.shape), v_star)
        fit._draws = (d0, d1)
        fit._noise = adjusted
        with np.errstate(over="ignore"):
            fit.coef = estimate(coef, np.exp(d0 - d1 * math.log(x_ref)))
        fit.exponent = estimate(b1, d1)
    else:
        fit.coef, fit.exponent = Estimate(coef), Estimate(b1)
    return fit
