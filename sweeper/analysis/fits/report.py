"""Every fit of a sweep, assembled into the `fits.json` document (CONTRACTS.md, version 1), a
`sweeper.analysis.fits.document.FitsDocument`.

Per method: the loss fit against the chosen x (with its dense curve and band, predictions
at the `--to` targets and the leave-largest-out check), the optimal-LR law, the compute
exponent and the LR sensitivity of each size; then a ranking of the methods. Every number
the dashboards plot is precomputed here, so they never refit.

Keys beyond the contract (allowed: "add keys, never remove") are documented where they are
built; values that cannot be computed are null and a warning says why.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sweeper.analysis.fits.collect import CDef, CellSensitivity, NDef, SizeResult, SweepResults, XAxis
from sweeper.analysis.fits.document import (
    ComputeExponent,
    EstimateValue,
    ExcludedCell,
    MissingSeed,
    PartialSize,
    FailedCell,
    FitsDocument,
    HoldoutCheck,
    InputsSection,
    LossFitSection,
    MethodSection,
    OptionsSection,
    PowerLawSection,
    PredictionRow,
    RankRow,
    Recipe,
    SensitivityRow,
    SharedEFit,
    SharedESection,
    SizeRow,
)
from sweeper.records.document import Record
from sweeper.stats.estimate import Estimate
from sweeper.stats.loglog import PowerLawFit
from sweeper.stats.lrlaw import EXTRAPOLATION_NOTE, EXTRAPOLATION_WARN, fit_lr_law
from sweeper.analysis.fits.powerlaw import DEFAULT_RESAMPLES, LossFit, Scheme, fit_loss_curve
from sweeper.analysis.fits.sensitivity import common_lrs, lr_sensitivity
from sweeper.analysis.fits.seeds import (RANKING_E_NOTE, bootstrap_levels, fit_inputs, partial_row, partial_rule,
                                         partial_warnings, shared_e_exponents, size_weights, weights_rule)
from sweeper.analysis.fits.shared import fit_shared_e
from sweeper.analysis.fits.units import format_size

VERSION = 1
CURVE_POINTS = 120


@dataclass(frozen=True)
class FitOptions:
    x: XAxis = "depth"
    n_def: NDef = "nonembed"
    c_def: CDef = "flops"
    targets: tuple[float, ...] = ()
    resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    scheme: Scheme = "residual"
    include_edge: bool = False
    lr_source: Literal["interp", "grid"] = "interp"
    shared_e: bool = False
    allow_partial: bool = False
    weighted: bool = True  # sizes weighted by the inverse variance of their mean where the seeds measure it


LOOPS_LABEL = "loop count T (core iterations)"  # a loop-count sweep: its `depth` column holds T
X_LABELS = {
    "depth": "depth (blocks)",
    "params": "parameters N",
    "compute": "training compute C (FLOPs)",
}


def n_definition(n_def: NDef) -> str:
    if n_def == "nonembed":
        return ("N = params_nonembed from the store: parameters of one model excluding the input embedding and "
                "the LM head (blocks' matrices, norm gains, scheme parameters)")
    return "N = params from the store: every parameter of one model, input embedding and LM head included"


def c_definition(c_def: CDef, n_def: NDef) -> str:
    if c_def == "flops":
        return ("C = flops_per_token × tokens trained, from the store; flops_per_token = 6·N_matmul + 12·L·T·d "
                "(every parameter matmul including the LM head, plus attention scores over the full T×T matrix; "
                "not the embedding lookup, norms or softmax)")
    which = "non-embedding" if n_def == "nonembed" else "total"
    return f"C = 6·N·D with N the {which} parameter count and D the tokens trained (attention not counted)"


def dense_grid(xs: np.ndarray, targets: tuple[float, ...]) -> np.ndarray:
    """Log-spaced x from the smallest size to the largest size or target, plus every size and target exactly."""
    lo = float(np.min(xs))
    hi = float(max(np.max(xs), *targets)) if targets else float(np.max(xs))
    lo = min(lo, *targets) if targets else lo
    grid = np.geomspace(lo, hi, CURVE_POINTS) if hi > lo else np.array([lo])
    return np.unique(np.concatenate([grid, xs, np.asarray(targets, dtype=float)]))


def _est(e: Estimate) -> EstimateValue:
    return EstimateValue(**e.to_dict())


def _num(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _curve_rows(xs: np.ndarray, pred: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> list[list]:
    return [
        [_num(x), _num(p), None if lo is None else _num(lo[i]), None if hi is None else _num(hi[i])]
        for i, (x, p) in enumerate(zip(xs, pred))
    ]


def build_report(results: SweepResults, opts: FitOptions) -> FitsDocument:
    """The fits.json document for a collected sweep."""
    methods: dict[str, MethodSection] = {}
    shared_summary: SharedESection | None = None
    global_warnings: list[str] = []
    if results.edge_included:
        global_warnings.append(
            f"{len(results.edge_included)} edge cell(s) included (--include-edge): their loss is an upper bound and "
            f"their LR a bound: {', '.join(results.edge_included)}"
        )
    global_warnings += partial_warnings(results)
    series = {m: [s for s in results.sizes if s.method == m] for m in results.methods()}
    for method, sizes in series.items():
        methods[method] = _method_section(method, sizes, results.cells, opts)

    if opts.shared_e:
        shared_summary = apply_shared_e(methods, series, opts)
        global_warnings.extend(shared_summary.warnings)

    sizes_in_sweep = {s.size for s in results.sizes}
    if len({round(s.scale.x(opts.x, opts.n_def, opts.c_def) or 0, 9) for s in results.sizes}) < 2:
        global_warnings.append(
            f"only one size ({', '.join(sorted(sizes_in_sweep))}) has bracketed results: no scaling fit is possible; "
            "only the LR sensitivity is reported"
        )
    return FitsDocument(
        version=VERSION,
        created=time.time(),
        sweep=results.name,
        x=opts.x,
        x_label=LOOPS_LABEL if opts.x == "depth" and results.loops_axis else
                X_LABELS[opts.x] + (f" ({'non-embedding' if opts.n_def == 'nonembed' else 'total'})"
                                    if opts.x == "params" else ""),
        n_definition=n_definition(opts.n_def),
        c_definition=c_definition(opts.c_def, opts.n_def),
        e_model="shared" if opts.shared_e else "per-method",
        shared_e=shared_summary,
        targets=[float(t) for t in opts.targets],
        inputs=InputsSection(
            rule=("per (method, size): best objective among ok points of bracketed cells, mean over seeds "
                  + partial_rule(results.allow_partial)
                  + "(a fixed-recipe method: its one point's objective at the recipe's LR, no LR law); "
                  + ("edge cells included with a warning" if opts.include_edge else "edge cells excluded")
                  + "; diverged, stalled and failed points never enter a loss fit"),
            lr_source=opts.lr_source,
            n_cells=results.n_cells,
            excluded=[ExcludedCell(**e) for e in results.excluded],
            edge_included=results.edge_included,
            failed=[FailedCell(**f) for f in results.failed],  # no usable LR: every point diverged or stalled
            partial=[partial_row(p, opts, results.allow_partial) for p in results.partial],
            allow_partial=results.allow_partial,
            weights=weights_rule(opts.weighted),
        ),
        options=OptionsSection(resamples=opts.resamples, seed=opts.seed, bootstrap=opts.scheme, level=0.95,
                               n_def=opts.n_def, c_def=opts.c_def, weighted=opts.weighted,
                               bootstrap_levels=bootstrap_levels(results.sizes)),
        methods=methods,
        ranking=_ranking(methods, series, opts),
        ranking_note=RANKING_E_NOTE,
        warnings=global_warnings,
    )


def _xy(sizes: list[SizeResult], opts: FitOptions, axis: XAxis | None = None) -> tuple[list[SizeResult], list[str]]:
    axis = axis or opts.x
    usable = [s for s in sizes if s.scale.x(axis, opts.n_def, opts.c_def)]
    missing = [s.size for s in sizes if not s.scale.x(axis, opts.n_def, opts.c_def)]
    warnings = [f"no {axis} value recorded for size(s) {', '.join(missing)}: left out"] if missing else []
    usable.sort(key=lambda s: s.scale.x(axis, opts.n_def, opts.c_def))  # type: ignore[arg-type, return-value]
    return usable, warnings


def _method_section(
    method: str, sizes: list[SizeResult], cells: list[CellSensitivity], opts: FitOptions
) -> MethodSection:
    usable, missing_warn = _xy(sizes, opts)
    x = np.array([s.scale.x(opts.x, opts.n_def, opts.c_def) for s in usable], dtype=float)
    y = np.array([s.objective for s in usable], dtype=float)
    lr = np.array([s.lr_opt for s in usable], dtype=float)
    targets = np.asarray(opts.targets, dtype=float)

    loss = fit_loss_curve(x, y, resamples=opts.resamples, seed=opts.seed, scheme=opts.scheme,
                          **fit_inputs(usable, opts.weighted))
    fixed = bool(usable) and all(s.fixed_recipe for s in usable)
    compute_exponent, compute_fit = _compute_section(sizes, opts, loss)
    table = size_weights(usable) if opts.weighted else None
    return MethodSection(
        sizes=[_size_row(s, opts, table) for s in usable],
        # a fixed recipe (lr.fixed): the loss at the recipe's LR, and no LR law (no optimum was searched)
        recipe=(Recipe(kind="fixed", lrs=sorted({float(v) for s in usable for v in s.lr_opt_seeds})) if fixed
                else Recipe(kind="optimum")),
        loss_fit=loss_fit_section(loss, targets, opts, extra_warnings=missing_warn),
        lr_fit=None if fixed else _lr_section(x, lr, targets, opts),
        compute_exponent=compute_exponent,
        sensitivity=_sensitivity_rows(method, cells, opts),
        compute_fit=compute_fit,
    )


def _size_row(s: SizeResult, opts: FitOptions, weights: dict[str, tuple[float, float]] | None = None) -> SizeRow:
    weight, se_used = (weights or {}).get(s.size, (None, None))
    return SizeRow(
        weight=weight,
        se_used=se_used,
        size=s.size,
        x=s.scale.x(opts.x, opts.n_def, opts.c_def),
        depth=s.scale.depth,
        params=s.scale.params,
        params_nonembed=s.scale.params_nonembed,
        compute=s.scale.compute(opts.c_def, opts.n_def),
        tokens=s.scale.tokens,
        loss=s.objective,
        loss_seeds=s.objective_seeds,
        loss_sd=s.objective_sd,  # the seeds' spread
        loss_se=s.objective_se,  # SE of the mean over seeds (from their spread; one seed: its eval SE)
        loss_eval_se=s.eval_se,  # the evaluation noise alone (the best points' SEs over the eval batches)
        loss_se_seeds=s.loss_se_seeds,
        lr_opt=s.lr_opt,
        lr_opt_seeds=s.lr_opt_seeds,
        lr_source=s.lr_sources,
        seeds=s.seeds,
        status=s.statuses,
        cells=s.cell_ids,
        partial=s.partial,
        missing_seeds=[MissingSeed(**m) for m in s.missing],
    )


def loss_fit_section(
    fit: LossFit, targets: np.ndarray, opts: FitOptions, *, extra_warnings: list[str] | None = None,
    holdout: bool = True, curve: bool = True,
) -> LossFitSection:
    """The contract's `loss_fit` object (plus: targets, status, dof, rss, optimizer, n_points, x_ref);
    without `curve` (the compute fit) the dense curve is left out of the document."""
    warnings = [*(extra_warnings or []), *fit.warnings]
    section = LossFitSection(
        E=_est(fit.E),
        A=_est(fit.A),
        A_at_xref=_est(fit.A_ref),
        alpha=_est(fit.alpha),
        loglog_slope=_est(fit.loglog_slope),
        points=[[float(a), float(b)] for a, b in zip(fit.x, fit.y)],
        targets=[],
        holdout=None,
        status=fit.status,
        n_points=fit.n_points,
        dof=fit.dof,
        rss=fit.rss,
        x_ref=fit.x_ref,
        optimizer=fit.optimizer,
        loglog=None if fit.loglog is None else power_law_section(fit.loglog, targets, "loss"),
    )
    if curve:
        section.curve = []
    if fit.status != "insufficient":
        rows: list[PredictionRow]
        dense, rows = _curve_and_targets(fit, targets, "loss")
        if curve:
            section.curve = dense
        if targets.size:
            for row in rows:
                row.beyond_largest = float(row.x / fit.x.max())
            section.targets = rows
            far = [t for t in targets if t > EXTRAPOLATION_WARN * fit.x.max()]
            if far:
                warnings.append(
                    f"loss predicted at {', '.join(format_size(t) for t in far)}, more than {EXTRAPOLATION_WARN:g}× "
                    f"beyond the largest size {format_size(float(fit.x.max()))}: the interval assumes the form "
                    "still holds there"
                )
    if holdout:
        section.holdout, holdout_warnings = holdout_check(fit, opts)
        warnings.extend(holdout_warnings)
    section.warnings = warnings
    section.trustworthy = fit.status == "ok" and not warnings
    return section


def power_law_section(fit: PowerLawFit, targets: np.ndarray, key: Literal["loss", "lr"]) -> PowerLawSection:
    """A pure power law `y = coef·x^exponent` with its curve and target predictions (bands where possible)."""
    section = PowerLawSection(coef=_est(fit.coef), exponent=_est(fit.exponent), curve=[], targets=[], dof=fit.dof,
                              status=fit.status, warnings=list(fit.warnings))
    if fit.status != "insufficient":
        section.curve, section.targets = _curve_and_targets(fit, targets, key)
    return section


def _curve_and_targets(fit: LossFit | PowerLawFit, targets: np.ndarray,
                       key: Literal["loss", "lr"]) -> tuple[list, list[PredictionRow]]:
    """The fit's dense curve (rows `[x, pred, lo, hi]`) and its predictions at the targets."""
    grid = dense_grid(fit.x, tuple(targets.tolist()))
    curve = _curve_rows(grid, *fit.predict(grid))
    if not targets.size:
        return curve, []
    pred, lo, hi = fit.predict(targets)
    rows = [
        PredictionRow(**{"x": float(t), key: _num(pred[i]), "lo": None if lo is None else _num(lo[i]),
                         "hi": None if hi is None else _num(hi[i])})
        for i, t in enumerate(targets)
    ]
    return curve, rows


def holdout_check(fit: LossFit, opts: FitOptions) -> tuple[HoldoutCheck | None, list[str]]:
    """Fit without the largest x, predict it, compare with the measured value."""
    distinct = np.unique(fit.x)
    if distinct.size < 4:
        return None, [f"leave-largest-out check needs 4 sizes (have {distinct.size}): extrapolation is untested"]
    keep = fit.x < distinct[-1]
    sub = fit_loss_curve(fit.x[keep], fit.y[keep], resamples=opts.resamples, seed=opts.seed + 1, scheme=opts.scheme,
                         weights=None if fit.w is None else fit.w[keep],
                         seed_values=None if fit.seed_values is None else
                         [v for v, k in zip(fit.seed_values, keep) if k])
    return holdout_record(sub, float(distinct[-1]), float(np.mean(fit.y[~keep])), opts)


def holdout_record(sub: LossFit, x_out: float, actual: float,
                   opts: FitOptions) -> tuple[HoldoutCheck | None, list[str]]:
    """Compare the prediction of `sub` (fitted without x_out) with the value measured at x_out."""
    if sub.status == "insufficient":
        return None, ["leave-largest-out check: the fit without the largest size is not possible"]
    pred, ci_lo, ci_hi = sub.predict(np.array([x_out]))
    pi = sub.prediction_interval(np.array([x_out]), seed=opts.seed + 2)
    predicted = float(pred[0])
    rel_error = (predicted - actual) / actual
    out = HoldoutCheck(
        x=x_out,
        actual=actual,
        predicted=predicted,
        lo=None if pi is None else _num(pi[0][0]),
        hi=None if pi is None else _num(pi[1][0]),
        ci_lo=None if ci_lo is None else _num(ci_lo[0]),
        ci_hi=None if ci_hi is None else _num(ci_hi[0]),
        rel_error=rel_error,
        interval="prediction interval for one observation (curve uncertainty + point scatter); ci_* is the curve's",
        fit_warnings=sub.warnings,
    )
    warnings = []
    if pi is None:
        out.within = None
        warnings.append("leave-largest-out: the fit without the largest size has no interval")
    else:
        out.within = bool(pi[0][0] <= actual <= pi[1][0])
        if not out.within:
            warnings.append(
                f"leave-largest-out: predicted {predicted:.4g} [{pi[0][0]:.4g}, {pi[1][0]:.4g}] at x = "
                f"{format_size(x_out)} misses the measured {actual:.4g} ({rel_error:+.2%}): the form does not "
                "extrapolate these points"
            )
    return out, warnings


def _lr_section(x: np.ndarray, lr: np.ndarray, targets: np.ndarray, opts: FitOptions) -> PowerLawSection:
    fit = fit_lr_law(x, lr, resamples=opts.resamples, seed=opts.seed + 3)
    section = power_law_section(fit, targets, "lr")
    section.points = [[float(a), float(b)] for a, b in zip(fit.x, fit.y)]
    section.form = "LR* = coef · x^exponent (least squares of log LR* on log x)"
    section.n_points = fit.n_points
    if targets.size:
        section.warnings.extend(fit.extrapolation_warnings(targets, EXTRAPOLATION_NOTE))
    section.trustworthy = fit.status == "ok" and not section.warnings
    return section


def _compute_section(
    sizes: list[SizeResult], opts: FitOptions, loss_on_x: LossFit
) -> tuple[ComputeExponent | None, LossFitSection | None]:
    """α of L = E + A·C^(-α) (the compute exponent) and the fit it comes from."""
    if opts.x == "compute":
        fit = loss_on_x
    else:
        usable, _ = _xy(sizes, opts, axis="compute")
        if len(usable) != len(sizes):
            return None, LossFitSection(warnings=["training compute not recorded for every size: no compute exponent"],
                                        trustworthy=False)
        c = np.array([s.scale.compute(opts.c_def, opts.n_def) for s in usable], dtype=float)
        y = np.array([s.objective for s in usable], dtype=float)
        fit = fit_loss_curve(c, y, resamples=opts.resamples, seed=opts.seed + 4, scheme=opts.scheme,
                             **fit_inputs(usable, opts.weighted))
    detail = loss_fit_section(fit, np.array([]), opts, holdout=False, curve=False)
    if fit.status != "ok" or fit.alpha.value is None:
        return None, detail
    exponent = ComputeExponent(**fit.alpha.to_dict(), loglog_slope=_est(fit.loglog_slope),
                               trustworthy=detail.trustworthy)
    return exponent, detail


def _sensitivity_rows(method: str, cells: list[CellSensitivity], opts: FitOptions) -> list[SensitivityRow]:
    mine = [c for c in cells if c.method == method]
    by_size: dict[str, list[CellSensitivity]] = {}
    for c in mine:
        by_size.setdefault(c.size, []).append(c)
    rows = []
    for size, group in by_size.items():
        values = [c.result.value for c in group if c.result.value is not None]
        commons = [v for v in (_common_value(c, cells) for c in group) if v is not None]
        near_lo = [c.result.near_opt_lo for c in group if c.result.near_opt_lo is not None]
        near_hi = [c.result.near_opt_hi for c in group if c.result.near_opt_hi is not None]
        warnings = sorted({w for c in group for w in c.result.warnings})
        rows.append(SensitivityRow(
            size=size,
            x=group[0].scale.x(opts.x, opts.n_def, opts.c_def),
            value=float(np.mean(values)) if values else None,
            value_seeds=[c.result.value for c in group],
            value_common=float(np.mean(commons)) if commons else None,
            near_opt_lo=min(near_lo) if near_lo else None,
            near_opt_hi=max(near_hi) if near_hi else None,
            near_opt_at_edge=any(c.result.near_opt_at_edge for c in group),
            best_loss=_mean_or_none([c.result.best_loss for c in group]),
            n_lrs=sum(c.result.n_lrs for c in group),
            n_diverged=sum(c.result.n_diverged for c in group),
            lr_min=min((c.result.lr_min for c in group if c.result.lr_min is not None), default=None),
            lr_max=max((c.result.lr_max for c in group if c.result.lr_max is not None), default=None),
            seeds=[c.seed for c in group],
            status=[c.status for c in group],
            warnings=warnings,
        ))
    rows.sort(key=lambda r: (r.x is None, r.x or 0.0, r.size))
    return rows


def _common_value(cell: CellSensitivity, cells: list[CellSensitivity]) -> float | None:
    """Sensitivity over the LRs that every method swept at this size and seed (None if fewer than 3)."""
    peers = [c for c in cells if c.size == cell.size and c.seed == cell.seed]
    if len({c.method for c in peers}) < 2:
        return None
    shared = common_lrs([c.lrs for c in peers])
    if shared.size < 3:
        return None
    keep = np.array([np.any(np.abs(shared - lr) <= 1e-6 * lr) for lr in cell.lrs])
    return lr_sensitivity(cell.lrs[keep], cell.losses[keep], cell.diverged[keep], cell.init_loss).value


def _mean_or_none(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _ranking(methods: dict[str, MethodSection], series: dict[str, list[SizeResult]], opts: FitOptions) -> list[RankRow]:
    """Methods by loss at the largest size every method reached (lower first), with their compute exponents."""
    x_of = {m: {s.scale.x(opts.x, opts.n_def, opts.c_def): s.objective for s in sizes} for m, sizes in series.items()}
    ranked = {m: xs for m, xs in x_of.items() if xs and None not in xs}
    if not ranked:
        return []
    common = set.intersection(*(set(xs) for xs in ranked.values()))
    # methods compare at equal recipe: every one at its optimum, or every one at the same fixed LR(s)
    recipes = {json.dumps(methods[m].recipe.to_json(), sort_keys=True) for m in ranked}
    equal_recipe = len(recipes) == 1
    rows = []
    for m, xs in ranked.items():
        at = max(common) if common else max(xs)
        ce = methods[m].compute_exponent
        lowest_everywhere = bool(common) and all(
            xs[x] <= min(other[x] for other in ranked.values()) for x in common
        )
        rows.append(RankRow(
            method=m,
            loss_at_largest=xs[at],
            x_at_largest=at,
            comparable=bool(common) and equal_recipe,
            recipe=methods[m].recipe.model_copy(),
            compute_exponent=None if ce is None else ce.value,
            compute_exponent_lo=None if ce is None else ce.lo,
            compute_exponent_hi=None if ce is None else ce.hi,
            compute_exponent_trustworthy=None if ce is None else ce.trustworthy,
            lowest_at_every_common_size=lowest_everywhere,
            n_sizes=len(xs),
        ))
    rows.sort(key=lambda r: r.loss_at_largest)  # type: ignore[arg-type, return-value]
    shared_e_exponents(rows, methods, series, opts)
    by_exponent = sorted((r for r in rows if r.compute_exponent is not None),
                         key=lambda r: -r.compute_exponent)  # type: ignore[operator]
    for i, r in enumerate(rows):
        r.rank = i + 1
    for i, r in enumerate(by_exponent):
        r.rank_by_compute_exponent = i + 1
    return rows


def apply_shared_e(methods: dict[str, MethodSection], series: dict[str, list[SizeResult]],
                   opts: FitOptions) -> SharedESection:
    """Replace each method's loss and compute fits in a fits.json document by shared-E fits.

    The independent per-method fits stay under `loss_fit_independent` / `compute_fit_independent`.
    Returns the document's `shared_e` summary (E with its interval per axis, and warnings).
    """
    summary = SharedESection(warnings=[])
    targets = np.asarray(opts.targets, dtype=float)

    def arrays(axis: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for m, sizes in series.items():
            usable, _ = _xy(sizes, opts, axis=axis)
            if usable:
                out[m] = (np.array([s.scale.x(axis, opts.n_def, opts.c_def) for s in usable], dtype=float),
                          np.array([s.objective for s in usable], dtype=float))
        return out

    data = arrays(opts.x)
    joint = fit_shared_e(data, resamples=opts.resamples, seed=opts.seed)
    summary.loss = SharedEFit(E=_est(joint.E), dof=joint.dof, methods=sorted(joint.fits), left_out=joint.left_out,
                              warnings=joint.warnings)
    if not joint.ok:
        summary.warnings.append("shared E: " + "; ".join(joint.warnings) + " (independent fits kept)")
        return summary
    for m, name in joint.left_out.items():
        summary.warnings.append(f"shared E: {m} left out ({name}); its independent fit is kept")

    # Leave-largest-out with the shared E: every method that keeps two sizes loses its largest.
    held: dict[str, tuple[float, float]] = {}
    sub_data = {}
    for m, (x, y) in data.items():
        if m in joint.fits and np.unique(x).size >= 3:
            top = float(x.max())
            held[m] = (top, float(np.mean(y[x == top])))
            sub_data[m] = (x[x < top], y[x < top])
    sub = fit_shared_e(sub_data, resamples=opts.resamples, seed=opts.seed + 1) if len(sub_data) >= 2 else None

    for m, fit in joint.fits.items():
        section = loss_fit_section(fit, targets, opts, holdout=False)
        section.e_model = "shared"
        if sub is not None and m in sub.fits:
            section.holdout, extra = holdout_record(sub.fits[m], held[m][0], held[m][1], opts)
        else:
            extra = ["leave-largest-out check with shared E needs 3 sizes of this method and 2 methods"]
        section.warnings.extend(extra)
        section.trustworthy = fit.status == "ok" and not section.warnings
        methods[m].loss_fit_independent = methods[m].loss_fit
        methods[m].loss_fit = section

    if opts.x != "compute":
        c_data = arrays("compute")
        c_joint = fit_shared_e(c_data, resamples=opts.resamples, seed=opts.seed + 4)
        summary.compute = SharedEFit(E=_est(c_joint.E), dof=c_joint.dof, methods=sorted(c_joint.fits),
                                     left_out=c_joint.left_out, warnings=c_joint.warnings)
        fits = c_joint.fits if c_joint.ok else {}
    else:
        fits = joint.fits
    for m, fit in fits.items():
        detail = loss_fit_section(fit, np.array([]), opts, holdout=False, curve=False)
        detail.e_model = "shared"
        methods[m].compute_fit_independent = methods[m].compute_fit
        methods[m].compute_fit = detail
        if fit.status == "ok" and fit.alpha.value is not None:
            methods[m].compute_exponent = ComputeExponent(**fit.alpha.to_dict(), loglog_slope=_est(fit.loglog_slope),
                                                          trustworthy=detail.trustworthy, e_model="shared")
        else:
            methods[m].compute_exponent = None
    return summary


def to_jsonable(value: Any) -> Any:
    """Plain JSON types only: numpy scalars unwrapped, non-finite floats as null (fits.json forbids NaN);
    a document (`FitsDocument`, any section) as its JSON object."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _num(value)
    return value
