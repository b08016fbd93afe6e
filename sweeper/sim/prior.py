"""Points per cell with `prior: extrapolate`, on synthetic methods: confidence vs prediction interval.

    sweeper bench prior --yaml sweeps/quickstart.yaml --policy points=4

Each replicate plants one method: an LR law `lr*(x) = c·x^b` over the sweep's depths, each
depth's optimum scattered about it (log-normal, `--scatter`), and a loss landscape around
that optimum (StepLaw-like curvature, a divergence cliff above, seed noise). Depths run in
increasing order as the driver runs them once the smaller ones are done; a depth with
three or more done smaller depths starts on `predicted_grid` from `predict_optimal_lr`
(the planner's own functions) with either interval, then `decide` runs the cell to the end.
Reported per interval kind: points per cell (all cells, and cells that had an interval),
how often the planted optimum lay inside the initial grid's span, and the fraction of
cells whose best LR is within 0.25% of the planted optimum's loss.

Pure logic (numpy, no Ray or torch); a measurement tool, not used by the sweeper itself.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from sweeper.core.grid import GridPoint, LRPolicy
from sweeper.core.errors import UserError
from sweeper.search.bracketing import decide, initial_grid, predicted_grid
from sweeper.search.policies import sweep_policies
from sweeper.spec.schema import load_sweep
from sweeper.stats.lrlaw import predict_optimal_lr

STEP = math.log(math.sqrt(2))  # landscape curvature is given per √2 step, as StepLaw's grids


@dataclass(frozen=True)
class Landscape:
    optimum: float
    base: float = 2.3
    left: float = 0.0015  # relative excess at one √2 step below the optimum
    right: float = 0.003  # ... and above it
    power: float = 2.0
    cliff_steps: float = 5.0  # diverges above optimum·√2^cliff_steps
    noise: float = 0.0005  # relative seed noise of a final loss

    def clean(self, lr: float) -> float:
        u = math.log(lr / self.optimum) / STEP
        return self.base * (1 + (self.left if u < 0 else self.right) * abs(u) ** self.power)

    def run(self, lr: float, rng: random.Random) -> GridPoint:
        if lr > self.optimum * math.sqrt(2) ** self.cliff_steps:
            return GridPoint(lr, "diverged")
        return GridPoint(lr, "ok", self.clean(lr) * (1 + rng.gauss(0, self.noise)))


@dataclass
class CellResult:
    points: int
    rounds: int  # batches of proposals: each waits for the previous one to finish (wall time)
    had_interval: bool
    interval_covers: bool  # the planted optimum lay within the prior's interval
    covered: bool  # the planted optimum lay within the initial grid's span (± half a step)
    within_band: bool
    optimum_found: float | None  # what the next depths learn from (interpolated, else grid best)


def run_cell(policy: LRPolicy, grid: Sequence[float], land: Landscape, seed: str,
             band: float = 0.0025) -> tuple[int, int, bool, float | None]:
    points: list[GridPoint] = []
    rounds = 0
    while True:
        d = decide(points, policy, initial=list(grid) if not points else None)
        if d.done:
            break
        points += [land.run(lr, random.Random(f"{seed}:{lr}")) for lr in d.next_lrs]  # noise per (cell, LR)
        rounds += 1
    if d.status != "bracketed" or d.best is None:
        return len(points), rounds, False, None
    within = land.clean(d.best.lr) <= land.clean(land.optimum) * (1 + band)
    return len(points), rounds, within, d.interp_lr or d.best.lr


def plant_method(policy: LRPolicy, depths: Sequence[float], rng: random.Random, *, exponent: float, scatter: float,
                 prior_error_steps: float, landscape: Callable[[float, random.Random], Landscape]) -> list[Landscape]:
    """One method's landscapes, one per depth: optima on a scattered power law, the smallest
    within `prior_error_steps` √2 steps of the YAML's centre."""
    first = policy.center * math.sqrt(2) ** rng.uniform(-prior_error_steps, prior_error_steps)
    coef = first / depths[0] ** exponent
    return [landscape(coef * d**exponent * math.exp(rng.gauss(0, scatter)), rng) for d in depths]


def simulate_method(policy: LRPolicy, depths: Sequence[float], lands: Sequence[Landscape],
                    interval: Literal["confidence", "prediction"], seed: str, *,
                    extrapolate: bool = True) -> list[CellResult]:
    """One planted method over every depth, smallest first, with the planner's prior (or, with
    `extrapolate=False`, every depth on the YAML's grid). Each cell's seed noise comes from its
    own generator per (`seed`, depth, LR), so both interval kinds see the same loss at an LR."""
    known: list[tuple[float, float]] = []
    out = []
    for i, (depth, land) in enumerate(zip(depths, lands)):
        had_interval = interval_covers = False
        grid = initial_grid(policy)
        if extrapolate and i >= policy.prior_from and len({x for x, _ in known}) >= 2:
            pred = predict_optimal_lr([x for x, _ in known], [lr for _, lr in known], depth,
                                      resamples=400, seed=i, interval=interval)
            if pred is not None and math.isfinite(pred.lr) and pred.lr > 0:  # as sweeper.search.prior.first_grid
                grid = predicted_grid(policy, pred.lr, pred.lo, pred.hi)
                had_interval = pred.lo is not None and pred.hi is not None
                interval_covers = had_interval and pred.lo <= land.optimum <= pred.hi  # type: ignore[operator]
        covered = min(grid) / math.sqrt(policy.factor) <= land.optimum <= max(grid) * math.sqrt(policy.factor)
        points, rounds, within, found = run_cell(policy, grid, land, f"{seed}:{i}")
        if found is not None:
            known.append((depth, found))
        out.append(CellResult(points, rounds, had_interval, interval_covers, covered, within, found))
    return out


def steplaw_like(optimum: float, rng: random.Random, noise: float = 0.0005) -> Landscape:
    left = rng.uniform(0.0005, 0.003)
    return Landscape(optimum, left=left, right=left * rng.uniform(1.0, 3.0), power=rng.choice((1.5, 2.0, 2.5)),
                     cliff_steps=rng.uniform(3.0, 8.0), noise=noise)


def print_report(args: argparse.Namespace) -> None:
    """Plant `args.replicates` methods over the depths of `args.yaml` and print points per cell, per interval kind
    (`args`: yaml, policy, replicates, exponent, scatter, noise, first_error, seed)."""
    depths = load_sweep(args.yaml, need_data=False).config.model.depths
    if not depths:
        raise UserError(f"{args.yaml}: needs model.depths")
    _, _, section = sweep_policies(args.yaml, args.policy)[0]
    policy = section.to_policy()
    extrapolate = section.prior == "extrapolate"
    print(f"{args.yaml}: depths {depths}, {args.replicates} planted methods, LR law exponent {args.exponent}, "
          f"scatter {args.scatter} (log sd), policy: points {policy.points}, factor {policy.factor:g}, "
          f"refine {policy.refine}, prior {section.prior}, seed noise {args.noise:g}")
    plant = random.Random(args.seed)  # the same planted methods for every interval kind
    methods = [plant_method(policy, depths, plant, exponent=args.exponent, scatter=args.scatter,
                            prior_error_steps=args.first_error,
                            landscape=lambda lr, rng: steplaw_like(lr, rng, args.noise))
               for _ in range(args.replicates)]
    print(f"{'interval':11s} {'points/cell':>11s} {'rounds/cell':>11s} {'within 0.25%':>13s} "
          f"{'cells with an interval: points':>31s} {'interval covers':>16s} {'optimum in grid':>16s}")
    for interval in ("confidence", "prediction") if extrapolate else ("none",):
        cells = [c for m, lands in enumerate(methods)
                 for c in simulate_method(policy, depths, lands, interval, f"{args.seed}:{m}",  # type: ignore[arg-type]
                                          extrapolate=extrapolate)]
        prior = [c for c in cells if c.had_interval]

        def share(flag: str) -> str:
            return f"{100 * sum(getattr(c, flag) for c in prior) / len(prior):.1f}%" if prior else "—"

        print(f"{interval:11s} {sum(c.points for c in cells) / len(cells):11.2f} "
              f"{sum(c.rounds for c in cells) / len(cells):11.2f} "
              f"{100 * sum(c.within_band for c in cells) / len(cells):12.1f}% "
              f"{(f'{sum(c.points for c in prior) / len(prior):.2f}' if prior else '—'):>31s} "
              f"{share('interval_covers'):>16s} {share('covered'):>16s}")
