"""The statistics recover planted depth structure, and find none in noise (pure numpy, no files)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweeper.analysis.gamma import stats

DEPTH = np.arange(1, 25)


def _all(gains: np.ndarray) -> dict:
    profile = stats.magnitude_profile(gains)
    cos = stats.cosine_matrix(gains)
    mds = stats.classical_mds(cos)
    return {
        "profile": profile,
        "trend": {k: stats.depth_trend(DEPTH, v) for k, v in profile.items()},
        "schedule": stats.fit_magnitude_schedule(DEPTH, profile["rms"]),
        "cos": cos,
        "mds": mds,
        "arc": stats.arc_order(DEPTH, mds.coords),
        "locality": stats.locality(cos),
    }


def test_magnitude_profile_matches_definitions() -> None:
    gains = np.array([[1.0, -2.0, 3.0, -4.0], [0.5, 0.5, 0.5, 0.5]])
    profile = stats.magnitude_profile(gains)
    assert profile["mean"].tolist() == [2.5, 0.5]
    assert profile["median"].tolist() == [2.5, 0.5]
    assert profile["p90"][0] == pytest.approx(np.percentile([1, 2, 3, 4], 90))
    assert profile["rms"][0] == pytest.approx(math.sqrt(30 / 4))


@pytest.mark.parametrize("kind, sign", [("rising", 1), ("falling", -1)])
def test_planted_magnitude_trend_is_recovered(planted, kind: str, sign: int) -> None:
    r = _all(planted.gains(kind))
    for name in ("mean", "median", "p90", "p99", "rms"):
        trend = r["trend"][name]
        assert sign * trend.spearman > 0.95, name
        assert trend.spearman_p < 1e-6
        assert sign * trend.slope > 0
    assert r["schedule"].b == pytest.approx(0.5 * sign, abs=0.02)
    assert r["schedule"].r2 > 0.99
    # scaling alone leaves the direction unchanged: no arc, no locality
    assert r["cos"].min() > 0.99
    assert r["locality"] > 0.8


def test_steady_rotation_traces_an_ordered_arc(planted) -> None:
    r = _all(planted.gains("steady"))
    assert r["arc"].order > 0.95
    assert r["locality"] < 0.3
    adjacent = stats.adjacent_cosines(r["cos"])
    assert adjacent.min() > 0.99
    assert r["cos"][0, -1] < 0.6  # the direction has drifted far overall
    assert r["mds"].explained > 0.9  # one plane of rotation
    assert abs(r["schedule"].b) < 0.01  # rotation keeps the norm: no magnitude schedule
    # cosine decays with lag: every layer is closest to its neighbours
    for i in range(2, 24):
        assert r["cos"][i, i - 1] > r["cos"][i, 0]


def test_rigid_rotation_is_not_an_ordered_arc(planted) -> None:
    r = _all(planted.gains("rigid"))
    assert r["arc"].order < 0.3
    assert r["locality"] > 0.9
    assert r["mds"].explained > 0.9  # still a single plane: it is the ordering that differs
    assert abs(r["schedule"].b) < 0.01


def test_noise_shows_no_trend(planted) -> None:
    r = _all(planted.gains("noise"))
    for name in ("mean", "median", "p90", "p99", "rms"):
        assert r["trend"][name].spearman_p > 0.01, name
    assert abs(r["schedule"].b) < 0.02
    assert r["schedule"].r2 < 0.3
    assert r["arc"].order < 0.6
    assert 0.9 < r["locality"] < 1.1
    assert r["mds"].explained < 0.4  # no dominant plane


def test_noise_locality_is_one_across_seeds(planted) -> None:
    values = [stats.locality(stats.cosine_matrix(planted.gains("noise", seed=s))) for s in range(10)]
    orders = [_all(planted.gains("noise", seed=s))["arc"].order for s in range(10)]
    assert all(0.9 < v < 1.1 for v in values)
    assert np.median(orders) < 0.35


def test_schedule_fit_recovers_layerrope_exactly(planted) -> None:
    rng = np.random.default_rng(3)
    gamma = 1.0 + 0.2 * rng.standard_normal(64)
    gains = planted.layerrope(gamma, 24, a_mag=0.3, b_mag=-0.37, a_rot=0.2, b_rot=0.6)
    profile = stats.magnitude_profile(gains)
    fit = stats.fit_magnitude_schedule(DEPTH, profile["rms"])
    assert fit.b == pytest.approx(-0.37, abs=1e-9)
    assert fit.a == pytest.approx(0.3 + math.log(np.sqrt((gamma**2).mean())), abs=1e-9)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    arc = stats.arc_order(DEPTH, stats.classical_mds(stats.cosine_matrix(gains)).coords)
    assert arc.order > 0.95


def test_flat_profile_has_undefined_r2() -> None:
    fit = stats.fit_magnitude_schedule(DEPTH, np.full(24, 0.7))
    assert fit.b == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(fit.r2)
    trend = stats.depth_trend(DEPTH, np.full(24, 0.7))
    assert math.isnan(trend.spearman) and trend.slope == 0.0


def test_classical_mds_reproduces_planar_geometry() -> None:
    # unit vectors on a quarter circle in a plane of R^5: MDS must return the same distances
    angles = np.linspace(0, np.pi / 2, 9)
    vectors = np.zeros((9, 5))
    vectors[:, 1], vectors[:, 3] = np.cos(angles), np.sin(angles)
    mds = stats.classical_mds(stats.cosine_matrix(vectors))
    original = np.linalg.norm(vectors[:, None] - vectors[None], axis=-1)
    embedded = np.linalg.norm(mds.coords[:, None] - mds.coords[None], axis=-1)
    np.testing.assert_allclose(embedded, original, atol=1e-9)
    assert mds.explained == pytest.approx(1.0)
    assert mds.coords[0, 0] <= 0  # sign convention


def test_arc_positions_for_a_straight_configuration() -> None:
    xy = np.column_stack([np.linspace(-1, 1, 10), np.zeros(10)])
    position, kind = stats.arc_positions(xy)
    assert kind == "line"
    assert abs(stats.arc_order(np.arange(1, 11), xy).order - 1.0) < 1e-12
    assert np.all(np.diff(position) != 0)


def test_arc_positions_cut_at_the_opening() -> None:
    # three quarters of a circle, traversed by depth: the cut falls in the empty quarter
    angles = np.linspace(0.0, 1.5 * np.pi, 16)
    xy = np.column_stack([np.cos(angles), np.sin(angles)])
    position, kind = stats.arc_positions(xy)
    assert kind == "circle"
    np.testing.assert_allclose(position, angles - angles[0], atol=1e-9)


def test_zero_gain_vector_is_rejected() -> None:
    with pytest.raises(ValueError, match="all zeros"):
        stats.cosine_matrix(np.array([[1.0, 2.0], [0.0, 0.0]]))


def test_tiny_stacks_give_undefined_not_errors() -> None:
    gains = np.array([[1.0, 2.0], [2.0, 1.0]])
    cos = stats.cosine_matrix(gains)
    assert math.isnan(stats.locality(cos))
    assert math.isnan(stats.arc_order(np.array([1, 2]), stats.classical_mds(cos).coords).order)
    assert math.isnan(stats.depth_trend(np.array([1, 2]), np.array([1.0, 2.0])).spearman)
