"""Seeds in the fits: the two-level bootstrap (sizes, then seeds within each) and inverse-variance weights."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sweeper.analysis.fits.collect import Scale, SizeResult
from sweeper.analysis.fits.powerlaw import fit_loss_curve
from sweeper.analysis.fits.seeds import SE_FLOOR_OF_MEDIAN, size_weights
from sweeper.cli import main
from tests.sweeper.analysis.fits.conftest import Truth

X = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
TRUE = 3.0 + 6.0 * X**-0.5
WOBBLE = np.array([0.004, -0.003, 0.001, -0.004, 0.002, 0.0])  # the means' scatter about the curve


def alpha_width(spread: float | None) -> float:
    seeds = None if spread is None else [[m - spread, m + spread] for m in TRUE + WOBBLE]
    fit = fit_loss_curve(X, TRUE + WOBBLE, resamples=2000, seed=1, seed_values=seeds)
    assert fit.alpha.lo is not None and fit.alpha.hi is not None
    return fit.alpha.hi - fit.alpha.lo


def test_the_interval_widens_with_the_seeds_spread():
    """Same means, same residuals: only the seeds' spread within each size differs, and the second level
    carries it into the interval."""
    one_level = alpha_width(None)
    narrow, wide = alpha_width(0.002), alpha_width(0.05)
    assert one_level <= narrow * 1.05
    assert wide > 2 * narrow, (narrow, wide)


def test_seed_deviations_have_the_seeds_variance_of_a_mean():
    """With k seeds the second level's sd of a size's mean is s/√k (the √(k/(k−1)) correction)."""
    from sweeper.analysis.fits.powerlaw import _seed_deviations

    rng = np.random.default_rng(0)
    values = np.array([3.0, 3.1, 3.3])
    dev = _seed_deviations([values], 200_000, rng)[:, 0]
    assert float(np.std(dev)) == pytest.approx(float(np.std(values, ddof=1)) / math.sqrt(3), rel=0.02)
    assert not _seed_deviations([np.array([3.0])], 10, rng).any()  # one seed: no second level


def test_weights_follow_the_planted_noise():
    """One size's seeds disagree by 0.3 and its mean sits 0.1 off the curve: weighted by 1/SE², the fit
    recovers the planted E and α; unweighted, that size drags them."""
    y = TRUE.copy()
    y[2] += 0.1
    se = np.full(X.size, 0.003)
    se[2] = 0.15
    plain = fit_loss_curve(X, y, resamples=0)
    weighted = fit_loss_curve(X, y, resamples=0, weights=1 / se**2)
    assert abs(weighted.alpha.value - 0.5) < 0.02 < abs(plain.alpha.value - 0.5)
    assert abs(weighted.E.value - 3.0) < abs(plain.E.value - 3.0)


def _size(name: str, seeds: list[float], eval_se: float | None = None) -> SizeResult:
    return SizeResult(method="m", size=name, scale=Scale(2, 1, 1, 1.0, 1.0), objective=float(np.mean(seeds)),
                      objective_seeds=seeds, lr_opt=1e-3, lr_opt_seeds=[1e-3] * len(seeds), lr_sources=["interp"],
                      seeds=list(range(len(seeds))), statuses=["bracketed"], cell_ids=[name],
                      loss_se_seeds=[eval_se] * len(seeds))


def test_size_weights_floor_and_one_seed_sizes():
    sizes = [_size("L2", [3.0, 3.02]), _size("L4", [2.9, 2.96]), _size("L8", [2.8, 2.8]), _size("L16", [2.7])]
    table = size_weights(sizes)
    assert table is not None
    measured = [0.02 / 2, 0.06 / 2]  # sd/√2 of two seeds = |difference| / 2
    median = float(np.median([*measured, 0.0]))
    assert table["L2"][1] == pytest.approx(0.01) and table["L4"][1] == pytest.approx(0.03)
    assert table["L8"][1] == pytest.approx(SE_FLOOR_OF_MEDIAN * median)  # identical seeds: the floor
    assert table["L16"][1] == pytest.approx(median)  # one seed: the median measured SE
    assert table["L2"][0] == pytest.approx(1 / 0.01**2)
    assert size_weights([_size("L2", [3.0]), _size("L4", [2.9])]) is None  # nothing measured: unweighted


def test_fits_json_says_how_sizes_were_weighted_and_resampled(make_sweep, capsys):
    root = make_sweep(truths={"pre": Truth()}, depths=[2, 4, 8, 16, 32], seeds=(0, 1, 2), noise=0.02,
                      seed_noise={("pre", 8): 0.2})
    assert main(["fit", str(root), "--json", "--no-write", "--resamples", "400"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["size"]: r for r in doc["methods"]["pre"]["sizes"]}
    assert rows["L8"]["weight"] < min(r["weight"] for s, r in rows.items() if s != "L8")
    assert doc["options"]["weighted"] is True and "seeds within each size" in doc["options"]["bootstrap_levels"]
    assert "1/SE²" in doc["inputs"]["weights"]
    assert main(["fit", str(root), "--json", "--no-write", "--resamples", "400", "--unweighted"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(r["weight"] is None for r in doc["methods"]["pre"]["sizes"]) and doc["options"]["weighted"] is False
