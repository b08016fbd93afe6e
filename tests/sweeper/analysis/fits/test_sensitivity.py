"""Wortsman LR sensitivity and the near-optimal LR range, checked against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweeper.analysis.fits.sensitivity import common_lrs, lr_sensitivity
from sweeper.analysis.fits.units import format_size, parse_size

INIT = math.log(32000)


def test_sensitivity_is_mean_capped_loss_minus_best_with_diverged_points_at_the_cap() -> None:
    lrs = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    losses = [3.50, 3.40, 3.408, 12.0, np.nan]  # 12.0 is above the initial loss: capped
    diverged = [False, False, False, False, True]
    s = lr_sensitivity(lrs, losses, diverged, INIT)
    expected = (3.50 + 3.40 + 3.408 + INIT + INIT) / 5 - 3.40
    assert s.value == pytest.approx(expected)
    assert s.best_loss == 3.40 and s.best_lr == 2e-3
    assert (s.near_opt_lo, s.near_opt_hi) == (2e-3, 4e-3)  # 3.408 <= 3.40·1.0025 = 3.4085
    assert s.n_diverged == 1 and s.n_lrs == 5
    assert not s.near_opt_at_edge and s.warnings == []


def test_near_optimal_range_at_the_grid_edge_is_flagged() -> None:
    s = lr_sensitivity([1e-3, 2e-3, 4e-3], [3.40, 3.45, 3.6], [False] * 3, INIT)
    assert s.near_opt_at_edge
    assert any("edge" in w for w in s.warnings)


def test_every_point_diverged() -> None:
    s = lr_sensitivity([1e-2, 2e-2], [np.nan, np.nan], [True, True], INIT)
    assert s.value is None and s.best_loss is None
    assert "every swept LR diverged" in s.warnings[0]


def test_without_an_initial_loss() -> None:
    capped = lr_sensitivity([1e-3, 2e-3, 4e-3], [3.5, 3.4, 3.6], [False] * 3, None)
    assert capped.value == pytest.approx((3.5 + 3.4 + 3.6) / 3 - 3.4)
    assert any("uncapped" in w for w in capped.warnings)
    unknown = lr_sensitivity([1e-3, 2e-3, 4e-3], [3.5, 3.4, np.nan], [False, False, True], None)
    assert unknown.value is None
    assert any("cannot be capped" in w for w in unknown.warnings)


def test_common_lrs_tolerates_formatting_noise() -> None:
    a = np.array([1e-3, 2e-3, 4e-3, 8e-3])
    b = np.array([2.0000000001e-3, 4e-3, 8e-3, 1.6e-2])
    np.testing.assert_allclose(common_lrs([a, b]), [2e-3, 4e-3, 8e-3])
    assert common_lrs([]).size == 0


@pytest.mark.parametrize("text, value", [("1024", 1024), ("1.3B", 1.3e9), ("350M", 350e6), ("2e9", 2e9),
                                         ("64k", 64e3), ("1.5t", 1.5e12), ("6e20", 6e20)])
def test_sizes_parse_the_way_researchers_write_them(text: str, value: float) -> None:
    assert parse_size(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "-5", "0", "1.3X", "1e400"])
def test_bad_sizes_are_rejected_with_the_allowed_forms(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_format_size() -> None:
    assert format_size(48) == "48"
    assert format_size(1.34e9) == "1.34B"
    assert format_size(369e6) == "369M"
    assert format_size(6.1e18) == "6.1e+18"
