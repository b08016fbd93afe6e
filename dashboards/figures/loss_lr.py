"""Final loss against learning rate: the bracketing picture of every cell."""

from __future__ import annotations

import polars as pl

from dashboards import style
from dashboards.data import SweepData
from dashboards.figures.common import (
    STATUS_DASH,
    FigureDict,
    Trace,
    axis_name,
    empty_note,
    facets,
    group_status,
    log_ticks,
    num,
    nums,
    present_methods,
    present_sizes,
    size_legend,
    uid,
    y_window,
)


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
    methods, sizes = present_methods(data), present_sizes(data)
    panels = methods if facet == "method" else sizes
    titles = [(style.text(p), data.colours.get(p, style.INK) if facet == "method" else style.INK) for p in panels]
    refs = facets(
        layout,
        titles,
        x_axis=style.axis("Peak learning rate", log=True),
        y_axis=style.axis(data.objective_label),
        cols=3,
    )
    traces: list[Trace] = []
    if not panels:
        empty_note(layout, "No results yet")
        return {"data": traces, "layout": layout}

    points = data.points
    ok = points.filter((pl.col("state") == "ok") & pl.col("objective").is_finite())
    window = y_window(ok["objective"].to_list())
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
        traces += size_legend(data, sizes, "loss_vs_lr")
    panel_col = "method" if facet == "method" else "size"
    for k, panel in enumerate(panels, start=1):
        shown = points.filter((pl.col(panel_col) == panel) & pl.col("state").is_in(["ok", "diverged", "running"]))
        lr_values = [v for v in shown["lr"].to_list() if v is not None and v > 0]
        if lr_values:
            ticks, labels = log_ticks(min(lr_values), max(lr_values))
            layout[axis_name("xaxis", k)].update({"tickmode": "array", "tickvals": ticks, "ticktext": labels})

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
                "x": nums(frame["lr"]),
                "y": nums(frame["mean"]),
                "xaxis": xref,
                "yaxis": yref,
                "name": style.text(method if facet == "size" else f"{method} {size}"),
                "legendgroup": f"size:{size}" if facet == "method" else f"method:{method}",
                "showlegend": facet == "size" and method not in shown_methods,
                "line": {"color": colour, "width": 2, "dash": STATUS_DASH.get(st, "dot")},
                "marker": {"color": colour, "size": 6},
                "meta": [style.text(method), style.text(size), short, st],
                "customdata": [[c, num(a), num(b)] for c, a, b in zip(n, frame["min"], frame["max"])],
                "hovertemplate": "%{meta[0]} · %{meta[1]} (%{meta[3]})<br>LR %{x:.3g}<br>%{meta[2]} %{y:.4f}"
                "<br>seeds %{customdata[0]}: %{customdata[1]:.4f} – %{customdata[2]:.4f}<extra></extra>",
            }
            shown_methods.add(method)
            if max(n) > 1:
                mean = frame["mean"].to_numpy()
                trace["error_y"] = {
                    "type": "data",
                    "symmetric": False,
                    "array": nums(frame["max"].to_numpy() - mean),
                    "arrayminus": nums(mean - frame["min"].to_numpy()),
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
             lambda r: [style.text(r["size"] if facet == "method" else r["method"]), r["seed"], num(r["objective"])]),
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
                    "x": nums(frame["lr"]),
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
                    "x": nums(frame[lr_col]),
                    "y": [min(max(v, lo - 1.5 * pad), y_top_marker) for v in nums(frame[obj_col])],
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
                         num(r[obj_col])]
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
