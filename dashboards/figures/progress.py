"""Sweep progress: points done, compute spent and throughput against elapsed time."""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboards import style
from dashboards.data import SweepData
from dashboards.figures.common import (
    FINISHED,
    FigureDict,
    Trace,
    axis_name,
    empty_note,
    present_methods,
    ref,
    uid,
)


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
        empty_note(layout, "No point has started yet")
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
        layout[axis_name("yaxis", k)] = style.axis(title, domain=[round(y1 - h, 6), round(y1, 6)],
                                                    anchor=ref("xaxis", k), rangemode="tozero")  # fmt: skip
        xa = style.axis(f"Elapsed time ({unit})" if k == 3 else "", anchor=ref("yaxis", k))
        if k > 1:
            xa["matches"] = "x"
        if k < 3:
            xa["showticklabels"] = False
        layout[axis_name("xaxis", k)] = xa
    traces: list[Trace] = []
    total = "\x00all"  # the key of the all-methods line (no method can be named so)
    groups = [(m, done.filter(pl.col("method") == m)) for m in present_methods(data)]
    groups.append((total, done))
    end = (t_end - t0) / scale
    for name, frame in groups:
        frame = frame.sort("finished_at", "point_id")
        is_total = name == total
        label = "all methods" if is_total else style.text(name)
        colour = style.INK if is_total else data.colours.get(name, style.INK)
        # from the start to the latest event, so a line that stopped rising still reaches the end
        t = np.concatenate([[0.0], (frame["finished_at"].to_numpy() - t0) / scale, [end]])
        counts = np.arange(frame.height + 1, dtype=float)
        flops = np.concatenate([[0.0], np.cumsum(frame["flop"].to_numpy())]) / flop_scale
        for k, values, fmt in (
            (1, np.append(counts, counts[-1]), "%{y:d} points"),
            (2, np.append(flops, flops[-1]), "%{y:.3g} " + flop_unit),
        ):
            xs, ys = _thin(t, values)
            traces.append(
                {
                    "type": "scatter", "mode": "lines", "uid": uid("progress", name, k),
                    "x": xs, "y": ys, "xaxis": ref("xaxis", k), "yaxis": ref("yaxis", k),
                    "line": {"color": colour, "width": 2.5 if is_total else 1.6, "shape": "hv",
                             "dash": "dash" if is_total else "solid"},
                    "name": label, "legendgroup": name, "showlegend": k == 1,
                    "meta": label,
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
    overlap = np.clip(
        np.minimum(ends[:, None], edges[None, 1:]) - np.maximum(starts[:, None], edges[None, :-1]), 0, None
    )
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
