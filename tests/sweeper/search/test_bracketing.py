"""The bracketing policy, tested directly (no Ray): hypothesis drives whole simulated cells."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sweeper.core.grid import CellDecision, GridPoint, LRPolicy
from sweeper.core.ids import canonical
from sweeper.search.bracketing import SAME_LR, decide, initial_grid, interpolate_optimum, prior_grid


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
        again = [lr for lr in d.next_lrs if any(abs(lr - t) <= SAME_LR * t for t in tried)]
        assert not again, f"proposed again (within {SAME_LR:g}, the same learning rate): {again}"
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
    refine=st.sampled_from([True, False, "vertex"]),
    extend_by=st.integers(1, 3),
    max_points=st.just(200),
    vertex_offset=st.sampled_from([0.0, 0.5, 0.9]),
    refine_min_gain=st.sampled_from([0.0, 0.0, 0.001]),
    vertex_first=st.booleans(),
    failed_neighbour=st.sampled_from(["skip", "half_step"]),
    pair_fallback=st.booleans(),
    failed_side_last=st.booleans(),
    close_after_failures=st.sampled_from([0, 0, 1, 2]),
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
    # With no divergence next to the optimum, the best point is within one grid step of it
    # (half a step after refining both sides).
    if diverge_above > opt * policy.factor**2:
        steps = abs(math.log(decision.best.lr / opt)) / math.log(policy.factor)
        both = policy.refine is True and policy.refine_min_gain == 0
        assert steps <= (0.5 if both else 1.0) + 1e-6


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


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=policies,
    log_opt=st.floats(math.log(3e-4), math.log(3e-2)),
    width=st.floats(0.01, 5.0),
    power=st.floats(1.0, 3.0),
    div_steps=st.floats(-1.0, 8.0),
    fail_seed=st.integers(0, 10**6),
    fail_rate=st.sampled_from([0.0, 0.2, 0.5]),
    order_seed=st.integers(0, 10**6),
)
def test_decisions_depend_on_results_alone(policy, log_opt, width, power, div_steps, fail_seed, fail_rate, order_seed):
    """Finishing the points of a round one by one in a random order, or all at once, explores the
    same learning rates and ends with the same decision, whatever the options; and no learning
    rate is ever proposed twice (run_cell checks that on every call), crashes included."""
    opt = math.exp(log_opt)
    smooth = unimodal(opt, width, opt * policy.factor**div_steps, power)

    def loss(lr):  # a fixed, LR-determined set of crashes
        return "failed" if random.Random(f"{fail_seed}:{canonical(lr)}").random() < fail_rate else smooth(lr)

    together, points_a, _ = run_cell(policy, loss)
    one_by_one, points_b, _ = run_cell(policy, loss, order_seed=order_seed)
    assert sorted(p.lr for p in points_a) == sorted(p.lr for p in points_b)
    assert together == one_by_one
    assert together.done
    if together.status == "bracketed":
        left, right = together.neighbours
        assert left is not None and right is not None and left.lr < together.best.lr < right.lr
        for side in (left, right):
            assert side.state == "diverged" or side.objective >= together.best.objective


def test_refine_vertex_tries_one_half_step_toward_the_vertex():
    policy = LRPolicy(center=1e-3, points=3, factor=4.0, refine="vertex")
    # Vertex of the parabola through (x = -1, 0, 1 in grid steps; 3.5, 3.0, 3.2): x = 0.2143 grid steps
    # = 0.43 half steps above the best: below vertex_offset 0.5, so no refinement.
    points = [GridPoint(2.5e-4, "ok", 3.5), GridPoint(1e-3, "ok", 3.0), GridPoint(4e-3, "ok", 3.2)]
    assert decide(points, policy).status == "bracketed"
    # 3.5, 3.0, 3.1: vertex x = 0.3333 grid steps = 0.67 half steps up: one half step up (2e-3) only.
    points[2] = GridPoint(4e-3, "ok", 3.1)
    d = decide(points, policy)
    assert d.status == "running" and d.next_lrs == (2e-3,)
    assert decide(points, LRPolicy(center=1e-3, points=3, factor=4.0, refine=True)).next_lrs == (5e-4, 2e-3)
    # The parabola (0.3·(x - 1/3)² + 2.9667) promises 3.0 - 2.9667 = 1.1% of 3.0: a 2% minimum gain
    # skips the refinement, 1% does not.
    gain = {g: decide(points, LRPolicy(center=1e-3, points=3, factor=4.0, refine="vertex", refine_min_gain=g))
            for g in (0.02, 0.01)}
    assert gain[0.02].status == "bracketed" and gain[0.01].next_lrs == (2e-3,)
    # A diverged neighbour: no parabola, both half steps as before.
    points[2] = GridPoint(4e-3, "diverged")
    assert decide(points, policy).next_lrs == (5e-4, 2e-3)


def test_vertex_first_probes_inside_before_extending():
    policy = LRPolicy(center=1e-3, points=3, factor=4.0, refine=False, vertex_first=True)
    # Best at the top (4e-3), the parabola through 2.5e-4, 1e-3, 4e-3 (x = -1, 0, 1; 3.5, 3.05, 3.0) has its
    # vertex at x = 0.625, 0.75 half steps below the best: probe 2e-3 rather than extend to 1.6e-2.
    points = [GridPoint(2.5e-4, "ok", 3.5), GridPoint(1e-3, "ok", 3.05), GridPoint(4e-3, "ok", 3.0)]
    d = decide(points, policy)
    assert d.next_lrs == (2e-3,) and d.status == "running"
    # The probe is the new best: bracketed by 1e-3 and 4e-3 without extending.
    assert decide([*points, GridPoint(2e-3, "ok", 2.9)], policy).status == "bracketed"
    # The probe is worse: the edge stays open, so extend as usual.
    assert decide([*points, GridPoint(2e-3, "ok", 3.01)], policy).next_lrs == (1.6e-2,)
    # Without the option, or with the vertex beyond the edge (3.5, 3.2, 3.0: x = 2.5), extend.
    assert decide(points, LRPolicy(center=1e-3, points=3, factor=4.0, refine=False)).next_lrs == (1.6e-2,)
    beyond = [GridPoint(2.5e-4, "ok", 3.5), GridPoint(1e-3, "ok", 3.2), GridPoint(4e-3, "ok", 3.0)]
    assert decide(beyond, policy).next_lrs == (1.6e-2,)


def test_failed_neighbour_half_step():
    half = LRPolicy(center=1e-3, points=3, factor=4.0, refine=False, failed_neighbour="half_step")
    skip = LRPolicy(center=1e-3, points=3, factor=4.0, refine=False)
    points = [GridPoint(2.5e-4, "ok", 3.5), GridPoint(1e-3, "ok", 3.0), GridPoint(4e-3, "failed")]
    assert decide(points, skip).next_lrs == (1.6e-2,)  # walks past the crash
    assert decide(points, half).next_lrs == (2e-3,)  # the half step between the best and the crash
    # Once the half step is tried (and failed too), walk past as `skip` does; never propose it again.
    points.append(GridPoint(2e-3, "failed"))
    assert decide(points, half).next_lrs == (1.6e-2,)


def test_pair_fallback_tries_the_centres_other_neighbour_once():
    pair = LRPolicy(center=1e-3, points=2, factor=2.0, pair_fallback=True)
    assert initial_grid(pair) == [5e-4, 1e-3]  # the centre and the step below
    both_failed = [GridPoint(5e-4, "failed"), GridPoint(1e-3, "failed")]
    assert decide(both_failed, LRPolicy(center=1e-3, points=2, factor=2.0)).status == "failed"
    d = decide(both_failed, pair)
    assert d.status == "running" and d.next_lrs == (2e-3,)  # the third point of the 3-point grid
    assert decide(both_failed + [GridPoint(2e-3, "failed")], pair).status == "failed"  # once only
    # Only a 2-point first grid: a 3-point grid that failed whole ends failed as before.
    three = LRPolicy(center=1e-3, points=3, factor=2.0, pair_fallback=True)
    assert decide([GridPoint(lr, "failed") for lr in initial_grid(three)], three).status == "failed"


def test_failed_side_last_extends_the_other_side_first():
    points = [GridPoint(1e-3, "ok", 3.0), GridPoint(2e-3, "failed")]
    both = LRPolicy(center=1e-3, points=2, factor=2.0, refine=False)
    assert decide(points, both).next_lrs == (5e-4, 4e-3)  # both sides at once, past the crash above
    last = LRPolicy(center=1e-3, points=2, factor=2.0, refine=False, failed_side_last=True)
    assert decide(points, last).next_lrs == (5e-4,)
    # Once the lower side is settled (a worse point), the side with the crash is tried.
    assert decide(points + [GridPoint(5e-4, "ok", 3.2)], last).next_lrs == (4e-3,)
    # Below became the best: the crash is no longer next to it, and the search goes on downward.
    assert decide(points + [GridPoint(5e-4, "ok", 2.9)], last).next_lrs == (2.5e-4,)


def test_close_after_failures_ends_a_side_of_crashes_as_edge():
    points = [GridPoint(5e-4, "ok", 3.2), GridPoint(1e-3, "ok", 3.0), GridPoint(2e-3, "failed")]
    policy = LRPolicy(center=1e-3, points=2, factor=2.0, refine=False, failed_neighbour="half_step",
                      close_after_failures=2)
    assert decide(points, policy).next_lrs == (1.41421e-3,)  # one crash: the half step is tried first
    points.append(GridPoint(1.41421e-3, "failed"))
    d = decide(points, policy)
    assert d.status == "edge" and "upper side closed after 2 failed points" in d.reason
    assert decide(points, LRPolicy(center=1e-3, points=2, factor=2.0, refine=False,
                                   failed_neighbour="half_step")).next_lrs == (4e-3,)  # without: walks on
    # An informative point beyond the best keeps the side open (it is then bracketed, not closed).
    assert decide(points + [GridPoint(4e-3, "diverged")], policy).status == "bracketed"


def test_a_grid_point_reached_along_two_paths_is_not_proposed_again():
    # Learning rates are kept at 6 significant digits, so the first grid's 9.79197e-4 (the centre) and the
    # walk down from its upper neighbour, 1.95839e-3 / 2 = 9.791950e-4, differ in the last digit. The centre
    # crashed: walking down from the best point must skip it, not train it again as "9.79195e-4".
    policy = LRPolicy(center=9.79197e-4, points=3, factor=2.0, refine=False)
    grid = initial_grid(policy)
    assert grid == [4.89599e-4, 9.79197e-4, 1.95839e-3] and canonical(1.95839e-3 / 2) == 9.79195e-4
    points = [GridPoint(4.89599e-4, "failed"), GridPoint(9.79197e-4, "failed"), GridPoint(1.95839e-3, "ok", 3.0),
              GridPoint(3.91678e-3, "ok", 3.2)]
    (lr,) = decide(points, policy).next_lrs
    assert lr == pytest.approx(1.95839e-3 / 8, rel=1e-4)  # past both crashes: the next untried grid step
    assert all(abs(lr - p.lr) > SAME_LR * p.lr for p in points)


def test_new_options_are_validated():
    with pytest.raises(ValueError, match="refine"):
        LRPolicy(refine="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vertex_offset"):
        LRPolicy(vertex_offset=2.0)
    with pytest.raises(ValueError, match="failed_neighbour"):
        LRPolicy(failed_neighbour="retry")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["depth.yaml", "ladder.yaml", "quickstart.yaml"])
def test_shipped_first_grids_keep_stacks_filled(name):
    from pathlib import Path

    from sweeper.spec.schema import load_sweep

    cfg = load_sweep(Path(__file__).resolve().parents[3] / "sweeps" / name, need_data=False).config
    for method in cfg.methods:
        assert len(initial_grid(cfg.lr_for(method).to_policy())) >= 2
