"""The bracketing policy, tested directly (no Ray): hypothesis drives whole simulated cells."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sweeper.bracketing import (
    CellDecision,
    GridPoint,
    LRPolicy,
    canonical,
    decide,
    initial_grid,
    interpolate_optimum,
    prior_grid,
)


def run_cell(policy: LRPolicy, loss, *, order_seed: int | None = None, max_rounds: int = 200):
    """Simulate a cell: every proposed LR is queued, then finishes (optionally in random order).

    `loss(lr)` returns a float, or None for a diverged run, or "failed".
    Checks on every call that nothing already tried is proposed again.
    """
    points: list[GridPoint] = []
    rng = random.Random(order_seed)
    decisions: list[CellDecision] = []
    for _ in range(max_rounds):
        d = decide(points, policy)
        decisions.append(d)
        tried = {canonical(p.lr) for p in points}
        assert not tried & set(d.next_lrs), f"proposed again: {tried & set(d.next_lrs)}"
        assert len(set(d.next_lrs)) == len(d.next_lrs)
        for lr in d.next_lrs:
            assert policy.lo * (1 - 1e-9) <= lr <= policy.hi * (1 + 1e-9)
            assert lr == canonical(lr)
        points += [GridPoint(lr, "queued") for lr in d.next_lrs]
        active = [i for i, p in enumerate(points) if p.state in ("queued", "running")]
        if not active:
            assert d.done, d
            return d, points, decisions
        # Finish one or all of the active points.
        chosen = [rng.choice(active)] if order_seed is not None else active
        for i in chosen:
            value = loss(points[i].lr)
            if value == "failed":
                points[i] = GridPoint(points[i].lr, "failed")
            elif value is None or not math.isfinite(value):
                points[i] = GridPoint(points[i].lr, "diverged")
            else:
                points[i] = GridPoint(points[i].lr, "ok", value)
    raise AssertionError("the cell never finished")


def unimodal(opt_lr: float, width: float, diverge_above: float, power: float = 2.0):
    def loss(lr: float):
        if lr > diverge_above:
            return None
        return 3.0 + width * abs(math.log(lr / opt_lr)) ** power

    return loss


policies = st.builds(
    LRPolicy,
    lo=st.just(1e-6),
    hi=st.just(1.0),
    center=st.floats(1e-4, 1e-1),
    points=st.integers(1, 7),
    factor=st.sampled_from([1.5, 2.0, math.sqrt(10), 4.0]),
    refine=st.booleans(),
    extend_by=st.integers(1, 3),
    max_points=st.just(200),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=policies,
    log_opt=st.floats(math.log(3e-5), math.log(0.3)),
    width=st.floats(0.01, 5.0),
    power=st.floats(1.0, 3.0),
    div_steps=st.floats(-3.0, 8.0),
    order_seed=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_unimodal_cells_end_bracketed_within_bounds(policy, log_opt, width, power, div_steps, order_seed):
    opt = math.exp(log_opt)
    # The optimum lies at least two grid steps inside the bounds (else `edge` is the right answer).
    assume(policy.lo * policy.factor**2 <= opt <= policy.hi / policy.factor**2)
    # Divergence threshold: somewhere around the optimum, possibly below it, but always above the lower bound.
    diverge_above = opt * policy.factor**div_steps
    assume(diverge_above > policy.lo * policy.factor**3)
    decision, points, _ = run_cell(policy, unimodal(opt, width, diverge_above, power), order_seed=order_seed)
    assert decision.status == "bracketed", decision
    assert decision.best is not None
    assert policy.lo <= decision.best.lr <= policy.hi
    lrs = [canonical(p.lr) for p in points]
    assert len(lrs) == len(set(lrs))
    left, right = decision.neighbours
    assert left is not None and right is not None
    assert left.lr < decision.best.lr < right.lr
    for side in (left, right):
        assert side.state == "diverged" or side.objective >= decision.best.objective
    # The best grid point is the best of everything tried.
    assert decision.best.objective == min(p.objective for p in points if p.state == "ok")
    # With no divergence next to the optimum, the best point is within one grid step of it.
    if diverge_above > opt * policy.factor**2:
        steps = abs(math.log(decision.best.lr / opt)) / math.log(policy.factor)
        assert steps <= (0.5 if policy.refine else 1.0) + 1e-6


@settings(max_examples=200, deadline=None)
@given(
    policy=policies,
    states=st.lists(st.tuples(st.integers(-6, 6), st.sampled_from(["queued", "running", "ok", "diverged", "failed"]),
                              st.floats(2.0, 6.0)), max_size=12),
)
def test_never_proposes_a_tried_lr_and_respects_bounds(policy, states):
    points = []
    seen = set()
    for k, state, objective in states:
        lr = canonical(policy.center * policy.factor**k)
        if lr in seen or not policy.lo <= lr <= policy.hi:
            continue
        seen.add(lr)
        points.append(GridPoint(lr, state, objective if state == "ok" else None))
    d = decide(points, policy)
    assert not set(d.next_lrs) & seen
    assert all(policy.lo <= lr <= policy.hi for lr in d.next_lrs)
    assert len(points) + len(d.next_lrs) <= policy.max_points
    assert d == decide(list(reversed(points)), policy)  # order of the input does not matter
    if any(p.state in ("queued", "running") for p in points):
        assert not d.done


def test_initial_grid_is_centred_and_clipped():
    p = LRPolicy(center=1e-3, points=5, factor=2.0)
    assert initial_grid(p) == [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3]
    assert initial_grid(LRPolicy(center=1e-3, points=4)) == [2.5e-4, 5e-4, 1e-3, 2e-3]
    # A centre near the upper bound shifts the grid down instead of losing points.
    assert initial_grid(LRPolicy(center=0.9, points=3, hi=1.0)) == [0.225, 0.45, 0.9]
    assert initial_grid(LRPolicy(grid=(1e-3, 3e-3, 5.0), hi=1.0)) == [1e-3, 3e-3]
    first = decide([], p)
    assert first.status == "pending" and list(first.next_lrs) == initial_grid(p)


def test_all_diverged_goes_lower_then_stops_at_the_bound():
    policy = LRPolicy(lo=1e-3, hi=1.0, center=0.1, points=3, factor=2.0, max_points=50)
    decision, points, decisions = run_cell(policy, lambda lr: None)
    assert decision.status == "diverged"
    assert "lower bound" in decision.reason
    assert min(p.lr for p in points) >= policy.lo
    assert min(p.lr for p in points) < 2 * policy.lo
    assert any("going lower" in d.reason for d in decisions)


def test_optimum_at_a_bound_is_edge():
    policy = LRPolicy(lo=1e-4, hi=1e-2, center=1e-3, points=3, factor=2.0, max_points=50)
    decision, _, _ = run_cell(policy, lambda lr: 3.0 - lr)  # keeps improving upwards
    assert decision.status == "edge"
    assert "upper bound" in decision.reason
    assert decision.best.lr == pytest.approx(canonical(8e-3))


def test_trial_cap_is_edge():
    policy = LRPolicy(center=1e-3, points=3, factor=2.0, max_points=5)
    decision, points, _ = run_cell(policy, lambda lr: 3.0 - math.log(lr))  # lower is better forever
    assert decision.status == "edge"
    assert "trial cap" in decision.reason
    assert len(points) == 5


def test_failed_points_are_skipped_not_retried():
    policy = LRPolicy(center=1e-3, points=3, factor=2.0, refine=False, max_points=20)
    opt = 4e-3

    def loss(lr):
        if abs(lr - canonical(2e-3)) < 1e-12:
            return "failed"
        return 3 + (math.log(lr / opt)) ** 2

    decision, points, _ = run_cell(policy, loss)
    assert decision.status == "bracketed"
    assert [p.lr for p in points if p.state == "failed"] == [canonical(2e-3)]
    assert decision.best.lr == canonical(4e-3)


def test_every_point_failed_is_failed():
    policy = LRPolicy(center=1e-3, points=3)
    decision, _, _ = run_cell(policy, lambda lr: "failed")
    assert decision.status == "failed"


def test_waits_for_active_points_before_extending():
    policy = LRPolicy(center=1e-3, points=3, factor=2.0)
    points = [GridPoint(5e-4, "ok", 3.5), GridPoint(1e-3, "ok", 3.2), GridPoint(2e-3, "running")]
    d = decide(points, policy)
    assert d.status == "running" and d.next_lrs == ()
    # Best at the upper edge with nothing active above: extend upwards only.
    points[2] = GridPoint(2e-3, "ok", 3.0)
    d = decide(points, policy)
    assert d.next_lrs == (4e-3,)


def test_refinement_happens_once_at_half_steps():
    policy = LRPolicy(center=1e-3, points=3, factor=4.0, refine=True)
    points = [GridPoint(2.5e-4, "ok", 3.5), GridPoint(1e-3, "ok", 3.0), GridPoint(4e-3, "diverged")]
    d = decide(points, policy)
    assert d.status == "running"
    assert d.next_lrs == (5e-4, 2e-3)
    points += [GridPoint(5e-4, "ok", 3.2), GridPoint(2e-3, "ok", 2.9)]
    d = decide(points, policy)
    assert d.status == "bracketed" and d.best.lr == 2e-3 and d.next_lrs == ()


def test_interpolation_recovers_an_exact_parabola():
    opt = 3.3e-3
    pts = [GridPoint(lr, "ok", 2.0 + 0.7 * math.log(lr / opt) ** 2) for lr in (1e-3, 2e-3, 4e-3, 8e-3)]
    lr, obj = interpolate_optimum(pts)
    assert lr == pytest.approx(opt, rel=1e-9)
    assert obj == pytest.approx(2.0, abs=1e-12)
    # Unequal spacing (after refinement) too.
    pts = [GridPoint(lr, "ok", 2.0 + 0.7 * math.log(lr / opt) ** 2) for lr in (2e-3, 2.8e-3, 4e-3)]
    assert interpolate_optimum(pts)[0] == pytest.approx(opt, rel=1e-9)


def test_interpolation_needs_ok_neighbours():
    assert interpolate_optimum([GridPoint(1e-3, "ok", 3.0), GridPoint(2e-3, "ok", 2.5)]) is None
    pts = [GridPoint(1e-3, "ok", 3.0), GridPoint(2e-3, "ok", 2.5), GridPoint(4e-3, "diverged")]
    assert interpolate_optimum(pts) is None
    flat = [GridPoint(lr, "ok", 3.0) for lr in (1e-3, 2e-3, 4e-3)]
    assert interpolate_optimum(flat) is None
    # Failed and running points are ignored.
    pts = [GridPoint(1e-3, "ok", 3.0), GridPoint(1.5e-3, "failed"), GridPoint(2e-3, "ok", 2.5),
           GridPoint(3e-3, "running"), GridPoint(4e-3, "ok", 2.8)]
    assert interpolate_optimum(pts) is not None


def test_prior_grid_narrows_with_a_tight_interval():
    policy = LRPolicy(points=7, factor=2.0)
    assert prior_grid(policy, 1e-3, 0.9e-3, 1.1e-3) == [5e-4, 1e-3, 2e-3]
    wide = prior_grid(policy, 1e-3, 1e-4, 1e-2)
    assert len(wide) == 7 and 1e-3 in wide
