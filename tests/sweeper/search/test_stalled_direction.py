"""An all-stalled cell searches toward learning: up for a slow learner, down for a too-hot one (pure policy)."""

from __future__ import annotations

import math

from sweeper.core.grid import GridPoint, LRPolicy
from sweeper.search.bracketing import decide

STALL_AT = 3.2  # a planted stall threshold: a final loss above it learned nothing beyond token frequencies


def run_cell(policy: LRPolicy, loss, max_rounds: int = 50):
    """Every proposed LR finishes: `loss(lr)` is its final loss (stalled above `STALL_AT`), None: diverged."""
    points: list[GridPoint] = []
    decisions = []
    for _ in range(max_rounds):
        d = decide(points, policy)
        decisions.append(d)
        if d.done:
            return d, points, decisions
        assert d.next_lrs, d
        for lr in d.next_lrs:
            value = loss(lr)
            if value is None:
                points.append(GridPoint(lr, "diverged"))
            elif value > STALL_AT:
                points.append(GridPoint(lr, "stalled", None, value))
            else:
                points.append(GridPoint(lr, "ok", value, value))
    raise AssertionError("the cell never finished")


def slow_learner(lr: float) -> float:
    """Optimum at 0.1; the grid (5e-3, 1e-2, 2e-2) stalls at 5.19, 4.09, 3.28: falling toward higher LR."""
    return 2.5 + 0.3 * math.log(lr / 0.1) ** 2


def too_hot(lr: float) -> float:
    """Optimum at 1e-3; above about 2.3e-3 it stalls, at losses rising with LR."""
    return 2.5 + 0.3 * math.log(lr / 1e-3) ** 2


POLICY = LRPolicy(center=1e-2, points=3, factor=2.0, lo=1e-5, hi=10.0, max_points=12)


def test_slow_learner_goes_up_and_ends_bracketed():
    first = decide([GridPoint(lr, "stalled", None, slow_learner(lr)) for lr in (5e-3, 1e-2, 2e-2)], POLICY)
    assert first.next_lrs == (0.04,) and "going higher" in first.reason
    d, points, _ = run_cell(POLICY, slow_learner)
    assert d.status == "bracketed", d
    assert 0.1 / 1.5 < d.best.lr < 0.1 * 1.5, d.best  # the planted optimum, within the grid's resolution
    assert min(p.lr for p in points) == 5e-3  # it never walked down


def test_too_hot_still_goes_down_and_ends_bracketed():
    grid = [GridPoint(lr, "stalled", None, too_hot(lr)) for lr in (5e-3, 1e-2, 2e-2)]
    first = decide(grid, POLICY)
    assert first.next_lrs == (2.5e-3,) and "going lower" in first.reason
    d, points, _ = run_cell(POLICY, too_hot)
    assert d.status == "bracketed" and 1e-3 / 1.5 < d.best.lr < 1e-3 * 1.5, d
    assert max(p.lr for p in points) == 2e-2  # it never walked up


def test_flat_stalled_losses_go_down():
    """Losses at the stall level whatever the LR (no trend beyond STALL_TREND): as before, lower."""
    grid = [GridPoint(lr, "stalled", None, 3.5 + 0.001 * i) for i, lr in enumerate((5e-3, 1e-2, 2e-2))]
    assert decide(grid, POLICY).next_lrs == (2.5e-3,)
    grid = [GridPoint(lr, "stalled", None, 3.5 - 0.001 * i) for i, lr in enumerate((5e-3, 1e-2, 2e-2))]
    assert decide(grid, POLICY).next_lrs == (2.5e-3,)  # falling by 0.06%: within STALL_TREND


def test_slow_learner_below_a_divergence_tries_the_half_step_then_ends_stalled():
    """Stalled and falling below, diverged above: only the half step between them, then `stalled`."""
    pts = [GridPoint(5e-3, "stalled", None, 3.9), GridPoint(1e-2, "stalled", None, 3.6), GridPoint(2e-2, "diverged")]
    d = decide(pts, POLICY)
    assert d.next_lrs == (round(1e-2 * math.sqrt(2), 8),) or math.isclose(d.next_lrs[0], 1e-2 * math.sqrt(2), rel_tol=1e-5)
    pts.append(GridPoint(d.next_lrs[0], "stalled", None, 3.4))
    d = decide(pts, POLICY)
    assert d.status == "stalled" and "diverged point above" in d.reason, d


def test_slow_learner_at_the_upper_bound_ends_stalled_not_lower():
    policy = LRPolicy(center=1e-2, points=3, factor=2.0, lo=1e-5, hi=2e-2, max_points=12)
    pts = [GridPoint(lr, "stalled", None, slow_learner(lr)) for lr in (5e-3, 1e-2, 2e-2)]
    d = decide(pts, policy)
    assert d.status == "stalled" and "upper bound" in d.reason, d
