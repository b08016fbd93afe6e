"""The two-variable LR law (`sweeper fit --lr-law X1,X2`) and leave-largest-out forecasts
(`sweeper fit --holdout largest`) over a sweep's per-(method, size) results (`collect`).

Variables of the law. On an imported sweep (`sweeper import`) X1 and X2 name columns of its grouping, read
per cell from the manifest's record of each group (a size with a k/M/B/T suffix is read as a number). On a
trained sweep N (or `params`) is the cells' parameter count under `--n`, D (or `tokens`) the tokens one
point trains. Rows: each cell's optimum (the interpolated optimum when bracketed, as every LR law here),
and where cells hold several runs within 0.25% of their best loss (StepLaw's near-optimal band), also
one row per such run; the headline is the fit over the optima, the band's fit is reported beside it.

Forecasts: per method, the largest size is left out; its optimal LR is predicted by the pure power law
through the smaller sizes' optima (`sweeper.stats.lrlaw.predict_optimal_lr`), its loss by `E + A·x^(-α)`
(three or more smaller sizes, and a fit that is not flat), else by the pure power law; both with 95%
*prediction* intervals, compared with the recorded value. With `--lr-law`, the cells at the largest X1
are also left out of the two-variable law and predicted from the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sweeper.analysis.fits.collect import NDef, SizeResult, SweepResults, XAxis
from sweeper.analysis.fits.document_laws import (
    ExponentValue,
    HoldoutRow,
    HoldoutSection,
    HoldoutValue,
    LRLawSection,
    TwoVariableFit,
)
from sweeper.analysis.fits.powerlaw import fit_loss_curve
from sweeper.core.errors import UserError
from sweeper.records.imported import size_number
from sweeper.records.manifest import Manifest, read_manifest
from sweeper.records.store import load_points
from sweeper.stats.loglog import fit_power_law
from sweeper.stats.lrlaw import predict_optimal_lr
from sweeper.stats.lrlaw2 import NotSeparable, TwoVariableLaw, fit_two_variable_law

BAND = 0.25  # percent: StepLaw's near-optimal band
TRAINED_VARIABLES = {"N": "params", "params": "params", "D": "tokens", "tokens": "tokens"}


def parse_law_names(text: str) -> tuple[str, str]:
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    if len(names) != 2 or names[0] == names[1]:
        raise UserError(f"--lr-law {text}: name two different variables, e.g. --lr-law N,D")
    return names[0], names[1]


def _values(manifest: Manifest, s: SizeResult, name: str, n_def: NDef) -> float | None:
    if manifest.imported is not None:
        group = manifest.imported.groups.get(s.cell_ids[0], {})
        return size_number(group.get(name))
    if TRAINED_VARIABLES[name] == "params":
        return s.scale.n_value(n_def)
    return s.scale.tokens


def _describe(manifest: Manifest, names: Sequence[str], n_def: NDef) -> dict[str, str]:
    if manifest.imported is not None:
        columns = manifest.imported.group_columns
        bad = [n for n in names if n not in columns]
        if bad:
            raise UserError(f"--lr-law {','.join(names)}: {', '.join(bad)} not among the import's group columns "
                            f"({', '.join(columns)})")
        return {n: f"column {n} of {manifest.imported.source}" for n in names}
    bad = [n for n in names if n not in TRAINED_VARIABLES]
    if bad:
        raise UserError(f"--lr-law {','.join(names)}: {', '.join(bad)}: a trained sweep's variables are N (or params: "
                        "parameters under --n) and D (or tokens: tokens one point trains)")
    kind = "non-embedding" if n_def == "nonembed" else "total"
    return {n: (f"parameters ({kind})" if TRAINED_VARIABLES[n] == "params" else "tokens trained per point")
            for n in names}


def _band_lrs(points: dict[str, list[tuple[float, float]]], s: SizeResult) -> list[float]:
    """The learning rates of the cell's ok runs within BAND percent of its best (one cell: seed 0's)."""
    runs = points.get(s.cell_ids[0], [])
    if not runs:
        return []
    best = min(loss for _, loss in runs)
    return [lr for lr, loss in runs if loss <= best * (1 + BAND / 100)]


def _fit_section(law: TwoVariableLaw, over: str) -> dict:
    return dict(
        over=over,
        exponents={name: ExponentValue(value=e.value, ci=[e.lo, e.hi]) for name, e in zip(law.names, law.exponents)},
        intercept=law.intercept.value, intercept_ci=[law.intercept.lo, law.intercept.hi],
        coefficient=float(np.exp(law.intercept.value)), n_cells=law.n_cells, n_rows=law.n_rows,
        residual_sd=law.residual_sd, correlation=law.correlation, condition=law.condition,
        skipped_resamples=law.skipped, warnings=list(law.warnings),
    )


def law_rows(sweep_dir: str | Path, results: SweepResults, names: tuple[str, str], n_def: NDef
             ) -> tuple[Manifest, list[tuple[SizeResult, float, float]], dict[str, str]]:
    manifest = read_manifest(sweep_dir)
    variables = _describe(manifest, names, n_def)
    rows = []
    for s in results.sizes:
        if s.fixed_recipe:
            continue
        x1, x2 = (_values(manifest, s, n, n_def) for n in names)
        if x1 and x2 and s.lr_opt > 0:
            rows.append((s, x1, x2))
    return manifest, rows, variables


def lr_law_section(sweep_dir: str | Path, results: SweepResults, names: tuple[str, str], *, n_def: NDef,
                   resamples: int, seed: int, lr_source: str) -> LRLawSection:
    """The two-variable law (see the module docstring); `refused` says why when it cannot be fitted."""
    manifest, rows, variables = law_rows(sweep_dir, results, names, n_def)
    base = dict(variables=variables, lr_source=lr_source, resamples=resamples,
                bootstrap="cases over cells (percentile): whole cells resampled with replacement, band rows together")
    x1 = np.array([r[1] for r in rows])
    x2 = np.array([r[2] for r in rows])
    lrs = np.array([r[0].lr_opt for r in rows])
    labels = np.array([f"{r[0].method}/{r[0].size}" for r in rows])
    try:
        law = fit_two_variable_law(x1, x2, lrs, labels, names, resamples=resamples, seed=seed)
    except NotSeparable as exc:
        return LRLawSection(**base, refused=str(exc), n_cells=len(rows))
    section = LRLawSection(**base, **_fit_section(law, "optima"))
    points = _ok_points(sweep_dir)
    bx1, bx2, blr, blab = [], [], [], []
    for (s, a, b), label in zip(rows, labels):
        for lr in _band_lrs(points, s):
            bx1.append(a), bx2.append(b), blr.append(lr), blab.append(label)
    if len(blr) > len(rows):  # some cell holds several near-optimal runs
        try:
            band = fit_two_variable_law(np.array(bx1), np.array(bx2), np.array(blr), np.array(blab), names,
                                        resamples=resamples, seed=seed)
            section.near_optimal = TwoVariableFit(**_fit_section(band, f"near-optimal band (within {BAND:g}%)"))
        except NotSeparable as exc:
            section.warnings = [*section.warnings, f"near-optimal band: {exc}"]
        section.choice = (f"headline: the cells' optima ({'interpolated when bracketed' if lr_source == 'interp' else 'grid best'}, "
                          f"one row per cell); near_optimal: StepLaw's set, every run within {BAND:g}% of its cell's "
                          f"best ({len(blr)} runs in {len(rows)} cells)")
    else:
        section.choice = "the cells' optima (one row per cell); no cell holds a near-optimal band of several runs"
    return section


def _ok_points(sweep_dir: str | Path) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for row in load_points(sweep_dir).iter_rows(named=True):
        if row["state"] == "ok" and row["objective"] is not None:
            out.setdefault(row["cell_id"], []).append((float(row["lr"]), float(row["objective"])))
    return out


def _inside(recorded: float, lo: float | None, hi: float | None) -> bool | None:
    return None if lo is None or hi is None else bool(lo <= recorded <= hi)


def holdout_section(results: SweepResults, axis: XAxis, n_def: NDef, c_def: str, *, resamples: int,
                    seed: int) -> HoldoutSection:
    """Per method, the largest size predicted from the smaller ones (see the module docstring)."""
    rows: list[HoldoutRow] = []
    skipped: dict[str, str] = {}
    by_method: dict[str, list[tuple[float, SizeResult]]] = {}
    for s in results.sizes:
        x = s.scale.x(axis, n_def, c_def)  # type: ignore[arg-type]
        if x and not s.fixed_recipe:
            by_method.setdefault(s.method, []).append((x, s))
    for method, sizes in sorted(by_method.items()):
        sizes.sort(key=lambda item: item[0])
        if len({x for x, _ in sizes}) < 3:
            skipped[method] = f"{len(sizes)} fitted size(s): a forecast needs two smaller sizes and the largest"
            continue
        (xl, largest), smaller = sizes[-1], sizes[:-1]
        xs = np.array([x for x, _ in smaller])
        lr_pred = predict_optimal_lr(xs, [s.lr_opt for _, s in smaller], xl, resamples=resamples, seed=seed)
        lr = None
        if lr_pred is not None:
            lr = HoldoutValue(predicted=lr_pred.lr, lo=lr_pred.lo, hi=lr_pred.hi, recorded=largest.lr_opt,
                              inside=_inside(largest.lr_opt, lr_pred.lo, lr_pred.hi), n_fitted=len(smaller),
                              form="LR* = c·x^b", note=None if lr_pred.lo is not None else
                              "two smaller sizes: the line passes through both, no interval")
        rows.append(HoldoutRow(method=method, size=largest.size, x=xl, fitted_sizes=[s.size for _, s in smaller],
                               lr=lr, loss=_loss_forecast(xs, [s.objective for _, s in smaller], xl, largest.objective,
                                                          resamples, seed)))
    return HoldoutSection(which="largest", interval="95% prediction interval (where that size's own value will lie: "
                          "the law's bootstrap plus a resampled residual), not the law's confidence band",
                          rows=rows, skipped=skipped)


def _loss_forecast(xs: np.ndarray, ys: list[float], target: float, recorded: float, resamples: int,
                   seed: int) -> HoldoutValue:
    y = np.array(ys)
    if xs.size >= 3:
        fit = fit_loss_curve(xs, y, resamples=resamples, seed=seed)
        if fit.status == "ok":
            pred = float(fit.predict(np.array([target]))[0][0])
            band = fit.prediction_interval(np.array([target]), seed=seed)
            if band is not None and all(np.isfinite([band[0][0], band[1][0]])):
                lo, hi = float(band[0][0]), float(band[1][0])
                return HoldoutValue(predicted=pred, lo=lo, hi=hi, recorded=recorded, inside=_inside(recorded, lo, hi),
                                    n_fitted=int(xs.size), form="L = E + A·x^(-α)")
    line = fit_power_law(xs, y, resamples=resamples, seed=seed)
    pred_arr, lo_arr, hi_arr = line.predict(np.array([target]), interval="prediction", seed=seed)
    lo = float(lo_arr[0]) if lo_arr is not None else None
    hi = float(hi_arr[0]) if hi_arr is not None else None
    return HoldoutValue(predicted=float(pred_arr[0]), lo=lo, hi=hi, recorded=recorded, inside=_inside(recorded, lo, hi),
                        n_fitted=int(xs.size), form="L = c·x^b (too few sizes, or a flat fit or one without an interval, "
                        "for E + A·x^(-α))")


def law_holdout(sweep_dir: str | Path, results: SweepResults, names: tuple[str, str], *, n_def: NDef,
                resamples: int, seed: int) -> list[HoldoutRow]:
    """The two-variable law without the cells at the largest X1, predicting each of them (empty when the rest
    cannot separate the variables)."""
    _, rows, _ = law_rows(sweep_dir, results, names, n_def)
    if not rows:
        return []
    top = max(r[1] for r in rows)
    kept = [r for r in rows if r[1] < top]
    try:
        law = fit_two_variable_law(np.array([r[1] for r in kept]), np.array([r[2] for r in kept]),
                                   np.array([r[0].lr_opt for r in kept]),
                                   np.array([f"{r[0].method}/{r[0].size}" for r in kept]), names,
                                   resamples=resamples, seed=seed)
    except NotSeparable:
        return []
    out = []
    for s, a, b in (r for r in rows if r[1] == top):
        band = law.prediction_interval(a, b, seed=seed)
        lo, hi = band if band is not None else (None, None)
        out.append(HoldoutRow(method=f"{names[0]},{names[1]} law", size=f"{s.method}/{s.size}", x=a,
                              fitted_sizes=[f"{r[0].method}/{r[0].size}" for r in kept],
                              lr=HoldoutValue(predicted=law.predict(a, b), lo=lo, hi=hi, recorded=s.lr_opt,
                                              inside=_inside(s.lr_opt, lo, hi), n_fitted=len(kept),
                                              form=f"log η* = c + a·log {names[0]} + b·log {names[1]}")))
    return out
