"""The bracketing policy of one cell: which learning rates to try next, and when to stop.

Pure Python (no Ray, no torch): the driver's cell book (`sweeper.run.book`), the store's
repair and the read-side views (`sweeper.records.fold`, `sweeper.records.results`) call
`decide` and `interpolate_optimum` from here; nothing else re-implements them.

Terms. A cell's *points* are learning rates in one of the states `queued`, `running`
(active) or `ok`, `diverged`, `stalled`, `failed`, `infra_failed` (finished; `sweeper.core.states.PointState`).
The optimum is *bracketed* when the best `ok` point has a finished (`ok`, `diverged` or
`stalled`) neighbour on each side in log LR: since it is the best, an `ok` neighbour is worse,
and a diverged run, or a stalled one (it learned nothing beyond token frequencies), counts as
worse than any `ok` one. A stalled point is never the optimum, whatever its loss. `failed`
points (crashes) carry no information: they are skipped when looking for neighbours and are
never proposed again. `infra_failed` points (the infrastructure failed them: out of memory, the
storage, a lost node) carry none either, but say nothing against their learning rate: the cell
waits for them as for an active point — never a neighbour, never proposed again in this launch,
never the end of the cell as `failed` — and its decision is `infra_failed` until the next
launch trains them again.

Policy. Start from the initial grid. While the best point has no finished neighbour on a
side, extend on that side by the grid factor. New learning rates are proposed only once
every active point of the cell has finished: which points are explored (and so the optimum
found) is then a function of the results alone, never of the order in which trials happen
to finish — a killed and relaunched driver, a retried trial or a busier cluster reorders
them, and an eager extension decided on a partial grid explored other learning rates
(tests/reliability). When every finished point diverged or stalled, go toward learning: higher
when the stalled losses fall with LR (a slow learner, `_toward_learning`), else lower (too hot:
diverged, or stalled at losses flat or rising with LR); a cell that reaches a bound or the cap
that way ends `diverged` (all diverged) or `stalled` (some stalled). Once
bracketed, optionally refine with the two half-steps around the best point (this stops
by itself: after one refinement the neighbours are half a step away). A bound or the
trial cap that prevents the next step ends the cell as `edge`. Every proposed learning
rate is rounded to 6 significant digits, the precision of point ids; "never propose an
LR twice" compares within a relative `SAME_LR` (1e-4), since one grid point reached along
two paths (the first grid, then a walk from another point) can differ in its last digit.

Options that need fewer runs (measured by `sweeper replay` on StepLaw's recorded grids;
each keeps the rules above: a cell is `bracketed` only with a finished neighbour on each
side, and proposals are still a function of the finished results):
- `refine="vertex"`: refine with one half step, toward the vertex of the parabola through
  the best point and its neighbours, and only when the vertex lies at least `vertex_offset`
  half steps from the best point (0.5: nearer the half step than the best point). Without a
  parabola (a diverged neighbour, or not convex) both half steps are tried, as `refine=True`.
- `refine_min_gain`: no refinement when the parabola promises less than this fraction of
  the best objective (set it near the seed-to-seed noise).
- `vertex_first`: when the best point sits at the open end of the grid but the parabola
  through it and its two inner neighbours has its vertex inside, at least `vertex_offset`
  half steps away, try that inner half step before extending: if it is the new best, it
  is bracketed already.
- `failed_neighbour="half_step"`: when the next grid step beyond the best point failed
  (a crash: no information), try the half step between them before walking past it.
- `pair_fallback`: a 2-point first grid (the centre and the step below) whose points both
  failed tries the centre's other neighbour, the third point of a 3-point grid, before the
  cell ends `failed`.
- `failed_side_last`: when the best point needs a neighbour on both sides and one side holds
  only a failed point within a step, extend the other side first.
- `close_after_failures=n`: a side of the best point where only failed points were tried, at
  least `n` of them, gets no more proposals; a cell with nothing else to try ends `edge`
  (a crashing region is not walked into one LR per round up to the cap).
With a 2-point first grid these make a cell that starts near its optimum the 3-point cell one
round later, and save the far-side point of a cell whose centre is off (docs/lr-search.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sweeper.core.grid import CellDecision, GridPoint, LRPolicy
from sweeper.core.ids import canonical
from sweeper.core.states import ACTIVE_STATES, CellStatus, PointState

SAME_LR = 1e-4  # relative: two proposed learning rates this close are one (grid steps are >= 0.5%)
# relative: stalled losses that fall by this fraction of their level from the lowest to the highest stalled LR
# (0.016 nats at the built-in corpus's 3.25, above twice the evaluation noise of a difference, 0.007) mark a
# slow learner, which searches higher
STALL_TREND = 0.005


class _Tried:
    """The learning rates a cell has tried, compared within `SAME_LR` (see the module docstring)."""

    def __init__(self, points: Sequence[GridPoint]) -> None:
        self._lrs = [canonical(p.lr) for p in points]

    def __contains__(self, lr: object) -> bool:
        return isinstance(lr, (int, float)) and any(abs(lr - t) <= SAME_LR * t for t in self._lrs)


def _inside(lr: float, policy: LRPolicy) -> bool:
    return policy.lo * (1 - 1e-9) <= lr <= policy.hi * (1 + 1e-9)


def initial_grid(policy: LRPolicy, *, center: float | None = None) -> list[float]:
    """The first learning rates of a cell: the explicit grid, or `points` around the centre.

    With an even number of points the extra one goes below the centre. A grid that
    would cross a bound is shifted inside it, keeping its size where the bounds allow.
    """
    if policy.fixed is not None:
        return [canonical(policy.fixed)]
    if policy.grid is not None and center is None:
        return sorted({canonical(lr) for lr in policy.grid if _inside(lr, policy)})
    c = center if center is not None else policy.center
    c = min(max(c, policy.lo), policy.hi)
    offsets = list(range(-(policy.points // 2), policy.points - policy.points // 2))
    lrs = [c * policy.factor**k for k in offsets]
    while lrs and lrs[0] < policy.lo * (1 - 1e-9) and lrs[-1] * policy.factor <= policy.hi:
        lrs = [lr * policy.factor for lr in lrs]
    while lrs and lrs[-1] > policy.hi * (1 + 1e-9) and lrs[0] / policy.factor >= policy.lo:
        lrs = [lr / policy.factor for lr in lrs]
    return sorted({canonical(lr) for lr in lrs if _inside(lr, policy)})


def prior_grid(policy: LRPolicy, lr: float, lo: float, hi: float) -> list[float]:
    """A grid centred on a predicted optimum `lr`, spanning its interval [lo, hi].

    At least the centre and one step on each side; at most the policy's `points`. A
    narrow interval gives a 3-point grid (the saving `prior: extrapolate` buys).
    """
    log_f = math.log(policy.factor)
    below = max(1, math.ceil(math.log(lr / lo) / log_f - 1e-9)) if lo < lr else 1
    above = max(1, math.ceil(math.log(hi / lr) / log_f - 1e-9)) if hi > lr else 1
    cap_below = max(1, policy.points // 2)
    cap_above = max(1, policy.points - policy.points // 2 - 1)
    below, above = min(below, cap_below), min(above, cap_above)
    lrs = [lr * policy.factor**k for k in range(-below, above + 1)]
    return sorted({canonical(x) for x in lrs if _inside(x, policy)})


def predicted_grid(policy: LRPolicy, lr: float, lo: float | None, hi: float | None) -> list[float]:
    """The first grid of a cell from a predicted optimum `lr` (clamped into the bounds): spanning
    its interval [lo, hi] (`prior_grid`), or the policy's own grid re-centred when there is none."""
    centre = min(max(lr, policy.lo), policy.hi)
    if lo is None or hi is None:
        return initial_grid(policy, center=centre)
    return prior_grid(policy, centre, lo, hi)


def interpolate_optimum(points: Sequence[GridPoint]) -> tuple[float, float] | None:
    """The minimum of the parabola in (log LR, objective) through the best point and its
    two neighbours, or None when either neighbour is missing or not `ok`, or the three
    points are not convex."""
    finished = sorted((p for p in points if p.is_finished_info), key=lambda p: p.lr)
    ok = [p for p in finished if p.is_ok]
    if not ok:
        return None
    best = min(ok, key=lambda p: (p.objective, p.lr))
    i = finished.index(best)
    if i == 0 or i == len(finished) - 1:
        return None
    left, right = finished[i - 1], finished[i + 1]
    if not (left.is_ok and right.is_ok):
        return None
    vertex = parabola_vertex(left, best, right)
    return None if vertex is None else (math.exp(vertex[0]), vertex[1])  # between left and right: no overflow


def parabola_vertex(*three: GridPoint) -> tuple[float, float] | None:
    """The (log LR, objective) minimum of the parabola in (log LR, objective) through three `ok`
    points in increasing LR, or None when they are not convex."""
    x = [math.log(p.lr) for p in three]
    y = [float(p.objective) for p in three]  # type: ignore[arg-type]
    # Second divided difference = the parabola's leading coefficient.
    d1 = (y[1] - y[0]) / (x[1] - x[0])
    d2 = (y[2] - y[1]) / (x[2] - x[1])
    a = (d2 - d1) / (x[2] - x[0])
    if not a > 0:
        return None
    b = d1 - a * (x[0] + x[1])
    x_v = -b / (2 * a)
    y_v = y[1] + (x_v - x[1]) * (d1 + a * (x_v - x[0]))  # Newton form through points 0 and 1
    return x_v, y_v


def decide(points: Sequence[GridPoint], policy: LRPolicy, *, initial: Sequence[float] | None = None) -> CellDecision:
    """The status of a cell and the learning rates to try next.

    `initial` replaces the policy's initial grid (a prior); it is used only while the
    cell has no points. Never proposes a learning rate that is among `points`. A fixed recipe
    (`policy.fixed`) is decided by `decide_fixed`.
    """
    if policy.fixed is not None:
        return decide_fixed(points, policy)
    if not points:
        grid = list(initial) if initial is not None else initial_grid(policy)
        return CellDecision("pending", tuple(grid[: policy.max_points]), reason="not started")

    tried = _Tried(points)
    budget = policy.max_points - len(points)
    active = [p for p in points if p.state in ACTIVE_STATES]
    infra = sum(PointState(p.state).blocks_its_cell for p in points)
    informative = sorted((p for p in points if p.is_finished_info), key=lambda p: p.lr)
    ok = [p for p in informative if p.is_ok]
    interp = interpolate_optimum(points)
    interp_lr, interp_obj = interp if interp else (None, None)

    if not ok:
        if active:
            return CellDecision("running", reason="waiting for results")
        if infra:
            return CellDecision(CellStatus.INFRA_FAILED, reason=_blocked_reason(infra))
        if not informative:
            if policy.pair_fallback and len(points) == 2 == policy.points:
                third = canonical(max(p.lr for p in points) * policy.factor)  # the pair is the centre and the step below
                if third not in tried and _inside(third, policy) and budget > 0:
                    return CellDecision("running", (third,), reason="both first points failed: trying the centre's "
                                        "other neighbour")
            return CellDecision("failed", reason="every point failed (see the points' reasons)")
        stalled = sum(PointState(p.state) is PointState.STALLED for p in informative)
        what = ("every point diverged" if not stalled else
                "every point stalled" if stalled == len(informative) else "every point diverged or stalled")
        if _slow_learner(informative):
            upward = _toward_learning(informative, policy, tried, min(budget, policy.extend_by))
            if upward:
                return CellDecision("running", tuple(upward), reason=f"{what} so far, the stalled losses falling "
                                    "toward higher learning rates (a slow learner): going higher")
            why = ("the trial cap" if budget <= 0 else "a diverged point above" if any(
                p.lr > max(q.lr for q in informative if PointState(q.state) is PointState.STALLED)
                for p in informative) else f"the upper bound {policy.hi:g}")
            return CellDecision(CellStatus.STALLED, reason=f"{what}, the stalled losses falling toward higher learning "
                                f"rates up to {why}: no usable learning rate")
        lowest = min(p.lr for p in points)
        proposals = _walk(lowest, -1, policy, tried, min(budget, policy.extend_by))
        if proposals:
            return CellDecision("running", tuple(proposals), reason=f"{what} so far: going lower")
        why = "the trial cap" if budget <= 0 else f"the lower bound {policy.lo:g}"
        status = CellStatus.STALLED if stalled else CellStatus.DIVERGED
        return CellDecision(status, reason=f"{what}, down to {why}: no usable learning rate")

    best = min(ok, key=lambda p: (p.objective, p.lr))
    i = informative.index(best)
    left = informative[i - 1] if i > 0 else None
    right = informative[i + 1] if i < len(informative) - 1 else None
    base = dict(best=best, interp_lr=interp_lr, interp_objective=interp_obj, neighbours=(left, right))

    if active:  # any of them may become the best, or bracket it: decide on complete information
        return CellDecision("running", reason="waiting for results", **base)
    if infra:  # the same for points the infrastructure failed: they train again on the next launch
        return CellDecision(CellStatus.INFRA_FAILED, reason=_blocked_reason(infra), **base)
    proposals: list[float] = []
    blocked: list[str] = []
    by_side: dict[int, list[float]] = {}
    for direction, neighbour in ((-1, left), (+1, right)):
        if neighbour is not None:
            continue
        if policy.close_after_failures and _closed(best, direction, points, policy):
            blocked.append(f"{'upper' if direction > 0 else 'lower'} side closed after "
                           f"{policy.close_after_failures} failed points")
            continue
        room = min(budget - len(proposals), policy.extend_by)
        step = _probe(best, i, direction, points, informative, policy, tried) if room > 0 else []
        step = step or _walk(best.lr, direction, policy, tried, room)
        if step:
            proposals += step
            by_side[direction] = step
        else:
            side = "upper" if direction > 0 else "lower"
            bound = policy.hi if direction > 0 else policy.lo
            blocked.append(
                f"trial cap ({policy.max_points} points) reached" if room <= 0 else f"optimum at the {side} bound {bound:g}"
            )
    if policy.failed_side_last and len(by_side) == 2:
        # Both sides are open and one is known only by a failed point within a step: extend the other side
        # first; the failed side is probed once the other settles (often never: the best moves away from it).
        failed = [d for d in (-1, 1) if _failed_within_a_step(best, d, points, policy)]
        if len(failed) == 1:
            proposals = by_side[-failed[0]]
    if proposals:
        return CellDecision("running", tuple(sorted(proposals)), reason="extending the grid", **base)
    if blocked:
        return CellDecision("edge", reason="; ".join(blocked), **base)

    # Bracketed, nothing active.
    if policy.refine and budget > 0:
        half = policy.half_step
        sides: tuple[tuple[int, GridPoint | None], ...] = ((-1, left), (+1, right))
        if interp is not None:
            assert best.objective is not None and interp_obj is not None
            if policy.refine_min_gain > 0 and best.objective - interp_obj < policy.refine_min_gain * abs(best.objective):
                sides = ()  # the parabola promises less than is worth a run
            elif policy.refine == "vertex":
                offset = math.log(interp[0] / best.lr) / math.log(half)  # in half steps, signed
                sides = tuple(side for side in sides if side[0] * offset >= policy.vertex_offset)
        refine = []
        for direction, neighbour in sides:
            assert neighbour is not None
            candidate = canonical(best.lr * half**direction)
            gap = abs(math.log(neighbour.lr / best.lr))
            if gap > math.log(half) * 1.01 and candidate not in tried and _inside(candidate, policy):
                refine.append(candidate)
        refine = refine[:budget]
        if refine:
            return CellDecision("running", tuple(sorted(refine)), reason="refining at half the grid step", **base)
    return CellDecision("bracketed", reason="optimum bracketed", **base)


def decide_fixed(points: Sequence[GridPoint], policy: LRPolicy) -> CellDecision:
    """A fixed-recipe cell: one point at the recipe's learning rate, no search, no optimum. It ends `fixed`
    when that point is ok (its result is the recipe's, compared with other cells at the same recipe),
    else `diverged`, `stalled` (it learned nothing beyond token frequencies) or `failed` as the point did. Points at other learning rates (a cell that was swept in
    an earlier launch) are left out of the decision."""
    assert policy.fixed is not None
    lr = canonical(policy.fixed)
    mine = [p for p in points if canonical(p.lr) == lr]
    if not mine:
        return CellDecision("pending", (lr,), reason="fixed recipe: not started")
    point = mine[-1]
    if point.state in ACTIVE_STATES:
        return CellDecision("running", reason="fixed recipe: training the recipe's learning rate")
    if PointState(point.state).blocks_its_cell:
        return CellDecision(CellStatus.INFRA_FAILED, reason=_blocked_reason(1))
    if point.is_ok:
        return CellDecision("fixed", best=point, reason=f"fixed recipe: trained at lr {lr:g}; no optimum searched")
    if PointState(point.state) is PointState.STALLED:
        return CellDecision("stalled", reason=f"fixed recipe: lr {lr:g} stalled")
    if PointState(point.state).counts_as_diverged:
        return CellDecision("diverged", reason=f"fixed recipe: lr {lr:g} diverged")
    return CellDecision("failed", reason=f"fixed recipe: lr {lr:g} failed (see the point's reason)")


def _closed(best: GridPoint, direction: int, points: Sequence[GridPoint], policy: LRPolicy) -> bool:
    """Whether the side of `best` in `direction` is closed (`close_after_failures`): nothing informative
    tried beyond it, and at least that many failed points there (with `failed_neighbour: half_step`, the
    half step among them, so the half step is always tried before a side closes)."""
    beyond = [p for p in points if direction * math.log(p.lr / best.lr) > 1e-9]
    if any(p.is_finished_info for p in beyond):
        return False
    if sum(p.state == "failed" for p in beyond) < policy.close_after_failures:
        return False
    if policy.failed_neighbour == "half_step":
        half = best.lr * policy.half_step ** direction
        return any(abs(math.log(p.lr / half)) < 1e-3 for p in beyond)
    return True


def _failed_within_a_step(best: GridPoint, direction: int, points: Sequence[GridPoint], policy: LRPolicy) -> bool:
    """Whether a failed point lies beyond `best` in `direction`, at most one grid step away."""
    reach = math.log(policy.factor) * 1.01
    return any(p.state == "failed" and 0 < direction * math.log(p.lr / best.lr) <= reach for p in points)


def _blocked_reason(n: int) -> str:
    return (f"{n} point(s) failed by the infrastructure (out of memory, storage, a lost node): "
            "relaunch the same command to train them again")


def _walk(start: float, direction: int, policy: LRPolicy, tried: _Tried, count: int) -> list[float]:
    """Up to `count` untried grid steps from `start` in `direction`, inside the bounds.

    Tried learning rates on the way (failed points: the only ones a caller walks past)
    are skipped rather than retried.
    """
    out: list[float] = []
    j = 1
    while len(out) < count:
        lr = canonical(start * policy.factor ** (direction * j))
        if not _inside(lr, policy):
            break
        if lr not in tried:
            out.append(lr)
        j += 1
        if j > 10_000:
            break
    return out


def _stalled_by_lr(informative: list[GridPoint]) -> list[GridPoint]:
    return [p for p in informative if PointState(p.state) is PointState.STALLED
            and p.loss is not None and math.isfinite(p.loss)]


def _slow_learner(informative: list[GridPoint]) -> bool:
    """A cell with no `ok` point whose stalled losses fall with LR: the grid's rates are too low for it to
    learn in its budget. Falling: at least two stalled points with a loss, the least-squares slope of their
    losses on log LR negative, and the loss at the highest stalled LR at least `STALL_TREND` (relative) below
    the one at the lowest. Otherwise (flat or rising: too hot; or diverged points alone) the cell goes lower."""
    stalled = _stalled_by_lr(informative)
    if len(stalled) < 2:
        return False
    xs = [math.log(p.lr) for p in stalled]
    ys = [float(p.loss) for p in stalled]  # type: ignore[arg-type]
    x_bar, y_bar = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - x_bar) * (y - y_bar) for x, y in zip(xs, ys))  # its sign is the slope's
    return slope < 0 and ys[0] - ys[-1] > STALL_TREND * abs(ys[0])


def _toward_learning(informative: list[GridPoint], policy: LRPolicy, tried: _Tried, count: int) -> list[float]:
    """The higher learning rates a slow learner (`_slow_learner`) tries next: the walk up from the highest
    stalled point while nothing lies above it; when a diverged point does, only the half step between them
    (never past it); empty when neither is possible (a bound, the cap, or the half step tried). Uses finished
    results only, like every decision here."""
    stalled = _stalled_by_lr(informative)
    if count <= 0 or not stalled:
        return []
    top = stalled[-1]
    above = [p for p in informative if p.lr > top.lr * (1 + SAME_LR)]
    if not above:
        return _walk(top.lr, +1, policy, tried, count)
    half = canonical(top.lr * policy.half_step)
    if (math.log(above[0].lr / top.lr) > math.log(policy.half_step) * 1.01 and half not in tried
            and _inside(half, policy)):
        return [half]
    return []


def _probe(best: GridPoint, i: int, direction: int, points: Sequence[GridPoint], informative: list[GridPoint],
           policy: LRPolicy, tried: _Tried) -> list[float]:
    """A half step to try before extending past the best point in `direction` (which has no
    finished neighbour there): next to a failed step (`failed_neighbour`), or back inside
    toward the parabola's vertex (`vertex_first`). Empty: extend as usual."""
    half = policy.half_step
    if policy.failed_neighbour == "half_step":
        if _failed_within_a_step(best, direction, points, policy):
            candidate = canonical(best.lr * half**direction)
            if candidate not in tried and _inside(candidate, policy):
                return [candidate]
    if policy.vertex_first:
        inner = informative[i - 2:i] if direction > 0 else informative[i + 1:i + 3]
        if len(inner) == 2 and all(p.is_ok for p in inner):
            vertex = parabola_vertex(*inner, best) if direction > 0 else parabola_vertex(best, *inner)
            near = inner[-1] if direction > 0 else inner[0]
            candidate = canonical(best.lr * half ** (-direction))
            if (vertex is not None
                    and -direction * (vertex[0] - math.log(best.lr)) / math.log(half) >= policy.vertex_offset
                    and abs(math.log(near.lr / best.lr)) > math.log(half) * 1.01
                    and candidate not in tried and _inside(candidate, policy)):
                return [candidate]
    return []
