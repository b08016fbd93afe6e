"""Final loss against learning rate: the bracketing picture of every cell."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from dashboards import style
from dashboards.data import SweepData
from dashboards.figures.seeds import seed_curve_traces
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


def on_curve(frame: pl.DataFrame | None, lr: float | None, fallback: float | None) -> float | None:
    """The drawn (seed-mean) loss curve at `lr`, linear in log LR; `fallback` off the curve."""
    if frame is None or lr is None or not lr > 0 or frame.height < 2:
        return fallback
    xs, ys = np.log(frame["lr"].to_numpy()), frame["mean"].to_numpy()
    if not (xs[0] <= math.log(lr) <= xs[-1]):
        return fallback
    return float(np.interp(math.log(lr), xs, ys))


def loss_vs_lr(data: SweepData, *, facet: str = "method") -> FigureDict:
    """Final objective against LR: one panel per method (lines per size, light to dark with
    size) or per size (lines per method); mean over seeds with the seeds' range as error
    bars, and with two or more seeds each seed's own curve (thin, `dashboards.figures.seeds`); diverged points as × on the top edge, stalled ones (trained to the end at the loss of
    predicting by token frequencies) as □ there, points above the axis as ▵ there (true value
    on hover), running points as ○ on the bottom edge; per cell the best grid point (○) and
    the interpolated optimum (★); line style gives the cell status (solid bracketed, dashed
    edge, dotted still running)."""
    if facet not in ("method", "size"):
        raise ValueError("facet must be 'method' or 'size'")
    layout = style.base_layout("Final loss against learning rate", height=430, uirevision="loss_vs_lr")
    layout["title"]["subtitle"] = {
        "text": "solid: optimum bracketed · dashed: optimum at the grid's edge · dotted: running · "
        "★ interpolated optimum · ○ best grid point · × diverged · □ stalled · ▵ off scale",
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
    drawn = points.filter(pl.col("state").is_in(["ok", "diverged", "stalled", "running"]))
    by_panel = drawn.partition_by(panel_col, as_dict=True)
    cells_by_panel = data.cells.partition_by(panel_col, as_dict=True)
    for k, panel in enumerate(panels, start=1):
        shown = by_panel.get((panel,))
        lr_values = shown["lr"].drop_nulls().filter(shown["lr"].drop_nulls() > 0) if shown is not None else None
        if lr_values is not None and len(lr_values):
            ticks, labels = log_ticks(float(lr_values.min()), float(lr_values.max()))
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
            traces += seed_curve_traces(data, method, size, colour, xref, yref, facet)  # thin: one per seed
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

        in_panel = by_panel.get((panel,), drawn.clear())
        line_col = "size" if facet == "method" else "method"

        def colours_of(frame: pl.DataFrame) -> list[str]:
            pairs = zip(frame["method"].to_list(), frame["size"].to_list())
            if facet == "method":
                return [data.size_shade(m, sz) for m, sz in pairs]
            return [data.colours.get(m, style.INK) for m, _ in pairs]

        def add_markers(label: str, frame: pl.DataFrame, symbol: str, y: list[float], size: int,
                        custom: list[list[Any]], template: str, extra: dict[str, Any] | None = None) -> None:  # fmt: skip
            if frame.height == 0:
                return
            names = [style.text(v) for v in frame[line_col].to_list()]
            trace: Trace = {
                "type": "scatter", "mode": "markers", "uid": uid("loss_vs_lr", facet, panel, label),
                "x": nums(frame["lr"]), "y": y, "xaxis": xref, "yaxis": yref,
                "name": label, "legendgroup": f"marker:{label}", "showlegend": label not in shown_legend,
                "marker": {"symbol": symbol, "size": size, "color": colours_of(frame), "line": {"width": 2}},
                "meta": style.text(panel), "customdata": [[n, *c] for n, c in zip(names, custom)],
                "hovertemplate": template, "cliponaxis": False, **(extra or {}),
            }  # fmt: skip
            if not symbol.endswith("open"):
                trace["marker"]["line"] = {"width": 1, "color": style.INK}
            traces.append(trace)
            shown_legend.add(label)

        # Seeds are summarised per (method, size, LR): a hundred seeds must not mean a
        # hundred overlapping markers (and a slow page).
        panel_stats = stats.filter(pl.col(panel_col) == panel)
        off = panel_stats.filter(pl.col("mean") > top)
        add_markers("off scale", off, style.OFFSCALE_SYMBOL, [y_top_marker] * off.height, 9,
                    [[n, v] for n, v in zip(off["n"].to_list(), nums(off["mean"]))],
                    "%{meta} · %{customdata[0]}<br>LR %{x:.3g}<br>" + short
                    + " %{customdata[2]:.4f} (mean of %{customdata[1]} seed(s); above the axis)<extra></extra>")  # fmt: skip
        div = (
            in_panel.filter(pl.col("state") == "diverged")
            .group_by("method", "size", "lr")
            .agg(
                pl.len().alias("n"), pl.col("diverged_step").min().alias("step"), pl.col("reason").drop_nulls().first()
            )
            .sort("method", "size", "lr")
        )
        add_markers("diverged", div, style.DIVERGED_SYMBOL, [y_top_marker] * div.height, 9,
                    [[n, st if st is not None else "?", style.text(r or "")]
                     for n, st, r in zip(div["n"].to_list(), div["step"].to_list(), div["reason"].to_list())],
                    "%{meta} · %{customdata[0]}<br>LR %{x:.3g}<br>diverged in %{customdata[1]} seed(s), first at step "
                    "%{customdata[2]}<br>%{customdata[3]}<extra></extra>")  # fmt: skip
        stalled = (
            in_panel.filter(pl.col("state") == "stalled")
            .group_by("method", "size", "lr")
            .agg(pl.len().alias("n"), pl.col("loss").mean().alias("loss"), pl.col("reason").drop_nulls().first())
            .sort("method", "size", "lr")
        )
        add_markers("stalled", stalled, style.STALLED_SYMBOL, [y_top_marker] * stalled.height, 9,
                    [[n, num(v), style.text(r or "")]
                     for n, v, r in zip(stalled["n"].to_list(), stalled["loss"].to_list(), stalled["reason"].to_list())],
                    "%{meta} · %{customdata[0]}<br>LR %{x:.3g}<br>stalled in %{customdata[1]} seed(s): final loss "
                    "%{customdata[2]:.4f}, no better than predicting by token frequencies<br>%{customdata[3]}"
                    "<extra></extra>")  # fmt: skip
        run = in_panel.filter(pl.col("state") == "running").sort("method", "size", "lr", "seed", "point_id")
        add_markers("running", run, "circle-open", [y_bottom_marker] * run.height, 9,
                    [[sd, st or 0] for sd, st in zip(run["seed"].to_list(), run["steps"].to_list())],
                    "%{meta} · %{customdata[0]} s%{customdata[1]}<br>LR %{x:.3g}<br>running, step %{customdata[2]}"
                    "<extra></extra>")  # fmt: skip

        cells = cells_by_panel.get((panel,), data.cells.clear())
        for label, lr_col, obj_col, symbol, size in (
            ("best grid point", "best_lr", "best_objective", style.GRID_BEST_SYMBOL, 12),
            ("interpolated optimum", "interp_lr", "interp_objective", style.INTERP_SYMBOL, 11),
        ):
            # per (method, size): geometric mean of the seeds' optimal LRs, their range as an
            # error bar, mean objective
            opt = (
                # a fixed-recipe cell claims no optimum: its one point is drawn, no star
                cells.filter(pl.col(lr_col).is_finite() & (pl.col(lr_col) > 0) & pl.col(obj_col).is_finite()
                             & (pl.col("status") != "fixed"))
                .group_by("method", "size")
                .agg(
                    pl.col(lr_col).log().mean().exp().alias("lr"),
                    pl.col(lr_col).min().alias("lo"),
                    pl.col(lr_col).max().alias("hi"),
                    pl.col(obj_col).mean().alias("obj"),
                    pl.len().alias("n"),
                    (pl.col("status") == "bracketed").sum().alias("bracketed"),
                )
                .sort("method", "size")
            )
            lr_mean = opt["lr"].to_numpy()
            extra = {}
            if opt.height and int(opt["n"].max()) > 1:
                extra = {"error_x": {"type": "data", "symmetric": False, "array": nums(opt["hi"].to_numpy() - lr_mean),
                                     "arrayminus": nums(lr_mean - opt["lo"].to_numpy()), "thickness": 1.5, "width": 4,
                                     "color": style.INK}}  # fmt: skip
            y_at = nums(opt["obj"])
            if lr_col == "interp_lr":
                # The parabola's vertex value is a model, not a measured loss: next to a divergence
                # cliff it undershoots every measured point. The star marks the LR on the drawn
                # curve; the parabola's minimum is in the hover text.
                y_at = [on_curve(by_group.get((m, sz)), x, v) for m, sz, x, v in
                        zip(opt["method"].to_list(), opt["size"].to_list(), nums(opt["lr"]), y_at)]  # fmt: skip
            add_markers(label, opt, symbol, [min(max(v, lo - 1.5 * pad), y_top_marker) for v in y_at], size,
                        [[n, b, a, z, o] for n, b, a, z, o in zip(opt["n"].to_list(), opt["bracketed"].to_list(),
                                                                  nums(opt["lo"]), nums(opt["hi"]), nums(opt["obj"]))],
                        f"{label}<br>" + "%{meta} · %{customdata[0]}<br>LR %{x:.3g} (%{customdata[1]} seed(s): "
                        "%{customdata[3]:.3g} – %{customdata[4]:.3g}; %{customdata[2]} bracketed)<br>" + short
                        + (" (parabola minimum)" if lr_col == "interp_lr" else "")
                        + " %{customdata[5]:.4f}<extra></extra>", extra)  # fmt: skip
    return {"data": traces, "layout": layout}
