"""The optimal LR in two variables (`sweeper.stats.lrlaw2`): a planted plane recovered with intervals that cover it,
near-optimal bands resampled by cell, and the inputs that cannot separate the variables refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweeper.stats.lrlaw2 import NotSeparable, fit_two_variable_law

A, B, C = -0.712, 0.307, math.log(1.79)  # StepLaw's medians as the planted truth


def planted(n_cells: int = 24, noise: float = 0.15, seed: int = 1) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    n = np.exp(rng.uniform(math.log(2e8), math.log(1e9), n_cells))
    d = np.exp(rng.uniform(math.log(4e9), math.log(1e11), n_cells))
    lr = np.exp(C + A * np.log(n) + B * np.log(d) + rng.normal(0, noise, n_cells))
    return n, d, lr, np.arange(n_cells)


def test_a_planted_plane_is_recovered_and_covered():
    law = fit_two_variable_law(*planted(), ("N", "D"), resamples=1000)
    (a, b) = law.exponents
    assert a.lo < A < a.hi and b.lo < B < b.hi
    assert abs(a.value - A) < 0.3 and abs(b.value - B) < 0.15 and law.n_cells == law.n_rows == 24
    # exactly on the plane: the least-squares solution is the plane, and the intervals collapse onto it
    n, d, _, cells = planted()
    exact = fit_two_variable_law(n, d, np.exp(C + A * np.log(n) + B * np.log(d)), cells, ("N", "D"), resamples=200)
    assert exact.exponents[0].value == pytest.approx(A) and exact.exponents[1].value == pytest.approx(B)
    assert exact.intercept.value == pytest.approx(C) and exact.predict(5e8, 2e10) == pytest.approx(
        1.79 * 5e8**A * 2e10**B)


def test_prediction_intervals_cover_new_cells_about_as_often_as_they_claim():
    n, d, lr, cells = planted(n_cells=30, noise=0.2, seed=3)
    law = fit_two_variable_law(n, d, lr, cells, ("N", "D"), resamples=1000)
    rng = np.random.default_rng(9)
    hits = 0
    for k in range(200):
        x1, x2 = math.exp(rng.uniform(math.log(2e8), math.log(1e9))), math.exp(rng.uniform(math.log(4e9), math.log(1e11)))
        new = math.exp(C + A * math.log(x1) + B * math.log(x2) + rng.normal(0, 0.2))
        lo, hi = law.prediction_interval(x1, x2, seed=k)
        hits += lo <= new <= hi
    assert 0.88 <= hits / 200 <= 0.995


def test_band_rows_move_with_their_cell():
    n, d, lr, cells = planted()
    # every cell twice (a band of two runs at the optimum): the fit is the same plane, resampled by cell
    law = fit_two_variable_law(np.repeat(n, 2), np.repeat(d, 2), np.repeat(lr, 2), np.repeat(cells, 2), ("N", "D"),
                               resamples=500)
    single = fit_two_variable_law(n, d, lr, cells, ("N", "D"), resamples=500)
    assert law.n_cells == 24 and law.n_rows == 48
    assert law.exponents[0].value == pytest.approx(single.exponents[0].value)
    assert law.exponents[0].lo == pytest.approx(single.exponents[0].lo, rel=0.05)  # cells, not rows, are the unit


def test_a_ladder_at_fixed_tokens_per_parameter_is_refused():
    n = np.array([1e8, 2e8, 4e8, 8e8, 1.6e9])
    with pytest.raises(NotSeparable, match="collinear"):
        fit_two_variable_law(n, 20 * n, 1e-3 * (n / 1e8) ** -0.3, np.arange(5), ("N", "D"))
    with pytest.raises(NotSeparable, match="barely varies"):
        fit_two_variable_law(np.full(5, 2.15e9) * [1, 1.001, 1.002, 1, 1.001], n * 10, np.full(5, 1e-3), np.arange(5),
                             ("N", "D"))
    with pytest.raises(NotSeparable, match="at least"):
        fit_two_variable_law(n[:3], n[::-1][:3], np.full(3, 1e-3), np.arange(3), ("N", "D"))
