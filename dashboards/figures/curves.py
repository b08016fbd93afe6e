"""Learning curves: training loss against tokens, downsampled, grouped per (method, size)
so the live dashboard can redraw one group at a time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from dashboards import style
from dashboards.data import SweepData
from dashboards.downsample import downsample_curves
from dashboards.figures.common import (
    FigureDict,
    Trace,
    empty_note,
    facets,
    present_methods,
    present_sizes,
    size_legend,
    uid,
)

CURVE_VERTEX_BUDGET = 150_000  # learning-curve vertices per figure, shared by all curves


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
    methods = present_methods(data)
    refs = facets(
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
        empty_note(layout, "No learning curve yet")
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
    methods = present_methods(data)
    traces: list[Trace] = size_legend(data, present_sizes(data), "learning_curves") if methods else []
    groups = frame.partition_by(["method", "size"], as_dict=True) if frame.height else {}
    for i, method in enumerate(methods):
        for size in data.sizes:
            group = groups.get((method, size))
            if group is not None:
                traces += curve_group_traces(data, method, size, group, states, refs[i])
    return {"data": traces, "layout": layout}
