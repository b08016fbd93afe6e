"""The seeds in the fits: partial sizes' rows, the sizes' weights from their seed variance, the second
bootstrap level's inputs, and the ranking's shared-E compute exponents (`sweeper.analysis.fits.report` calls
these; the rules are in docs/statistics.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sweeper.analysis.fits.collect import SizeResult
from sweeper.analysis.fits.document import MethodSection, MissingSeed, PartialSize, RankRow
from sweeper.analysis.fits.shared import fit_shared_e

SE_FLOOR_OF_MEDIAN = 0.25  # a size's SE is at least this fraction of the median measured SE of its method
WEIGHTS_RULE = ("each size weighted by 1/SE² of its mean, SE = the seeds' sd/√n where a size has two or more seeds, "
                f"floored at the larger of its evaluation SE and {SE_FLOOR_OF_MEDIAN:g}× the median measured SE of "
                "the method's sizes (two seeds agreeing by chance would otherwise take the whole fit); a size with one "
                "seed takes that median; no size with two seeds: unweighted")
SEED_LEVEL_RULE = ("two levels: the sizes (the --bootstrap scheme, about the curve), then the seeds within each size "
                   "(resampled with replacement, the size's mean moved by their resampled mean minus their mean, "
                   "times √(n/(n−1)))")


def size_weights(sizes: list[SizeResult]) -> dict[str, tuple[float, float]] | None:
    """Per size name, (weight, SE used) of its mean in the loss fit (`WEIGHTS_RULE`); None: unweighted."""
    measured = {s.size: float(np.std(s.objective_seeds, ddof=1) / math.sqrt(len(s.objective_seeds)))
                for s in sizes if len(s.objective_seeds) >= 2}
    if not measured:
        return None
    median = float(np.median(list(measured.values())))
    out: dict[str, float] = {}
    for s in sizes:
        floor = max(s.eval_se or 0.0, SE_FLOOR_OF_MEDIAN * median)
        out[s.size] = max(measured.get(s.size, median), floor)
    if min(out.values()) <= 0:
        return None  # every seed identical and no evaluation SE: nothing to weigh by
    return {size: (1.0 / (se * se), se) for size, se in out.items()}


def fit_inputs(usable: list[SizeResult], weighted: bool) -> dict[str, Any]:
    """`fit_loss_curve`'s weights and seed values for these sizes, in their order."""
    table = size_weights(usable) if weighted else None
    weights = None if table is None else [table[s.size][0] for s in usable]
    seeds = [list(s.objective_seeds) for s in usable]
    return {"weights": weights, "seed_values": seeds if any(len(v) >= 2 for v in seeds) else None}


def partial_row(s: SizeResult, opts: Any, fitted: bool) -> PartialSize:
    return PartialSize(method=s.method, size=s.size, x=s.scale.x(opts.x, opts.n_def, opts.c_def), loss=s.objective,
                       loss_seeds=s.objective_seeds, seeds=s.seeds, missing_seeds=[MissingSeed(**m) for m in s.missing],
                       fitted=fitted)


RANKING_E_NOTE = ("the ranking by compute exponent uses α_C fitted with one E shared by the ranked methods (E and α "
                  "trade off with few sizes: independent E's make the exponents incomparable); each method's own fit "
                  "keeps its own E unless --shared-e")


def shared_e_exponents(rows: list[RankRow], methods: dict[str, MethodSection], series: dict[str, list[SizeResult]],
                       opts: Any) -> None:
    """Rank by compute exponent with a shared E by default: with two or more ranked methods and no --shared-e
    (whose exponents are shared already), each row's `compute_exponent*` becomes the shared-E fit's α_C (the
    method's own stays in `methods[m].compute_exponent`), and `compute_exponent_e_model` says which."""
    for r in rows:
        ce = methods[r.method].compute_exponent
        r.compute_exponent_e_model = None if ce is None else ("shared" if opts.shared_e else "per-method")
    if opts.shared_e or len(rows) < 2:
        return
    data = {}
    for r in rows:
        usable = sorted((s for s in series[r.method] if s.scale.compute(opts.c_def, opts.n_def)),
                        key=lambda s: s.scale.compute(opts.c_def, opts.n_def))  # type: ignore[arg-type, return-value]
        if len(usable) == len(series[r.method]) and usable:
            data[r.method] = (np.array([s.scale.compute(opts.c_def, opts.n_def) for s in usable], dtype=float),
                              np.array([s.objective for s in usable], dtype=float))
    if len(data) < 2:
        return
    joint = fit_shared_e(data, resamples=opts.resamples, seed=opts.seed + 5)
    if not joint.ok:
        return
    for r in rows:
        fit = joint.fits.get(r.method)
        if fit is None or fit.status != "ok" or fit.alpha.value is None:
            r.compute_exponent = r.compute_exponent_lo = r.compute_exponent_hi = None
            r.compute_exponent_e_model = "shared (left out)"
            continue
        r.compute_exponent, r.compute_exponent_lo, r.compute_exponent_hi = fit.alpha.value, fit.alpha.lo, fit.alpha.hi
        r.compute_exponent_trustworthy = fit.status == "ok" and not fit.warnings
        r.compute_exponent_e_model = "shared"


def partial_rule(allow_partial: bool) -> str:
    """The selection rule's words on partial sizes (fits.json `inputs.rule`)."""
    if allow_partial:
        return "(partial sizes, where some seed has no usable optimum, fitted on the surviving seeds: --allow-partial) "
    return "(a partial size, where some seed has no usable optimum, is left out) "


def partial_warnings(results: Any) -> list[str]:
    """A warning naming the partial sizes that were fitted (--allow-partial)."""
    if not (results.partial and results.allow_partial):
        return []
    return [f"{len(results.partial)} partial size(s) fitted (--allow-partial) on their surviving seeds, whose mean is "
            "biased where the missing seed failed: " + ", ".join(f"{p.method} {p.size}" for p in results.partial)]


def weights_rule(weighted: bool) -> str:
    return WEIGHTS_RULE if weighted else "unweighted (--unweighted): every size counts alike"


def bootstrap_levels(sizes: list[SizeResult]) -> str:
    """Which levels the bootstrap resampled (fits.json `options.bootstrap_levels`)."""
    if any(len(s.objective_seeds) >= 2 for s in sizes):
        return SEED_LEVEL_RULE
    return "one level: the sizes (one seed each)"
