"""The optimal learning rate in two variables: `log η* = c + a·log X1 + b·log X2` (StepLaw's
`η* = 1.79·N^-0.713·D^0.307` is this form with X1 = N parameters, X2 = D tokens).

Least squares over rows of (log X1, log X2, log η*). A row is one cell's optimum, or one run of the
cell's near-optimal band (every run within 0.25% of the cell's best loss, as StepLaw and DeepSeek fit):
a cell then holds several rows. Intervals: the **cases (pairs) bootstrap over cells** — resample whole
cells with replacement, refit, take the 2.5 and 97.5 percentiles of each coefficient — so a cell's band
rows stay together and the scatter of optima about the plane is what sets the width. Resamples in
which the two variables cannot be separated (a resample of too few distinct cells) are skipped and
counted.

Two variables can only be separated when they vary independently. A ladder at fixed tokens per
parameter (D = k·N) has log D = log N + const: the plane is not identified. `check_separable` refuses
such inputs: |correlation of log X1 and log X2| above `MAX_CORRELATION`, or either variable spanning
less than `MIN_SPREAD` in natural log (a factor of ~1.1). numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sweeper.stats.estimate import LEVEL

MAX_CORRELATION = 0.98
MIN_SPREAD = 0.1  # natural-log range a variable must span (max - min)
MIN_CELLS = 4  # three coefficients and one degree of freedom
DEFAULT_RESAMPLES = 2000


class NotSeparable(ValueError):
    """The two variables cannot be told apart (collinear, or one barely varies); the message says which."""


@dataclass(frozen=True)
class Coefficient:
    value: float
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class TwoVariableLaw:
    names: tuple[str, str]
    intercept: Coefficient  # c in log space: η* = exp(c)·X1^a·X2^b
    exponents: tuple[Coefficient, Coefficient]
    n_cells: int
    n_rows: int
    correlation: float  # of log X1 and log X2 over the rows
    condition: float  # condition number of the centred, scaled design
    resamples: int
    skipped: int  # resamples that could not separate the variables
    residual_sd: float  # of log η* about the plane
    warnings: list[str] = field(default_factory=list)
    draws: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)), repr=False)  # bootstrap (c, a, b)
    residuals: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)  # log η* minus the plane

    def predict(self, x1: float, x2: float) -> float:
        a, b = self.exponents
        return math.exp(self.intercept.value + a.value * math.log(x1) + b.value * math.log(x2))

    def prediction_interval(self, x1: float, x2: float, seed: int = 0) -> tuple[float, float] | None:
        """95% interval for one new cell's optimum at (x1, x2): each bootstrap plane plus one residual drawn from
        the fit's, inflated by sqrt(n / (n - 3)) for the three fitted coefficients (None without draws or
        without a degree of freedom)."""
        n = self.residuals.size
        if not len(self.draws) or n <= 3:
            return None
        rng = np.random.default_rng(seed)
        planes = self.draws @ np.array([1.0, math.log(x1), math.log(x2)])
        noise = rng.choice(self.residuals, size=planes.size) * math.sqrt(n / (n - 3))
        tail = (1 - LEVEL) / 2 * 100
        lo, hi = np.percentile(planes + noise, [tail, 100 - tail])
        return math.exp(float(lo)), math.exp(float(hi))


def check_separable(log1: np.ndarray, log2: np.ndarray, names: tuple[str, str]) -> tuple[float, float]:
    """(correlation, condition number) of the two log variables; NotSeparable when the plane is not identified."""
    for values, name in ((log1, names[0]), (log2, names[1])):
        spread = float(np.ptp(values)) if values.size else 0.0
        if spread < MIN_SPREAD:
            raise NotSeparable(f"{name} barely varies over the cells (a factor of {math.exp(spread):.4g} from "
                               f"smallest to largest): a law in {names[0]} and {names[1]} cannot be fitted; fit the "
                               "one-variable law instead")
    r = float(np.corrcoef(log1, log2)[0, 1])
    z = np.column_stack([(log1 - log1.mean()) / log1.std(), (log2 - log2.mean()) / log2.std()])
    cond = float(np.linalg.cond(z))
    if not math.isfinite(r) or abs(r) > MAX_CORRELATION:
        raise NotSeparable(f"log {names[0]} and log {names[1]} are collinear over the cells (correlation {r:.4f}, "
                           f"condition number {cond:.3g}): e.g. a ladder at fixed {names[1]}/{names[0]}; the two "
                           "exponents cannot be separated, only their sum: fit the one-variable law instead")
    return r, cond


def _solve(design: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    return coef if rank == design.shape[1] else None


def fit_two_variable_law(
    x1: np.ndarray, x2: np.ndarray, lr: np.ndarray, cells: np.ndarray, names: tuple[str, str], *,
    resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
) -> TwoVariableLaw:
    """Fit `log lr = c + a·log x1 + b·log x2` over the rows; `cells` labels each row's cell (the bootstrap's
    unit). Raises NotSeparable (a ValueError) when the inputs cannot identify both exponents."""
    x1, x2, lr = (np.asarray(v, dtype=float) for v in (x1, x2, lr))
    cells = np.asarray(cells)
    if not (np.all(x1 > 0) and np.all(x2 > 0) and np.all(lr > 0)):
        raise ValueError("every value of a two-variable law must be > 0")
    unique = list(dict.fromkeys(cells.tolist()))
    if len(unique) < MIN_CELLS:
        raise NotSeparable(f"{len(unique)} cells: a law in two variables needs at least {MIN_CELLS}")
    l1, l2, y = np.log(x1), np.log(x2), np.log(lr)
    r, cond = check_separable(l1, l2, names)
    design = np.column_stack([np.ones_like(y), l1, l2])
    coef = _solve(design, y)
    if coef is None:
        raise NotSeparable(f"the design in log {names[0]} and log {names[1]} is rank-deficient")
    residuals = y - design @ coef
    residual_sd = float(np.sqrt(np.sum(residuals**2) / (len(y) - 3))) if len(y) > 3 else 0.0
    index = {c: np.flatnonzero(cells == c) for c in unique}
    rng = np.random.default_rng(seed)
    draws, skipped = [], 0
    for _ in range(resamples):
        pick = rng.integers(0, len(unique), len(unique))
        rows = np.concatenate([index[unique[k]] for k in pick])
        if len({unique[k] for k in pick}) < 3 or np.ptp(l1[rows]) < MIN_SPREAD / 10 or np.ptp(l2[rows]) < MIN_SPREAD / 10:
            skipped += 1
            continue
        got = _solve(design[rows], y[rows])
        if got is None:
            skipped += 1
            continue
        draws.append(got)
    tail = (1 - LEVEL) / 2 * 100
    if draws:
        lo, hi = np.percentile(np.array(draws), [tail, 100 - tail], axis=0)
    else:
        lo = hi = np.full(3, np.nan)

    def coefficient(i: int) -> Coefficient:
        ok = bool(draws) and math.isfinite(lo[i]) and math.isfinite(hi[i])
        return Coefficient(float(coef[i]), float(lo[i]) if ok else None, float(hi[i]) if ok else None)

    warnings = []
    if skipped > 0.05 * resamples:
        warnings.append(f"{skipped} of {resamples} resamples could not separate {names[0]} and {names[1]} and were "
                        "skipped: the intervals are optimistic")
    if abs(r) > 0.9:
        warnings.append(f"log {names[0]} and log {names[1]} are strongly correlated (r = {r:.3f}): the exponents "
                        "trade off; read their intervals together")
    return TwoVariableLaw(names, coefficient(0), (coefficient(1), coefficient(2)), len(unique), len(y), r, cond,
                          resamples, skipped, residual_sd, warnings, np.array(draws).reshape(-1, 3), residuals)
