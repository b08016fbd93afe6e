"""The sweep's figures as pure functions: `SweepData` (polars frames + fits dict) in, a Plotly
figure out, as a plain JSON-able dict (`{"data": [...], "layout": {...}}`; wrap it in
`plotly.graph_objects.Figure` to validate or export it).

Plain dicts rather than `go.Figure` objects because the live dashboard serialises traces
one by one and sends only those that changed; building validated objects for a hundred
thousand curve vertices on every update would cost more than the update itself.

Every trace has a stable `uid` derived from what it shows, every layout a `uirevision`, so
Plotly keeps zoom, legend toggles and selections across updates; inputs are sorted and no
figure reads a clock, so the same store always gives the same bytes.

Figures (see `FIGURES`): loss against LR, best loss against scale with the fitted power
law, optimal LR against scale with its fit and extrapolated targets, learning curves,
the method × size status grid, and sweep progress.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from dashboards import style
from dashboards.data import SweepData
from dashboards.downsample import downsample_curves

FigureDict = dict[str, Any]
Trace = dict[str, Any]

PANEL_HEIGHT = 300
STATIC_WIDTH = 1100  # `sweeper plots` draws at this width; the dashboard fills the window
CURVE_VERTEX_BUDGET = 150_000  # learning-curve vertices per figure, shared by all curves
FINISHED = ("ok", "diverged", "failed")


# Small helpers -----------------------------------------------------------------------------


def uid(*parts: object) -> str:
    """A stable trace id from what the trace shows (names may hold any character)."""
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _nums(values: Any) -> list[float | None]:
    return [_num(v) for v in values]


def _axis_name(kind: str, index: int) -> str:
    return kind if index == 1 else f"{kind}{index}"


def _ref(kind: str, index: int) -> str:
    return kind[0] if index == 1 else f"{kind[0]}{index}"


def _empty_note(layout: dict[str, Any], message: str) -> None:
    layout.setdefault("annotations", []).append(
        {
            "text": message,
            "xref": "paper",
            "yref": "paper",
            "x": 0.5,
            "y": 0.5,
            "showarrow": False,
            "font": {"size": style.FONT_SIZE + 1, "color": style.MUTED},
        }
    )


def _facets(
    layout: dict[str, Any],
    titles: list[tuple[str, str]],
    *,
    x_axis: dict[str, Any],
    y_axis: dict[str, Any],
    cols: int,
    share_x: bool = False,
) -> list[tuple[str, str]]:
    """Lay out one panel per title (text, colour) on a grid; returns each panel's (xref, yref).
    Panels share the y axis (same range, labels on the left column only)."""
    n = max(len(titles), 1)
    cols = max(1, min(cols, n))
    rows = math.ceil(n / cols)
    h_gap, v_gap = 0.06, 0.12 / max(rows - 1, 1) if rows > 1 else 0.0
    v_gap = min(v_gap, 0.1)
    width = (1 - h_gap * (cols - 1)) / cols
    height = (1 - v_gap * (rows - 1)) / rows
    refs = []
    annotations = layout.setdefault("annotations", [])
    for i in range(n):
        r, c = divmod(i, cols)
        x0 = c * (width + h_gap)
        y1 = 1 - r * (height + v_gap)
        k = i + 1
        xa = {**x_axis, "domain": [round(x0, 6), round(x0 + width, 6)], "anchor": _ref("yaxis", k)}
        ya = {**y_axis, "domain": [round(y1 - height, 6), round(y1, 6)], "anchor": _ref("xaxis", k)}
        if k > 1:
            ya["matches"] = "y"
            if share_x:
                xa["matches"] = "x"
        if c > 0:
            ya["showticklabels"] = False
            ya["title"] = {"text": ""}
        if r < rows - 1 and i + cols < n:
            xa["title"] = {"text": ""}
        layout[_axis_name("xaxis", k)] = xa
        layout[_axis_name("yaxis", k)] = ya
        if i < len(titles):
            text, colour = titles[i]
            annotations.append(
                {
                    "text": f"<b>{text}</b>",
                    "font": {"color": colour, "size": style.FONT_SIZE + 1},
                    "xref": "paper",
                    "yref": "paper",
                    "x": round(x0 + width / 2, 6),
                    "y": round(y1, 6),
                    "xanchor": "center",
                    "yanchor": "bottom",
                    "showarrow": False,
                }
            )
        refs.append((_ref("xaxis", k), _ref("yaxis", k)))
    layout["height"] = 130 + rows * PANEL_HEIGHT
    return refs


def _present_methods(data: SweepData) -> list[str]:
    present = set(data.points["method"].drop_nulls()) | set(data.cells["method"].drop_nulls())
    return [m for m in data.methods if m in present]


def _present_sizes(data: SweepData) -> list[str]:
    present = set(data.points["size"].drop_nulls()) | set(data.cells["size"].drop_nulls())
    return [s for s in data.sizes if s in present]


def group_status(data: SweepData) -> dict[tuple[str, str], str]:
    """One status per (method, size), over its seeds: running while any seed runs (or some
    are done and others not started), otherwise pending, diverged (all seeds), edge (any),
    bracketed (all)."""
    statuses: dict[tuple[str, str], list[str]] = {}
    for row in data.cells.select("method", "size", "status").iter_rows():
        statuses.setdefault((row[0], row[1]), []).append(row[2] or "pending")
    for row in data.points.select("method", "size", "state").unique().iter_rows():
        key = (row[0], row[1])
        if key not in statuses:
            statuses[key] = ["running" if row[2] == "running" else "pending"]
    out = {}
    for key, values in statuses.items():
        s = set(values)
        if "running" in s or ("pending" in s and len(s) > 1):
            out[key] = "running"
        elif s == {"pending"}:
            out[key] = "pending"
        elif s == {"diverged"}:
            out[key] = "diverged"
        elif "edge" in s or "diverged" in s:
            out[key] = "edge"
        else:
            out[key] = "bracketed"
    return out


_STATUS_DASH = {"bracketed": "solid", "edge": "dash", "running": "dot", "pending": "dot", "diverged": "dot"}


def _y_window(values: list[float]) -> tuple[float, float, float] | None:
    """(bottom, top, pad) of a loss axis: from the minimum to a cap that keeps the valley
    readable; larger values are drawn at the top as off-scale markers."""
    if not values:
        return None
    v = np.sort(np.asarray(values, dtype=float))
    lo, med, hi = float(v[0]), float(np.median(v)), float(v[-1])
    cap = lo + 3.0 * (med - lo) + 0.02 * abs(lo)
    top = min(hi, cap) if hi > lo else lo + max(abs(lo) * 0.01, 1e-3)
    pad = (top - lo) * 0.06 or 1e-3
    return lo, top, pad


def _si(value: float) -> str:
    for factor, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def log_ticks(lo: float, hi: float, *, style_: str = "e") -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis over [lo, hi] (one decade beyond each side, so
    zooming out keeps labels), fewer per decade the more decades there are.
    Labels "2e-3" (learning rates) or SI ("20M", parameters and FLOPs)."""
    if not (lo > 0 and hi > 0):
        return [], []
    lo, hi = min(lo, hi), max(lo, hi)
    decades = math.log10(hi / lo)
    if decades >= 2.5:
        mantissas: tuple[float, ...] = (1,)
    elif decades >= 1.0:
        mantissas = (1, 3)
    elif decades >= 0.5:
        mantissas = (1, 2, 5)
    else:
        mantissas = (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)
    values, texts = [], []
    for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2):
        for m in mantissas:
            v = float(f"{m * 10.0**k:.6g}")
            values.append(v)
            texts.append(f"{m:g}e{k}" if style_ == "e" else _si(v))
    return values, texts


def _scale_axis_ticks(axis: dict[str, Any], kind: str, xs: list[float]) -> None:
    """Readable ticks on a scaling axis: the depths themselves, or SI-labelled decades."""
    xs = sorted({x for x in xs if x and x > 0})
    if not xs:
        return
    if kind == "depth":
        axis["tickmode"] = "array"
        axis["tickvals"] = xs
        axis["ticktext"] = [f"{x:g}" for x in xs]
    else:
        axis["tickmode"] = "array"
        axis["tickvals"], axis["ticktext"] = log_ticks(xs[0], xs[-1], style_="si")
        axis["range"] = [math.log10(xs[0]) - 0.08, math.log10(xs[-1]) + 0.08]


def _size_legend(data: SweepData, sizes: list[str], fig: str) -> list[Trace]:
    """Legend-only entries, one per size in neutral shades (light: small, dark: large); the
    lines of every method join their size's group, so one click hides a size everywhere."""
    out = []
    for size in sizes:
        colour = style.shade("#555555", data.size_rank(size), len(data.sizes))
        out.append(
            {
                "type": "scatter", "mode": "lines", "uid": uid(fig, "legend", size), "x": [None], "y": [None],
                "name": style.text(size), "legendgroup": f"size:{size}", "line": {"color": colour, "width": 3},
                "hoverinfo": "skip",
            }
        )  # fmt: skip
    return out


# Loss against learning rate -----------------------------------------------------------------


def loss_vs_lr(data: SweepData, *, facet: str = "method") -> FigureDict:
    """Final objective against LR: one panel per method (lines per size, light to dark with
    size) or per size (lines per method); mean over seeds with the seeds' range as error
    bars; diverged points as × on the top edge, points above the axis as ▵ there (true value
    on hover), running points as ○ on the bottom edge; per cell the best grid point (○) and
    the interpolated optimum (★); line style gives the cell status (solid bracketed, dashed
    edge, dotted still running)."""
    if facet not in ("method", "size"):
        raise ValueError("facet must be 'method' or 'size'")
    layout = style.base_layout("Final loss against learning rate", height=430, uirevision="loss_vs_lr")
    layout["title"]["subtitle"] = {
        "text": "solid: optimum bracketed · dashed: optimum at the grid's edge · dotted: running · "
        "★ interpolated optimum · ○ best grid point · × diverged · ▵ off scale",
        "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
    }
    layout["margin"]["t"] = 90
    methods, sizes = _present_methods(data), _present_sizes(data)
    panels = methods if facet == "method" else sizes
    titles = [(style.text(p), data.colours.get(p, style.INK) if facet == "method" else style.INK) for p in panels]
    refs = _facets(
        layout,
        titles,
        x_axis=style.axis("Peak learning rate", log=True),
        y_axis=style.axis(data.objective_label),
        cols=3,
    )
    traces: list[Trace] = []
    if not panels:
        _empty_note(layout, "No results yet")
        return {"data": traces, "layout": layout}

    points = data.points
    ok = points.filter((pl.col("state") == "ok") & pl.col("objective").is_finite())
    window = _y_window(ok["objective"].to_list())
    if window is None:
        lo, top, pad = 0.0, 1.0, 0.06
    else:
        lo, top, pad = window
    y_top_marker = top + 1.6 * pad
    y_bottom_marker = lo - 0.9 * pad
    layout["yaxis"]["range"] = [lo - 1.8 * pad, top + 2.8 * pad]
    status = group_status(data)
    short = "error" if data.objective_label.startswith("Top-1") else "loss"
    layout["legend"]["groupclick"] = "togglegroup"
    if facet == "method":
        layout["legend"]["title"] = {"text": "Size"}
        traces += _size_legend(data, sizes, "loss_vs_lr")
    panel_col = "method" if facet == "method" else "size"
    for k, panel in enumerate(panels, start=1):
        shown = points.filter((pl.col(panel_col) == panel) & pl.col("state").is_in(["ok", "diverged", "running"]))
        lr_values = [v for v in shown["lr"].to_list() if v is not None and v > 0]
        if lr_values:
            ticks, labels = log_ticks(min(lr_values), max(lr_values))
            layout[_axis_name("xaxis", k)].update({"tickmode": "array", "tickvals": ticks, "ticktext": labels})

    stats = (
        ok.group_by("method", "size", "lr")
        .agg(
            pl.col("objective").mean().alias("mean"),
            pl.col("objective").min().alias("min"),
            pl.col("objective").max().alias("max"),
            pl.len().alias("n"),
        )
        .sort("method", "size", "lr")
    )
    by_group = {key: frame for key, frame in stats.partition_by(["method", "size"], as_dict=True).items()}
    shown_legend: set[str] = set()
    shown_methods: set[str] = set()

    for panel_i, panel in enumerate(panels):
        xref, yref = refs[panel_i]
        lines = sizes if facet == "method" else methods
        for line in lines:
            method, size = (panel, line) if facet == "method" else (line, panel)
            frame = by_group.get((method, size))
            st = status.get((method, size))
            if frame is None or st is None:
                continue
            colour = data.size_shade(method, size) if facet == "method" else data.colours.get(method, style.INK)
            n = frame["n"].to_list()
            trace: Trace = {
                "type": "scatter",
                "mode": "lines+markers",
                "uid": uid("loss_vs_lr", facet, method, size, "line"),
                "x": _nums(frame["lr"]),
                "y": _nums(frame["mean"]),
                "xaxis": xref,
                "yaxis": yref,
                "name": style.text(method if facet == "size" else f"{method} {size}"),
                "legendgroup": f"size:{size}" if facet == "method" else f"method:{method}",
                "showlegend": facet == "size" and method not in shown_methods,
                "line": {"color": colour, "width": 2, "dash": _STATUS_DASH[st]},
                "marker": {"color": colour, "size": 6},
                "meta": [style.text(method), style.text(size), short, st],
                "customdata": [[c, _num(a), _num(b)] for c, a, b in zip(n, frame["min"], frame["max"])],
                "hovertemplate": "%{meta[0]} · %{meta[1]} (%{meta[3]})<br>LR %{x:.3g}<br>%{meta[2]} %{y:.4f}"
                "<br>seeds %{customdata[0]}: %{customdata[1]:.4f} – %{customdata[2]:.4f}<extra></extra>",
            }
            shown_methods.add(method)
            if max(n) > 1:
                mean = frame["mean"].to_numpy()
                trace["error_y"] = {
                    "type": "data",
                    "symmetric": False,
                    "array": _nums(frame["max"].to_numpy() - mean),
                    "arrayminus": _nums(mean - frame["min"].to_numpy()),
                    "color": colour,
                    "thickness": 1,
                    "width": 3,
                }
            traces.append(trace)

        in_panel = points.filter(pl.col(panel_col) == panel)
        colour_of = (
            (lambda m, s: data.size_shade(m, s)) if facet == "method" else (lambda m, s: data.colours.get(m, style.INK))
        )

        off = in_panel.filter((pl.col("state") == "ok") & (pl.col("objective") > top)).sort("lr", "point_id")
        div = in_panel.filter(pl.col("state") == "diverged").sort("lr", "point_id")
        run = in_panel.filter(pl.col("state") == "running").sort("lr", "point_id")
        markers = [
            ("off scale", off, style.OFFSCALE_SYMBOL, y_top_marker,
             "%{meta} · %{customdata[0]} s%{customdata[1]}<br>LR %{x:.3g}<br>" + short
             + " %{customdata[2]:.4f} (above the axis)<extra></extra>",
             lambda r: [style.text(r["size"] if facet == "method" else r["method"]), r["seed"], _num(r["objective"])]),
            ("diverged", div, style.DIVERGED_SYMBOL, y_top_marker,
             "%{meta} · %{customdata[0]} s%{customdata[1]}<br>LR %{x:.3g}<br>diverged at step %{customdata[2]}"
             "<br>%{customdata[3]}<extra></extra>",
             lambda r: [style.text(r["size"] if facet == "method" else r["method"]), r["seed"],
                        r["diverged_step"] if r["diverged_step"] is not None else "?", style.text(r["reason"] or "")]),
            ("running", run, "circle-open", y_bottom_marker,
             "%{meta} · %{customdata[0]} s%{customdata[1]}<br>LR %{x:.3g}<br>running, step %{customdata[2]}"
             "<extra></extra>",
             lambda r: [style.text(r["size"] if facet == "method" else r["method"]), r["seed"], r["steps"] or 0]),
        ]  # fmt: skip
        for label, frame, symbol, y, template, custom in markers:
            if frame.height == 0:
                continue
            rows = frame.to_dicts()
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "uid": uid("loss_vs_lr", facet, panel, label),
                    "x": _nums(frame["lr"]),
                    "y": [y] * frame.height,
                    "xaxis": xref,
                    "yaxis": yref,
                    "name": label,
                    "legendgroup": f"marker:{label}",
                    "showlegend": label not in shown_legend,
                    "marker": {
                        "symbol": symbol,
                        "size": 9,
                        "line": {"width": 2},
                        "color": [colour_of(r["method"], r["size"]) for r in rows],
                    },
                    "meta": style.text(panel),
                    "customdata": [custom(r) for r in rows],
                    "hovertemplate": template,
                    "cliponaxis": False,
                }
            )
            shown_legend.add(label)

        cells = data.cells.filter(pl.col(panel_col) == panel).sort("size", "method", "seed")
        for label, lr_col, obj_col, symbol, size in (
            ("best grid point", "best_lr", "best_objective", style.GRID_BEST_SYMBOL, 12),
            ("interpolated optimum", "interp_lr", "interp_objective", style.INTERP_SYMBOL, 11),
        ):
            frame = cells.filter(pl.col(lr_col).is_finite() & pl.col(obj_col).is_finite())
            if frame.height == 0:
                continue
            rows = frame.to_dicts()
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "uid": uid("loss_vs_lr", facet, panel, label),
                    "x": _nums(frame[lr_col]),
                    "y": [min(max(v, lo - 1.5 * pad), y_top_marker) for v in _nums(frame[obj_col])],
                    "xaxis": xref,
                    "yaxis": yref,
                    "name": label,
                    "legendgroup": f"marker:{label}",
                    "showlegend": label not in shown_legend,
                    "marker": {
                        "symbol": symbol,
                        "size": size,
                        "color": [colour_of(r["method"], r["size"]) for r in rows],
                        "line": {"width": 2 if symbol.endswith("open") else 1, "color": style.INK},
                    },
                    "meta": style.text(panel),
                    "customdata": [
                        [style.text(r["size"] if facet == "method" else r["method"]), r["seed"], r["status"],
                         _num(r[obj_col])]
                        for r in rows
                    ],  # fmt: skip
                    "hovertemplate": f"{label}<br>"
                    + "%{meta} · %{customdata[0]} s%{customdata[1]} (%{customdata[2]})<br>LR %{x:.3g}<br>"
                    + short
                    + " %{customdata[3]:.4f}<extra></extra>",
                }
            )
            if symbol.endswith("open"):
                traces[-1]["marker"]["line"] = {"width": 2}
            shown_legend.add(label)
    return {"data": traces, "layout": layout}


# Scaling: best loss and optimal LR against size ------------------------------------------------


def _fit_for(data: SweepData, method: str, key: str) -> dict[str, Any] | None:
    fits = data.fits
    if not fits or not isinstance(fits.get("methods"), dict):
        return None
    entry = fits["methods"].get(method)
    fit = entry.get(key) if isinstance(entry, dict) else None
    return fit if isinstance(fit, dict) else None


def _scaling_kind(data: SweepData) -> tuple[str, str]:
    """(x kind, axis title): the fits' x when there are fits, else depth or parameters."""
    fits = data.fits
    if fits and isinstance(fits.get("methods"), dict) and fits["methods"]:
        kind = str(fits.get("x") or "depth")
        label = fits.get("x_label")
        default = style.size_label_unit(kind)[0]
        return kind, style.text(label) if isinstance(label, str) and label else default
    kind = "depth" if data.is_depth_sweep else "params"
    return kind, style.size_label_unit(kind)[0]


def _estimate_text(est: Any, fmt: str) -> str | None:
    if not isinstance(est, dict) or _num(est.get("value")) is None:
        return None
    text = format(_num(est["value"]), fmt)
    lo, hi = _num(est.get("lo")), _num(est.get("hi"))
    if lo is not None and hi is not None:
        text += f" [{format(lo, fmt)}, {format(hi, fmt)}]"
    return text


def _curve_rows(fit: dict[str, Any]) -> list[tuple[float, float, float | None, float | None]]:
    rows = []
    for row in fit.get("curve") or []:
        if isinstance(row, (list, tuple)) and len(row) >= 2:
            x, y = _num(row[0]), _num(row[1])
            if x is not None and y is not None and x > 0:
                lo = _num(row[2]) if len(row) > 2 else None
                hi = _num(row[3]) if len(row) > 3 else None
                rows.append((x, y, lo, hi))
    return sorted(rows)


def _band_and_line(
    fig: str, method: str, colour: str, rows: list[tuple[float, float, float | None, float | None]],
    name: str, trustworthy: bool, warnings: list[str], y_fmt: str,
) -> list[Trace]:  # fmt: skip
    traces: list[Trace] = []
    band = [(x, lo, hi) for x, _, lo, hi in rows if lo is not None and hi is not None]
    if len(band) >= 2:
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
                "values": _nums(frame[value_col]),
                "seeds": frame["seed"].to_list(),
                "statuses": frame["status"].to_list(),
            }
        )
    return out


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


def _marker_xs(traces: list[Trace]) -> list[float]:
    """x of every marker (measured points, held-out points, targets) and the end of every
    fitted curve: where ticks belong."""
    xs = [x for t in traces if "markers" in t.get("mode", "") for x in t["x"] if x is not None]
    xs += [t["x"][-1] for t in traces if t.get("uid") and t.get("mode") == "lines" and t["x"] and t["x"][-1] is not None]
    return xs


def scaling(data: SweepData) -> FigureDict:
    """Best loss against depth (or parameters, or compute) per method: the fitted power law
    `E + A·x^(-α)` with its 95% band from fits.json, the fitted points and the held-out
    point; before `sweeper fit` has run, the cells' best grid losses (filled: bracketed,
    open: optimum at the grid's edge)."""
    kind, x_title = _scaling_kind(data)
    layout = style.base_layout(f"Best loss against {x_title.split(' (')[0].lower()}", height=460, uirevision="scaling")
    layout["xaxis"] = style.axis(x_title, log=True)
    layout["yaxis"] = style.axis("Best " + data.objective_label[0].lower() + data.objective_label[1:])
    traces: list[Trace] = []
    data_max = curve_max = None
    y_fmt = ".4f"
    for method in _present_methods(data):
        colour = data.colours[method]
        fit = _fit_for(data, method, "loss_fit")
        rows = _curve_rows(fit) if fit else []
        if fit and rows:
            alpha = _estimate_text(fit.get("alpha"), ".3f")
            name = style.text(method) + (f": α = {alpha}" if alpha else "")
            trust = bool(fit.get("trustworthy", True))
            warnings = [w for w in fit.get("warnings") or [] if isinstance(w, str)]
            if not trust:
                name += " (unreliable)"
            traces += _band_and_line("scaling", method, colour, rows, name, trust, warnings, y_fmt)
            pts = [(x, y) for x, y in ((_num(p[0]), _num(p[1])) for p in fit.get("points") or [] if len(p) >= 2)
                   if x is not None and y is not None]  # fmt: skip
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
            hold = fit.get("holdout")
            if isinstance(hold, dict) and _num(hold.get("x")) is not None and _num(hold.get("actual")) is not None:
                pred, lo, hi = _num(hold.get("predicted")), _num(hold.get("lo")), _num(hold.get("hi"))
                traces.append(
                    {
                        "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "holdout"),
                        "x": [_num(hold["x"])], "y": [_num(hold["actual"])],
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
            symbols.append("circle" if bracketed else "circle-open")
            custom.append([style.text(o["size"]), len(o["values"]), "bracketed" if bracketed else "not bracketed"])
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
    _scale_axis_ticks(layout["xaxis"], kind, _marker_xs(traces))
    if not traces:
        _empty_note(layout, "No bracketed cell yet")
    else:
        if not data.fits:
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
    layout["yaxis"] = style.axis("Optimal peak learning rate", log=True)
    traces: list[Trace] = []
    data_max = curve_max = None
    for method in _present_methods(data):
        colour = data.colours[method]
        fit = _fit_for(data, method, "lr_fit")
        rows = _curve_rows(fit) if fit else []
        if fit and rows:
            exponent = _estimate_text(fit.get("exponent"), ".3f")
            name = style.text(method) + (f": exponent {exponent}" if exponent else "")
            trust = bool(fit.get("trustworthy", True))
            warnings = [w for w in fit.get("warnings") or [] if isinstance(w, str)]
            if not trust:
                name += " (unreliable)"
            traces += _band_and_line("optimal_lr", method, colour, rows, name, trust, warnings, ".3g")
            pts = [(x, y) for x, y in ((_num(p[0]), _num(p[1])) for p in fit.get("points") or [] if len(p) >= 2)
                   if x is not None and y is not None and y > 0]  # fmt: skip
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
            targets = [t for t in fit.get("targets") or [] if isinstance(t, dict)]
            targets = [t for t in targets if _num(t.get("x")) is not None and _num(t.get("lr")) is not None]
            if targets:
                lrs = [_num(t["lr"]) for t in targets]
                his = [_num(t.get("hi")) for t in targets]
                los = [_num(t.get("lo")) for t in targets]
                traces.append(
                    {
                        "type": "scatter", "mode": "markers+text", "uid": uid("optimal_lr", method, "targets"),
                        "x": [_num(t["x"]) for t in targets], "y": lrs,
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
        observed = _observed_by_size(data, method, kind, "best_lr")
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
    _scale_axis_ticks(layout["xaxis"], kind, _marker_xs(traces))
    lrs = [y for t in traces for y in t["y"] if y is not None and y > 0]
    if lrs:
        layout["yaxis"]["tickmode"] = "array"
        layout["yaxis"]["tickvals"], layout["yaxis"]["ticktext"] = log_ticks(min(lrs), max(lrs))
    if not traces:
        _empty_note(layout, "No optimum yet")
    else:
        if not data.fits:
            layout["title"]["subtitle"] = {
                "text": "per cell: interpolated optimum (grid best where none); line: geometric mean over seeds; "
                "run `sweeper fit DIR` for the fitted law",
                "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
            }
            layout["margin"]["t"] = 80
        _extrapolation_shade(layout, data_max, curve_max)
    return {"data": traces, "layout": layout}


# Learning curves ---------------------------------------------------------------------------------


def curve_budget(n_curves: int, total: int = CURVE_VERTEX_BUDGET) -> int:
    """Vertices per curve: the figure's budget shared out, as a power of two in [16, 256]
    (a power of two so the budget, and with it every curve, changes rarely as curves arrive)."""
    per = total // max(n_curves, 1)
    return int(min(256, max(16, 2 ** int(math.log2(max(per, 1))))))


def prepare_curves(curves: pl.DataFrame, max_vertices: int) -> pl.DataFrame:
    """The latest attempt of every curve, downsampled; x is tokens (steps where tokens are missing)."""
    if curves.height == 0:
        return curves.select("point_id", "method", "size", "seed", "lr", "step", "tokens", "train_loss")
    frame = curves.select("point_id", "method", "size", "seed", "lr", "attempt", "step", "tokens", "train_loss")
    frame = frame.filter(pl.col("attempt") == pl.col("attempt").max().over("point_id")).drop("attempt")
    frame = frame.with_columns(pl.coalesce(pl.col("tokens"), pl.col("step")).alias("tokens"))
    return downsample_curves(frame, x="tokens", y="train_loss", key="point_id", max_vertices=max_vertices)


def curve_group_traces(
    data: SweepData, method: str, size: str, frame: pl.DataFrame, states: dict[str, str], axes: tuple[str, str],
) -> list[Trace]:  # fmt: skip
    """The traces of one (method, size): finished and running curves solid, diverged and
    failed ones dotted; curves joined with gaps so a group is two traces, not hundreds."""
    colour = data.size_shade(method, size)
    frame = frame.sort("lr", "seed", "point_id", "tokens")
    pids = frame["point_id"].to_list()
    xs = frame["tokens"].to_list()
    ys = np.round(frame["train_loss"].to_numpy().astype(float), 4)
    out: dict[bool, tuple[list[Any], list[Any], list[Any]]] = {False: ([], [], []), True: ([], [], [])}
    prev = None
    bad = False
    for pid, x, y in zip(pids, xs, ys.tolist()):
        if pid != prev:
            bad = states.get(pid) in ("diverged", "failed")
            bucket = out[bad]
            if bucket[0]:
                bucket[0].append(None)
                bucket[1].append(None)
                bucket[2].append(None)
            prev = pid
            lr = float(pid.rsplit("lr=", 1)[-1]) if "lr=" in pid else None
        bucket = out[bad]
        bucket[0].append(x)
        bucket[1].append(None if y != y else y)
        bucket[2].append(lr)
    traces = []
    for bad, (x, y, lrs) in out.items():
        if not x:
            continue
        traces.append(
            {
                "type": "scatter", "mode": "lines", "uid": uid("learning_curves", method, size, "bad" if bad else "good"),
                "x": x, "y": y, "customdata": lrs, "xaxis": axes[0], "yaxis": axes[1],
                "line": {"color": colour, "width": 1 if bad else 1.3, "dash": "dot" if bad else "solid"},
                "opacity": 0.7 if bad else 0.9, "connectgaps": False,
                "name": style.text(f"{method} {size}") + (" diverged/failed" if bad else ""),
                "legendgroup": f"size:{size}", "showlegend": False,
                "meta": [style.text(method), style.text(size), "diverged or failed" if bad else "finished or running"],
                "hovertemplate": "%{meta[0]} · %{meta[1]}, LR %{customdata:.3g}<br>tokens %{x:.4s}<br>"
                "train loss %{y:.4f}<br>%{meta[2]}<extra></extra>",
            }
        )  # fmt: skip
    return traces


def curve_y_range(values: np.ndarray) -> list[float] | None:
    """The loss axis of the learning curves: from the lowest loss to the 98th percentile of
    the later half of the vertices (the first steps start at ln(vocab), which would squash
    everything else); the early part of every curve runs off the top."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    lo = float(v.min())
    hi = float(np.quantile(v, 0.98))
    if hi <= lo:
        hi = lo + max(abs(lo) * 0.02, 1e-3)
    pad = (hi - lo) * 0.05
    return [round(lo - pad, 4), round(hi + pad, 4)]


def learning_curves_layout(data: SweepData, late_values: np.ndarray) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    layout = style.base_layout("Learning curves", height=430, uirevision="learning_curves")
    layout["title"]["subtitle"] = {
        "text": "training loss of the latest attempt of every point (downsampled, extremes kept); dotted: diverged or failed",
        "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED},
    }
    layout["margin"]["t"] = 90
    layout["legend"]["groupclick"] = "togglegroup"
    layout["legend"]["title"] = {"text": "Size"}
    methods = _present_methods(data)
    refs = _facets(
        layout,
        [(style.text(m), data.colours[m]) for m in methods],
        x_axis=style.axis("Training tokens"),
        y_axis=style.axis("Training loss (nats/token)"),
        cols=3,
        share_x=True,
    )
    y_range = curve_y_range(late_values)
    if y_range:
        layout["yaxis"]["range"] = y_range
    if not methods:
        _empty_note(layout, "No learning curve yet")
    return layout, refs


def late_values(frame: pl.DataFrame, states: dict[str, str]) -> np.ndarray:
    """Loss values from the later half (by tokens) of each curve that did not diverge or
    fail, for the axis range."""
    bad = sorted(pid for pid, st in states.items() if st in ("diverged", "failed"))
    frame = frame.filter(~pl.col("point_id").is_in(bad))
    if frame.height == 0:
        return np.zeros(0)
    late = frame.filter(pl.col("tokens") >= pl.col("tokens").max().over("point_id") * 0.5)
    return late["train_loss"].drop_nulls().to_numpy().astype(float)


def learning_curves(data: SweepData, *, max_vertices: int | None = None) -> FigureDict:
    """Training loss against tokens, one panel per method, one shade per size (see
    `curve_group_traces`); each curve downsampled to `max_vertices` (default: the figure's
    vertex budget shared out over its curves)."""
    n_curves = data.curves["point_id"].n_unique() if data.curves.height else 0
    frame = prepare_curves(data.curves, max_vertices or curve_budget(n_curves))
    states = dict(zip(data.points["point_id"].to_list(), data.points["state"].to_list()))
    layout, refs = learning_curves_layout(data, late_values(frame, states))
    methods = _present_methods(data)
    traces: list[Trace] = _size_legend(data, _present_sizes(data), "learning_curves") if methods else []
    groups = frame.partition_by(["method", "size"], as_dict=True) if frame.height else {}
    for i, method in enumerate(methods):
        for size in data.sizes:
            group = groups.get((method, size))
            if group is not None:
                traces += curve_group_traces(data, method, size, group, states, refs[i])
    return {"data": traces, "layout": layout}


# Status grid -------------------------------------------------------------------------------------


def status_grid(data: SweepData) -> FigureDict:
    """Method × size: the cell status over seeds (colour) and the points done (text)."""
    layout = style.base_layout("Sweep status", height=200, uirevision="status_grid")
    methods, sizes = _present_methods(data), _present_sizes(data)
    layout["height"] = 170 + 46 * max(len(methods), 1)
    layout["xaxis"] = style.axis("Size", type="category", showgrid=False, ticks="", mirror=False, showline=False)
    layout["yaxis"] = style.axis("", type="category", showgrid=False, ticks="", autorange="reversed", mirror=False,
                                 showline=False)  # fmt: skip
    layout["legend"].update({"orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"})
    layout["margin"]["t"] = 90
    if not methods or not sizes:
        layout["xaxis"]["visible"] = layout["yaxis"]["visible"] = False
        _empty_note(layout, "No cell planned yet")
        return {"data": [], "layout": layout}
    layout["yaxis"]["tickmode"] = "array"
    layout["yaxis"]["tickvals"] = [style.text(m) for m in methods]
    layout["yaxis"]["ticktext"] = [f"<span style='color:{data.colours[m]}'><b>{style.text(m)}</b></span>" for m in methods]
    status = group_status(data)
    counts = {
        (r["method"], r["size"]): r
        for r in data.points.group_by("method", "size")
        .agg(
            pl.len().alias("total"),
            pl.col("state").is_in(FINISHED).sum().alias("done"),
            (pl.col("state") == "running").sum().alias("running"),
            (pl.col("state") == "diverged").sum().alias("diverged"),
            (pl.col("state") == "failed").sum().alias("failed"),
        )
        .iter_rows(named=True)
    }
    seeds: dict[tuple[str, str], list[str]] = {}
    for r in data.cells.sort("seed").iter_rows(named=True):
        best = f", LR* {r['interp_lr'] or r['best_lr']:.3g}" if (r["interp_lr"] or r["best_lr"]) else ""
        seeds.setdefault((r["method"], r["size"]), []).append(f"s{r['seed']}: {r['status']}{best}")
    order = list(style.STATUS_COLOURS)
    k = len(order)
    colourscale = []
    for i, name in enumerate(order):
        colourscale += [[i / k, style.STATUS_COLOURS[name]], [(i + 1) / k, style.STATUS_COLOURS[name]]]
    z, text, hover = [], [], []
    for m in methods:
        zr, tr, hr = [], [], []
        for s in sizes:
            st = status.get((m, s))
            c = counts.get((m, s), {})
            if st is None:
                zr.append(None)
                tr.append("")
                hr.append("not planned")
                continue
            zr.append((order.index(st) + 0.5) / k)
            done, total = c.get("done", 0), c.get("total", 0)
            tr.append(f"{st}<br>{done}/{total} pts")
            details = [f"{done} of {total} points done", f"{c.get('running', 0)} running",
                       f"{c.get('diverged', 0)} diverged", f"{c.get('failed', 0)} failed"]  # fmt: skip
            hr.append("<br>".join(details + seeds.get((m, s), [])))
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    traces: list[Trace] = [
        {
            "type": "heatmap", "uid": uid("status_grid", "cells"),
            "x": [style.text(s) for s in sizes], "y": [style.text(m) for m in methods], "z": z,
            "zmin": 0, "zmax": 1, "colorscale": colourscale, "showscale": False,
            "xgap": 3, "ygap": 3, "text": text, "texttemplate": "%{text}",
            "textfont": {"size": style.FONT_SIZE - 2, "color": style.INK},
            "customdata": hover, "hovertemplate": "%{y} · %{x}<br>%{customdata}<extra></extra>",
            "showlegend": False, "name": "status",
        }
    ]  # fmt: skip
    for name in order:
        traces.append(
            {
                "type": "scatter", "mode": "markers", "uid": uid("status_grid", "legend", name),
                "x": [None], "y": [None], "name": name, "hoverinfo": "skip",
                "marker": {"symbol": "square", "size": 13, "color": style.STATUS_COLOURS[name]},
            }
        )  # fmt: skip
    return {"data": traces, "layout": layout}


# Progress ------------------------------------------------------------------------------------


def _time_unit(span_seconds: float) -> tuple[float, str]:
    if span_seconds < 120:
        return 1.0, "s"
    if span_seconds < 2 * 3600:
        return 60.0, "min"
    if span_seconds < 3 * 86400:
        return 3600.0, "h"
    return 86400.0, "days"


def _thin(xs: np.ndarray, ys: np.ndarray, limit: int = 400) -> tuple[list[float], list[float]]:
    """At most `limit` vertices of a monotone step line (the last one always kept)."""
    if xs.size > limit:
        keep = np.unique(np.append(np.linspace(0, xs.size - 1, limit).round().astype(int), xs.size - 1))
        xs, ys = xs[keep], ys[keep]
    return [round(float(v), 6) for v in xs], [float(v) for v in ys]


def progress(data: SweepData) -> FigureDict:
    """Points finished, compute spent (FLOPs of finished points: flops_per_token × tokens)
    and training throughput (tokens/s over all running points) against elapsed time."""
    layout = style.base_layout("Sweep progress", height=640, uirevision="progress")
    layout["legend"].update({"orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"})
    layout["margin"]["t"] = 90
    pts = data.points.filter(pl.col("started_at").is_finite())
    if pts.height == 0:
        layout["xaxis"] = style.axis("Elapsed time")
        layout["yaxis"] = style.axis("Points finished")
        _empty_note(layout, "No point has started yet")
        return {"data": [], "layout": layout}
    t0 = float(pts["started_at"].min())
    stamps = pts.select(pl.max_horizontal("started_at", "finished_at")).to_series()
    t_end = float(stamps.max())
    scale, unit = _time_unit(t_end - t0)
    done = pts.filter(pl.col("state").is_in(FINISHED) & pl.col("finished_at").is_finite()).with_columns(
        (pl.col("flops_per_token") * pl.col("tokens").cast(pl.Float64)).fill_null(0.0).alias("flop")
    )
    total_flop = float(done["flop"].sum() or 0.0)
    flop_scale, flop_unit = next(
        ((f, u) for f, u in ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP")) if total_flop >= f),
        (1.0, "FLOP"),
    )
    titles = ["Points done", f"Compute ({flop_unit})", "Tokens/s"]
    gap = 0.07
    h = (1 - 2 * gap) / 3
    for i, title in enumerate(titles):
        k = i + 1
        y1 = 1 - i * (h + gap)
        layout[_axis_name("yaxis", k)] = style.axis(title, domain=[round(y1 - h, 6), round(y1, 6)],
                                                    anchor=_ref("xaxis", k), rangemode="tozero")  # fmt: skip
        xa = style.axis(f"Elapsed time ({unit})" if k == 3 else "", anchor=_ref("yaxis", k))
        if k > 1:
            xa["matches"] = "x"
        if k < 3:
            xa["showticklabels"] = False
        layout[_axis_name("xaxis", k)] = xa
    traces: list[Trace] = []
    groups = [(m, done.filter(pl.col("method") == m)) for m in _present_methods(data)]
    groups.append(("all methods", done))
    for name, frame in groups:
        frame = frame.sort("finished_at", "point_id")
        colour = data.colours.get(name, style.INK)
        t = (np.concatenate([[t0], frame["finished_at"].to_numpy()]) - t0) / scale
        for k, values, fmt in (
            (1, np.arange(frame.height + 1, dtype=float), "%{y:d} points"),
            (2, np.concatenate([[0.0], np.cumsum(frame["flop"].to_numpy())]) / flop_scale, "%{y:.3g} " + flop_unit),
        ):
            xs, ys = _thin(t, values)
            traces.append(
                {
                    "type": "scatter", "mode": "lines", "uid": uid("progress", name, k),
                    "x": xs, "y": ys, "xaxis": _ref("xaxis", k), "yaxis": _ref("yaxis", k),
                    "line": {"color": colour, "width": 2.5 if name == "all methods" else 1.6, "shape": "hv",
                             "dash": "dash" if name == "all methods" else "solid"},
                    "name": style.text(name), "legendgroup": name, "showlegend": k == 1,
                    "meta": style.text(name),
                    "hovertemplate": "%{meta}<br>%{x:.1f} " + unit + "<br>" + fmt + "<extra></extra>",
                }
            )  # fmt: skip
    # Throughput: each point trains at tokens / (end - start) over [start, end]; running
    # points up to the latest time in the store.
    starts = pts["started_at"].to_numpy().astype(float)
    ends = pts["finished_at"].fill_null(t_end).to_numpy().astype(float)
    ends = np.where(np.isfinite(ends), ends, t_end)
    tokens = pts["tokens"].fill_null(0).to_numpy().astype(float)
    rates = np.where(ends > starts, tokens / np.maximum(ends - starts, 1e-9), 0.0)
    bins = 120
    edges = np.linspace(t0, max(t_end, t0 + 1.0), bins + 1)
    overlap = np.clip(np.minimum(ends[:, None], edges[None, 1:]) - np.maximum(starts[:, None], edges[None, :-1]), 0, None)
    rate = (overlap * rates[:, None]).sum(axis=0) / np.diff(edges)
    centres = (edges[:-1] + edges[1:]) / 2
    traces.append(
        {
            "type": "scatter", "mode": "lines", "uid": uid("progress", "throughput"),
            "x": [round(float(v), 6) for v in (centres - t0) / scale], "y": [round(float(v), 3) for v in rate],
            "xaxis": "x3", "yaxis": "y3", "line": {"color": style.INK, "width": 1.6},
            "fill": "tozeroy", "fillcolor": "rgba(34,34,34,0.08)", "name": "throughput", "showlegend": False,
            "hovertemplate": "%{x:.1f} " + unit + "<br>%{y:.3s} tokens/s<extra></extra>",
        }
    )  # fmt: skip
    return {"data": traces, "layout": layout}


# Registry ------------------------------------------------------------------------------------

FIGURES: dict[str, tuple[str, Callable[[SweepData], FigureDict]]] = {
    "loss_vs_lr": ("Final loss against learning rate", loss_vs_lr),
    "status": ("Sweep status", status_grid),
    "scaling": ("Best loss against size", scaling),
    "optimal_lr": ("Optimal learning rate against size", optimal_lr),
    "learning_curves": ("Learning curves", learning_curves),
    "progress": ("Sweep progress", progress),
}


def all_figures(data: SweepData) -> dict[str, FigureDict]:
    return {name: build(data) for name, (_, build) in FIGURES.items()}


def to_figure(spec: FigureDict) -> Any:
    """A validated `plotly.graph_objects.Figure` of a figure dict (raises on any bad property)."""
    import plotly.graph_objects as go

    return go.Figure(spec)
