"""Optimal LR against size: exact recovery, interval coverage, the planner's fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from sweeper.stats.lrlaw import LRPrediction, fit_lr_law, predict_optimal_lr

DEPTHS = np.array([48, 64, 96, 128, 192, 256, 384, 512], dtype=float)


def law(x: np.ndarray | float, c: float = 0.05, b: float = -0.6) -> np.ndarray:
    return c * np.asarray(x, dtype=float) ** b


def test_exact_power_law_is_recovered_exactly() -> None:
    fit = fit_lr_law(DEPTHS, law(DEPTHS), resamples=300)
    assert fit.exponent.value == pytest.approx(-0.6, rel=1e-12)
    assert fit.coef.value == pytest.approx(0.05, rel=1e-12)
    assert fit.exponent.hi - fit.exponent.lo < 1e-12
    pred = predict_optimal_lr(DEPTHS, law(DEPTHS), 1024)
    assert isinstance(pred, LRPrediction)
    assert pred.lr == pytest.approx(float(law(1024)), rel=1e-12)
    assert pred.lo == pytest.approx(pred.lr, rel=1e-9) and pred.hi == pytest.approx(pred.lr, rel=1e-9)
    assert pred.n_points == 8


def test_parameter_counts_and_suffixes_work_the_same() -> None:
    n = np.array([58e6, 134e6, 369e6])
    lr = 0.0047 * (n / 108e6) ** (-1 / 3)  # Porian et al.'s law
    pred = predict_optimal_lr(n, lr, 1.34e9)
    assert pred is not None
    assert pred.lr == pytest.approx(0.0047 * (1.34e9 / 108e6) ** (-1 / 3), rel=1e-10)


@pytest.mark.parametrize("points", [3, 5, 8])
def test_95_percent_intervals_cover_the_truth_about_95_percent_of_the_time(points: int) -> None:
    x = DEPTHS[np.linspace(0, DEPTHS.size - 1, points).astype(int)]
    rng = np.random.default_rng(11)
    draws, hits = 400, np.zeros(2)
    for d in range(draws):
        lrs = law(x) * np.exp(rng.normal(0, 0.2, x.size))
        fit = fit_lr_law(x, lrs, resamples=400, seed=d)
        _, lo, hi = fit.predict(np.array([1024.0]))
        hits += [fit.exponent.contains(-0.6), lo[0] <= law(1024.0) <= hi[0]]
    coverage = hits / draws
    assert np.all(coverage >= 0.88) and np.all(coverage <= 0.99), coverage


def test_fewer_than_two_sizes_returns_none_for_the_planner() -> None:
    assert predict_optimal_lr([], [], 128) is None
    assert predict_optimal_lr([48], [3e-3], 128) is None
    assert predict_optimal_lr([48, 48], [3e-3, 2.5e-3], 128) is None  # two seeds of one size
    fit = fit_lr_law([48], [3e-3])
    assert fit.status == "insufficient" and "single size" in fit.warnings[0]


def test_two_sizes_give_a_centre_without_an_interval() -> None:
    pred = predict_optimal_lr([48, 96], [4e-3, 2e-3], 192)
    assert pred is not None
    assert pred.lr == pytest.approx(1e-3)
    assert pred.lo is None and pred.hi is None and pred.ratio is None
    assert any("no interval" in w for w in pred.warnings)


def test_far_extrapolation_warns() -> None:
    pred = predict_optimal_lr(DEPTHS[:4], law(DEPTHS[:4]) * [1.0, 1.1, 0.95, 1.02], 4096)
    assert pred is not None
    assert any("outside the fitted sizes" in w for w in pred.warnings)
    near = predict_optimal_lr(DEPTHS[:4], law(DEPTHS[:4]) * [1.0, 1.1, 0.95, 1.02], 192)
    assert near is not None and not any("outside" in w for w in near.warnings)
    assert near.lo < near.lr < near.hi and near.ratio > 1


def test_bad_inputs_raise_with_a_reason() -> None:
    with pytest.raises(ValueError, match="learning rates must be finite and positive"):
        fit_lr_law([48, 96], [1e-3, 0.0])
    with pytest.raises(ValueError, match="target size"):
        predict_optimal_lr([48, 96], [1e-3, 5e-4], float("nan"))


@pytest.mark.parametrize("known", [4, 6])
def test_prediction_interval_covers_the_next_sizes_optimum(known: int) -> None:
    """`prior: extrapolate`'s situation: the next depth's own optimum, scattered about the law as the
    fitted ones are. The prediction interval covers it about 95% of the time; the law's confidence
    band, narrower, covers it less often."""
    x, target = DEPTHS[:known], float(DEPTHS[known])
    rng = np.random.default_rng(5)
    draws, hits, wider = 300, np.zeros(2), 0
    for d in range(draws):
        lrs = law(x) * np.exp(rng.normal(0, 0.2, x.size))
        new = float(law(target)) * np.exp(rng.normal(0, 0.2))
        conf = predict_optimal_lr(x, lrs, target, resamples=300, seed=d, interval="confidence")
        pred = predict_optimal_lr(x, lrs, target, resamples=300, seed=d)
        assert conf is not None and pred is not None and pred.lr == conf.lr
        hits += [conf.lo <= new <= conf.hi, pred.lo <= new <= pred.hi]
        wider += pred.ratio > conf.ratio
    coverage = hits / draws
    assert 0.90 <= coverage[1] <= 0.99, coverage
    assert coverage[0] < coverage[1] and wider == draws
