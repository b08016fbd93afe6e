"""Point estimates with bootstrap intervals, and the checks that say when not to trust them.

`Estimate` is the unit every fit reports: a value and a 95% percentile interval (or no
interval, with the reason among the fit's warnings). The helpers here turn arrays of
bootstrap replicates into estimates and collect the "intervals wider than the value"
warnings in one place, so that every fit applies the same rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri, stdtrit

LEVEL = 0.95  # two-sided coverage of every interval the fits report


@dataclass(frozen=True)
class Estimate:
    """A value with a percentile interval; `lo`/`hi` are None when no interval could be formed."""

    value: float | None
    lo: float | None = None
    hi: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"value": _finite_or_none(self.value), "lo": _finite_or_none(self.lo), "hi": _finite_or_none(self.hi)}

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    def contains(self, truth: float) -> bool:
        return self.has_interval and self.lo <= truth <= self.hi  # type: ignore[operator]


MISSING = Estimate(None)


def _finite_or_none(v: float | None) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def percentile_interval(replicates: np.ndarray, level: float = LEVEL, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap replicates along `axis` (NaN replicates ignored)."""
    tail = 100.0 * (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        lo, hi = np.nanpercentile(replicates, [tail, 100.0 - tail], axis=axis)
    return lo, hi


def estimate(value: float, replicates: np.ndarray | None) -> Estimate:
    """An estimate from a point value and its bootstrap replicates (None: no interval)."""
    if replicates is None or not np.isfinite(replicates).any():
        return Estimate(float(value))
    lo, hi = percentile_interval(np.asarray(replicates, dtype=float))
    return Estimate(float(value), float(lo), float(hi))


def small_sample_factor(dof: int, level: float = 0.95) -> float:
    """t(dof) over normal quantile: widens resampled residuals for the uncertainty of the noise scale itself.

    A residual bootstrap treats the residual scale as known; with only a few residual degrees
    of freedom that scale is itself uncertain, and the plain bootstrap undercovers (61–69% at
    4 points, 91–93% at 8 for the 3-parameter loss form). Scaling the leverage-corrected
    residuals by t_{dof}/z reproduces the exact t interval for a linear model with Gaussian
    noise, and measured 93–97% coverage for 4–8 points with the loss form
    (`sweeper bench coverage`).
    """
    if dof <= 0:
        return math.nan
    tail = 0.5 + level / 2
    return float(stdtrit(dof, tail) / ndtri(tail))


def width_warnings(named: dict[str, Estimate]) -> list[str]:
    """'interval wider than the value' for every estimate whose 95% interval is wider than |value|."""
    out = []
    for name, est in named.items():
        if est.value is None or not est.has_interval:
            continue
        width = est.hi - est.lo  # type: ignore[operator]
        if width > abs(est.value):
            out.append(
                f"{name}: 95% interval [{_g(est.lo)}, {_g(est.hi)}] is wider than the value {_g(est.value)}"
            )
    return out


def _g(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"
