"""Scaling figures: best loss and optimal learning rate against size, with the fitted
power laws, their 95% bands and the extrapolated targets from fits.json."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from dashboards import style
from dashboards.data import SweepData
from sweeper.analysis.fits.document import CurveRow, EstimateValue, LossFitSection, PowerLawSection
from dashboards.figures.common import (
    FigureDict,
    Trace,
    empty_note,
    log_ticks,
    num,
    nums,
    present_methods,
    scale_axis_ticks,
    uid,
)
from dashboards.figures.seeds import partial_traces, seed_traces
from sweeper.core.states import CellStatus


FAILED_STATUSES = tuple(s.value for s in CellStatus if s.learned_nothing)


def _loss_fit(data: SweepData, method: str) -> LossFitSection | None:
    section = data.fits.method(method) if data.fits is not None else None
    return section.loss_fit if section is not None else None


def _lr_fit(data: SweepData, method: str) -> PowerLawSection | None:
    section = data.fits.method(method) if data.fits is not None else None
    return section.lr_fit if section is not None else None


def _scaling_kind(data: SweepData) -> tuple[str, str]:
    """(x kind, axis title): the fits' x when there are fits, else depth or parameters."""
    fits = data.fits
    if fits is not None and fits.methods:
        kind = fits.x or "depth"
        if kind == "depth" and data.x_kind == "loops":  # the fits' depth-like axis of a loop-count sweep
            kind = "loops"
        label = fits.x_label
        default = style.size_label_unit(kind)[0]
        return kind, style.text(label[0].upper() + label[1:]) if label else default
    kind = data.x_kind or ("depth" if data.is_depth_sweep else "params")
    return kind, style.size_label_unit(kind)[0]


def _estimate_text(est: EstimateValue, fmt: str) -> str | None:
    return est.text(fmt)


def _band_and_line(
    fig: str, method: str, colour: str, rows: list[CurveRow],
    name: str, trustworthy: bool, warnings: list[str], y_fmt: str,
) -> list[Trace]:  # fmt: skip
    traces: list[Trace] = []
    band = [(x, lo, hi) for x, _, lo, hi in rows if lo is not None and hi is not None]
    if len(band) >= 2 and trustworthy:  # an unreliable fit's interval would only hide the data
        xs = [b[0] for b in band]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "uid": uid(fig, method, "band"),
                "x": xs + xs[::-1],
                "y": [b[2] for b in band] + [b[1] for b in band][::-1],
                "fill": "toself",
                "fillcolor": style.rgba(colour, 0.16),
                "line": {"width": 0, "color": style.rgba(colour, 0.0)},
                "hoverinfo": "skip",
                "showlegend": False,
                "legendgroup": method,
                "name": f"{name} 95% interval",
            }
        )
    note = "" if trustworthy else "<br>fit flagged unreliable"
    if warnings:
        note += "".join(f"<br>· {style.text(w)}" for w in warnings[:4])
    traces.append(
        {
            "type": "scatter",
            "mode": "lines",
            "uid": uid(fig, method, "fit"),
            "x": [r[0] for r in rows],
            "y": [r[1] for r in rows],
            "line": {"color": colour, "width": 2, "dash": "solid" if trustworthy else "dash"},
            "name": name,
            "legendgroup": method,
            "meta": [style.text(method), note],
            "hovertemplate": "%{meta[0]} fit<br>x %{x:.4g}<br>%{y:" + y_fmt + "}%{meta[1]}<extra></extra>",
        }
    )
    return traces


def _observed_by_size(data: SweepData, method: str, kind: str, value_col: str) -> list[dict[str, Any]]:
    """Per size of `method`: x on the scaling axis and the cells' values (one per seed)."""
    values = data.size_values()
    cells = data.cells.filter((pl.col("method") == method) & pl.col(value_col).is_finite()).sort("size", "seed")
    out = []
    for size in data.sizes:
        frame = cells.filter(pl.col("size") == size)
        x = values.get(size, {}).get(kind)
        if frame.height == 0 or x is None:
            continue
        out.append(
            {
                "size": size,
                "x": x,
                "values": nums(frame[value_col]),
                "seeds": frame["seed"].to_list(),
                "statuses": frame["status"].to_list(),
            }
        )
    return out


def _failed_by_size(data: SweepData, method: str, kind: str) -> list[dict[str, Any]]:
    """Per size of `method` where some seed's cell found no usable learning rate (every point
    diverged or stalled): x on the scaling axis, how many seeds failed and how."""
    values = data.size_values()
    cells = data.cells.filter(pl.col("method") == method)
    out = []
    for size in data.sizes:
        frame = cells.filter(pl.col("size") == size)
        x = values.get(size, {}).get(kind)
        bad = [st for st in frame["status"].to_list() if st in FAILED_STATUSES]
        if x is None or not bad:
            continue
        out.append({"size": size, "x": x, "failed": len(bad), "seeds": frame.height,
                    "how": ", ".join(sorted(set(bad)))})
    return out


def _failed_markers(data: SweepData, kind: str, layout: dict[str, Any]) -> list[Trace]:
    """The sizes at which a method failed (the study's "diverges from 192 layers"): ✕ in the method's
    colour along the top of the plot, one row per method (an overlaid axis in [0, 1]); filled when
    every seed failed, open when some did."""
    traces: list[Trace] = []
    methods = present_methods(data)
    for i, method in enumerate(methods):
        failed = _failed_by_size(data, method, kind)
        if not failed:
            continue
        colour = data.colours[method]
        traces.append(
            {
                "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "failed"), "yaxis": "y2",
                "x": [f["x"] for f in failed], "y": [0.97 - 0.045 * i] * len(failed),
                "marker": {"color": colour, "size": 11, "line": {"color": colour, "width": 2},
                           "symbol": [style.FAILED_SIZE_SYMBOL if f["failed"] == f["seeds"]
                                      else style.FAILED_SIZE_SYMBOL + "-open" for f in failed]},
                "name": style.text(method) + ": no usable LR", "legendgroup": method, "showlegend": True,
                "meta": style.text(method),
                "customdata": [[style.text(f["size"]), f["failed"], f["seeds"], f["how"]] for f in failed],
                "hovertemplate": "%{meta} · %{customdata[0]}: no usable learning rate in %{customdata[1]} of "
                "%{customdata[2]} seed(s) (%{customdata[3]}: every point diverged or stalled)<extra></extra>",
            }
        )  # fmt: skip
    if traces:
        layout["yaxis2"] = {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}
    return traces


def _extrapolation_shade(layout: dict[str, Any], data_max: float | None, curve_max: float | None) -> None:
    if data_max is None or curve_max is None or curve_max <= data_max * 1.0001:
        return
    layout.setdefault("shapes", []).append(
        {
            "type": "rect", "xref": "x", "yref": "paper", "x0": data_max, "x1": curve_max, "y0": 0, "y1": 1,
            "fillcolor": "rgba(0,0,0,0.045)", "line": {"width": 0}, "layer": "below",
        }
    )  # fmt: skip
    layout.setdefault("annotations", []).append(
        {
            "text": "extrapolated", "xref": "x", "yref": "paper", "x": math.log10(math.sqrt(data_max * curve_max)),
            "y": 1.0, "yanchor": "top", "showarrow": False, "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
        }
    )  # fmt: skip


def _unreliable_note(layout: dict[str, Any], traces: list[Trace]) -> None:
    if any(t.get("line", {}).get("dash") == "dash" and "(unreliable)" in t.get("name", "")
           for t in traces):  # fmt: skip
        bands = any(t.get("fill") == "toself" for t in traces)
        layout["title"]["subtitle"] = {
            "text": "dashed: fit flagged unreliable by `sweeper fit`, its interval not drawn (hover the line for why)"
            + ("; shaded bands: 95% bootstrap intervals" if bands else ""),
            "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
        }
        layout["margin"]["t"] = 80


def _marker_xs(traces: list[Trace]) -> list[float]:
    """x of every marker (measured points, held-out points, targets) and the end of every
    fitted curve: where ticks belong."""
    xs = [x for t in traces if "markers" in t.get("mode", "") for x in t["x"] if x is not None]
    xs += [
        t["x"][-1] for t in traces if t.get("uid") and t.get("mode") == "lines" and t["x"] and t["x"][-1] is not None
    ]
    return xs


def scaling(data: SweepData) -> FigureDict:
    """Best loss against depth (or parameters, or compute) per method: the fitted power law
    `E + A·x^(-α)` with its 95% band from fits.json, the fitted points and the held-out
    point; before `sweeper fit` has run, the cells' best grid losses (filled: bracketed,
    open: optimum at the grid's edge). Always each seed's best loss (small markers), the mean with its
    95% Student-t interval (df = seeds − 1; no bar with one seed), stalled cells at their lowest loss (□)
    and partial sizes (◇, `dashboards.figures.seeds`). A size at which a method found no usable learning rate
    (every point diverged or stalled) is marked ✕ along the top, in the method's colour."""
    kind, x_title = _scaling_kind(data)
    layout = style.base_layout(f"Best loss against {x_title.split(' (')[0].lower()}", height=460, uirevision="scaling")
    layout["xaxis"] = style.axis(x_title, log=True)
    # below the plot: these figures sit half-width on the dashboard, and fit names are long
    layout["legend"].update({"orientation": "h", "x": 0.0, "xanchor": "left", "y": -0.2, "yanchor": "top"})
    layout["yaxis"] = style.axis("Best " + data.objective_label[0].lower() + data.objective_label[1:])
    traces: list[Trace] = []
    data_max = curve_max = None
    y_fmt = ".4f"
    for method in present_methods(data):
        colour = data.colours[method]
        # each seed's best loss, the mean ± its t-interval, stalled cells at their loss, partial sizes
        traces += seed_traces(data, method, kind, colour) + partial_traces(data, method, colour)
        fit = _loss_fit(data, method)
        rows = fit.curve_rows() if fit is not None else []
        if fit is not None and rows:
            alpha = _estimate_text(fit.alpha, ".3f")
            name = style.text(method) + (f": α = {alpha}" if alpha else "")
            trust = fit.trusted
            if not trust:
                name += " (unreliable)"
            traces += _band_and_line("scaling", method, colour, rows, name, trust, fit.warnings, y_fmt)
            pts = fit.xy()
            if pts:
                traces.append(
                    {
                        "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "points"),
                        "x": [p[0] for p in pts], "y": [p[1] for p in pts],
                        "marker": {"color": colour, "size": 9, "line": {"color": "#FFFFFF", "width": 1}},
                        "name": style.text(method) + " fitted points", "legendgroup": method, "showlegend": False,
                        "meta": style.text(method), "hovertemplate": "%{meta}<br>x %{x:.4g}<br>%{y:.4f}<extra></extra>",
                    }
                )  # fmt: skip
                data_max = max(data_max or 0.0, max(p[0] for p in pts))
            curve_max = max(curve_max or 0.0, rows[-1][0])
            hold = fit.holdout
            if hold is not None and hold.x is not None and hold.actual is not None:
                pred, lo, hi = num(hold.predicted), num(hold.lo), num(hold.hi)
                traces.append(
                    {
                        "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "holdout"),
                        "x": [num(hold.x)], "y": [num(hold.actual)],
                        "marker": {"color": colour, "size": 12, "symbol": "diamond-open", "line": {"width": 2}},
                        "name": "held-out point", "legendgroup": "holdout",
                        "showlegend": not any(t.get("legendgroup") == "holdout" for t in traces),
                        "meta": [style.text(method), pred, lo, hi],
                        "hovertemplate": "%{meta[0]} held out<br>x %{x:.4g}<br>actual %{y:.4f}<br>predicted without it "
                        "%{meta[1]:.4f} [%{meta[2]:.4f}, %{meta[3]:.4f}]<extra></extra>",
                    }
                )  # fmt: skip
            continue
        observed = _observed_by_size(data, method, kind, "best_objective")
        if not observed:
            continue
        xs, ys, symbols, custom = [], [], [], []
        for o in observed:
            mean = float(np.mean([v for v in o["values"] if v is not None]))
            xs.append(o["x"])
            ys.append(mean)
            bracketed = all(s == "bracketed" for s in o["statuses"])
            fixed = all(s == "fixed" for s in o["statuses"])  # the recipe's loss, compared at equal recipe
            symbols.append("square" if fixed else "circle" if bracketed else "circle-open")
            custom.append([style.text(o["size"]), len(o["values"]),
                           "fixed recipe, no LR search" if fixed else "bracketed" if bracketed else "not bracketed"])
        traces.append(
            {
                "type": "scatter", "mode": "lines", "uid": uid("scaling", method, "observed-line"),
                "x": xs, "y": ys, "name": style.text(method), "legendgroup": method,
                "line": {"color": colour, "width": 1.5}, "hoverinfo": "skip",
            }
        )  # fmt: skip
        traces.append(
            {
                "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "observed"),
                "x": xs, "y": ys, "name": style.text(method) + " cells", "legendgroup": method, "showlegend": False,
                "marker": {"color": colour, "size": 9, "symbol": symbols, "line": {"width": 2, "color": colour}},
                "meta": style.text(method), "customdata": custom,
                "hovertemplate": "%{meta} · %{customdata[0]}<br>x %{x:.4g}<br>best %{y:.4f} "
                "(mean of %{customdata[1]} seed(s), %{customdata[2]})<extra></extra>",
            }
        )  # fmt: skip
    traces += _failed_markers(data, kind, layout)
    scale_axis_ticks(layout["xaxis"], kind, _marker_xs(traces))
    if not traces:
        empty_note(layout, "No bracketed cell yet")
    else:
        _unreliable_note(layout, traces)
        if data.fits is None:
            layout["title"]["subtitle"] = {
                "text": "grid best per size (open: not bracketed yet); run `sweeper fit DIR` for the power law",
                "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
            }
            layout["margin"]["t"] = 80
        _extrapolation_shade(layout, data_max, curve_max)
    return {"data": traces, "layout": layout}


def optimal_lr(data: SweepData) -> FigureDict:
    """Optimal LR against size per method: the fitted power law with its band and the
    extrapolated targets (◆ with their intervals) from fits.json; before a fit, the cells'
    interpolated optima (grid best where no parabola fits), one marker per seed."""
    kind, x_title = _scaling_kind(data)
    layout = style.base_layout(f"Optimal learning rate against {x_title.split(' (')[0].lower()}", height=460,
                               uirevision="optimal_lr")  # fmt: skip
    layout["xaxis"] = style.axis(x_title, log=True)
    # below the plot: these figures sit half-width on the dashboard, and fit names are long
    layout["legend"].update({"orientation": "h", "x": 0.0, "xanchor": "left", "y": -0.2, "yanchor": "top"})
    layout["yaxis"] = style.axis("Optimal peak learning rate", log=True)
    traces: list[Trace] = []
    data_max = curve_max = None
    for method in present_methods(data):
        colour = data.colours[method]
        law = _lr_fit(data, method)
        rows = law.curve_rows() if law is not None else []
        if law is not None and rows:
            exponent = _estimate_text(law.exponent, ".3f")
            name = style.text(method) + (f": exponent {exponent}" if exponent else "")
            trust = law.trusted
            if not trust:
                name += " (unreliable)"
            traces += _band_and_line("optimal_lr", method, colour, rows, name, trust, law.warnings, ".3g")
            pts = [(x, y) for x, y in law.xy() if y > 0]
            if pts:
                traces.append(
                    {
                        "type": "scatter", "mode": "markers", "uid": uid("optimal_lr", method, "points"),
                        "x": [p[0] for p in pts], "y": [p[1] for p in pts],
                        "marker": {"color": colour, "size": 9, "line": {"color": "#FFFFFF", "width": 1}},
                        "name": style.text(method) + " measured", "legendgroup": method, "showlegend": False,
                        "meta": style.text(method), "hovertemplate": "%{meta}<br>x %{x:.4g}<br>LR* %{y:.3g}<extra></extra>",
                    }
                )  # fmt: skip
                data_max = max(data_max or 0.0, max(p[0] for p in pts))
            curve_max = max(curve_max or 0.0, rows[-1][0])
            targets = [t for t in law.targets if t.lr is not None]
            if targets:
                lrs = [num(t.lr) for t in targets]
                his = [num(t.hi) for t in targets]
                los = [num(t.lo) for t in targets]
                traces.append(
                    {
                        "type": "scatter", "mode": "markers+text", "uid": uid("optimal_lr", method, "targets"),
                        "x": [num(t.x) for t in targets], "y": lrs,
                        "text": [f"{v:.2g}".replace("e-0", "e-") for v in lrs], "textposition": "middle right",
                        "textfont": {"color": colour, "size": style.FONT_SIZE - 2},
                        "marker": {"color": colour, "size": 11, "symbol": "diamond", "line": {"color": style.INK, "width": 1}},
                        "error_y": {
                            "type": "data", "symmetric": False, "color": colour, "thickness": 1.5, "width": 5,
                            "array": [(h - v) if h is not None else 0.0 for h, v in zip(his, lrs)],  # type: ignore[operator]
                            "arrayminus": [(v - lo) if lo is not None else 0.0 for lo, v in zip(los, lrs)],  # type: ignore[operator]
                        },
                        "name": "extrapolated target", "legendgroup": "targets",
                        "showlegend": not any(t.get("legendgroup") == "targets" for t in traces),
                        "meta": style.text(method),
                        "customdata": [[lo, hi] for lo, hi in zip(los, his)],
                        "hovertemplate": "%{meta} predicted<br>x %{x:.4g}<br>LR* %{y:.3g} "
                        "[%{customdata[0]:.3g}, %{customdata[1]:.3g}]<extra></extra>",
                    }
                )  # fmt: skip
            continue
        # optimal LRs: a fixed-recipe cell's LR is the recipe's, not an optimum
        observed = [o for o in _observed_by_size(data, method, kind, "best_lr") if "fixed" not in o["statuses"]]
        interp = {o["size"]: o for o in _observed_by_size(data, method, kind, "interp_lr")}
        xs, ys, custom = [], [], []
        mean_x, mean_y = [], []
        for o in observed:
            chosen = interp.get(o["size"], o)
            source = "interpolated" if o["size"] in interp else "grid best"
            vals = [v for v in chosen["values"] if v is not None and v > 0]
            for v, seed in zip(chosen["values"], chosen["seeds"]):
                if v is not None and v > 0:
                    xs.append(o["x"])
                    ys.append(v)
                    custom.append([style.text(o["size"]), seed, source])
            if vals:
                mean_x.append(o["x"])
                mean_y.append(float(np.exp(np.mean(np.log(vals)))))
        if not xs:
            continue
        traces.append(
            {
                "type": "scatter", "mode": "lines", "uid": uid("optimal_lr", method, "observed-mean"),
                "x": mean_x, "y": mean_y, "line": {"color": colour, "width": 1.5},
                "name": style.text(method), "legendgroup": method, "hoverinfo": "skip",
            }
        )  # fmt: skip
        traces.append(
            {
                "type": "scatter", "mode": "markers", "uid": uid("optimal_lr", method, "observed"),
                "x": xs, "y": ys, "marker": {"color": colour, "size": 8, "line": {"color": "#FFFFFF", "width": 1}},
                "name": style.text(method) + " cells", "legendgroup": method, "showlegend": False,
                "meta": style.text(method), "customdata": custom,
                "hovertemplate": "%{meta} · %{customdata[0]} s%{customdata[1]}<br>x %{x:.4g}<br>LR* %{y:.3g} "
                "(%{customdata[2]})<extra></extra>",
            }
        )  # fmt: skip
    scale_axis_ticks(layout["xaxis"], kind, _marker_xs(traces))
    lrs = [y for t in traces if t.get("fill") != "toself" for y in t["y"] if y is not None and y > 0]
    if lrs:
        layout["yaxis"]["tickmode"] = "array"
        layout["yaxis"]["tickvals"], layout["yaxis"]["ticktext"] = log_ticks(min(lrs), max(lrs))
    if not traces:
        empty_note(layout, "No optimum yet")
    else:
        _unreliable_note(layout, traces)
        if data.fits is None:
            layout["title"]["subtitle"] = {
                "text": "per cell: interpolated optimum (grid best where none); line: geometric mean over seeds; "
                "run `sweeper fit DIR` for the fitted law",
                "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
            }
            layout["margin"]["t"] = 80
        _extrapolation_shade(layout, data_max, curve_max)
    return {"data": traces, "layout": layout}
