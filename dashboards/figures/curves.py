"""Learning curves: training loss against tokens, one panel per method, one shade per size.

Drawing cost grows with vertices, so the figure has a vertex budget shared out over its
curves (`curve_budget`) and each curve is downsampled to its share with every extreme
kept (`dashboards.downsample`). Past `MAX_CURVES` curves a panel of lines is unreadable
anyway: the figure then shows every running point and the best point of every cell
(`shown_points`), says so, and the filters narrow it to show everything. Curves are
grouped per (method, size) into two traces each, so the live dashboard redraws a group,
not a figure, when its points report.
"""

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
from sweeper.core.ids import point_id
from sweeper.core.states import FINISHED_STATES, PointState

CURVE_VERTEX_BUDGET = 60_000  # vertices per figure: a browser draws this in a few hundred ms
MAX_CURVES = 1_500  # beyond this, show running points and each cell's best point
BAD_STATES = tuple(s.value for s in FINISHED_STATES if s is not PointState.OK)  # finished without a result


def curve_budget(n_curves: int, total: int = CURVE_VERTEX_BUDGET) -> int:
    """Vertices per curve: the figure's budget shared out, as a power of two in [16, 256]
    (a power of two so the budget, and with it every curve, changes rarely as curves arrive)."""
    per = total // max(min(n_curves, MAX_CURVES), 1)
    return int(min(256, max(16, 2 ** int(math.log2(max(per, 1))))))


def prepare_curves(curves: pl.DataFrame, max_vertices: int) -> pl.DataFrame:
    """The latest attempt of every curve, downsampled; x is tokens (steps where tokens are missing)."""
    columns = ["point_id", "method", "size", "seed", "lr", "tokens", "train_loss"]
    if curves.height == 0:
        return pl.DataFrame(schema={c: curves.schema.get(c, pl.Float64) for c in columns})
    frame = curves.select("point_id", "method", "size", "seed", "lr", "attempt", "step", "tokens", "train_loss")
    frame = frame.filter(pl.col("attempt") == pl.col("attempt").max().over("point_id"))
    frame = frame.with_columns(pl.coalesce(pl.col("tokens"), pl.col("step")).alias("tokens")).select(columns)
    return downsample_curves(frame, x="tokens", y="train_loss", key="point_id", max_vertices=max_vertices)


def best_point_ids(cells: pl.DataFrame) -> set[str]:
    """The point id of every cell's best grid point."""
    rows = cells.filter(pl.col("best_lr").is_not_null()).select("cell_id", "best_lr").iter_rows()
    return {point_id(cell, lr) for cell, lr in rows}


def shown_points(n_curves: int, points: pl.DataFrame, cells: pl.DataFrame) -> set[str] | None:
    """None (draw every curve) up to MAX_CURVES curves; beyond, the running points and every
    cell's best point."""
    if n_curves <= MAX_CURVES:
        return None
    running = set(points.filter(pl.col("state") == "running")["point_id"].to_list())
    return running | best_point_ids(cells)


def _with_gaps(frame: pl.DataFrame) -> tuple[list[Any], list[Any], list[Any]]:
    """x, y and LR lists of the frame's curves joined with a null between curves."""
    pids = frame["point_id"].to_numpy()
    starts = np.flatnonzero(pids[1:] != pids[:-1]) + 1
    x = np.insert(frame["tokens"].to_numpy().astype(float), starts, np.nan)
    y = np.insert(np.round(frame["train_loss"].fill_null(np.nan).to_numpy().astype(float), 4), starts, np.nan)
    lr = np.insert(frame["lr"].to_numpy().astype(float), starts, np.nan)
    xs = [None if v != v else int(v) if v.is_integer() else v for v in x.tolist()]
    ys = [None if v != v else v for v in y.tolist()]
    lrs = [None if v != v else float(f"{v:.4g}") for v in lr.tolist()]
    return xs, ys, lrs


def curve_group_traces(
    data: SweepData, method: str, size: str, frame: pl.DataFrame, states: dict[str, str], axes: tuple[str, str],
) -> list[Trace]:  # fmt: skip
    """The traces of one (method, size): finished and running curves solid, diverged, stalled and
    failed ones dotted; curves joined with gaps so a group is two traces, not hundreds."""
    colour = data.size_shade(method, size)
    if frame.height == 0:
        return []
    bad_ids = sorted(pid for pid in frame["point_id"].unique().to_list() if states.get(pid) in BAD_STATES)
    frame = frame.with_columns(pl.col("point_id").is_in(bad_ids).alias("_bad")).sort(
        "_bad", "lr", "seed", "point_id", "tokens"
    )
    traces = []
    for bad in (False, True):
        part = frame.filter(pl.col("_bad") == bad)
        if part.height == 0:
            continue
        x, y, lrs = _with_gaps(part)
        traces.append(
            {
                "type": "scatter", "mode": "lines", "uid": uid("learning_curves", method, size, "bad" if bad else "good"),
                "x": x, "y": y, "customdata": lrs, "xaxis": axes[0], "yaxis": axes[1],
                "line": {"color": colour, "width": 1 if bad else 1.3, "dash": "dot" if bad else "solid"},
                "opacity": 0.7 if bad else 0.9, "connectgaps": False,
                "name": style.text(f"{method} {size}") + (" diverged/stalled/failed" if bad else ""),
                "legendgroup": f"size:{size}", "showlegend": False,
                "meta": [style.text(method), style.text(size),
                         "diverged, stalled or failed" if bad else "finished or running"],
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


def learning_curves_layout(
    data: SweepData, late_values: np.ndarray, *, shown: int | None = None, total: int = 0
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The layout (and each method's axes); `shown` of `total` curves when only some are drawn."""
    layout = style.base_layout("Learning curves", height=430, uirevision="learning_curves")
    what = (
        f"{shown} of {total} curves: every running point and each cell's best point (filter to see all)"
        if shown is not None
        else "the latest attempt of every point"
    )
    layout["title"]["subtitle"] = {
        "text": f"training loss, {what}; downsampled with extremes kept; dotted: diverged, stalled or failed",
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
        y_axis=style.axis("Training loss (cross-entropy)" if data.is_classification else "Training loss (nats/token)"),
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
    if frame.height == 0:
        return np.zeros(0)
    bad = sorted(pid for pid in frame["point_id"].unique().to_list() if states.get(pid) in BAD_STATES)
    frame = frame.filter(~pl.col("point_id").is_in(bad))
    late = frame.filter(pl.col("tokens") >= pl.col("tokens").max().over("point_id") * 0.5)
    return late["train_loss"].drop_nulls().to_numpy().astype(float)


def learning_curves(data: SweepData, *, max_vertices: int | None = None) -> FigureDict:
    """Training loss against tokens, one panel per method, one shade per size (see
    `curve_group_traces`); each curve downsampled to `max_vertices` (default: the figure's
    vertex budget shared out over its curves)."""
    n_curves = data.curves["point_id"].n_unique() if data.curves.height else 0
    shown = shown_points(n_curves, data.points, data.cells)
    curves = data.curves if shown is None else data.curves.filter(pl.col("point_id").is_in(sorted(shown)))
    frame = prepare_curves(curves, max_vertices or curve_budget(n_curves))
    states = dict(zip(data.points["point_id"].to_list(), data.points["state"].to_list()))
    n_shown = None if shown is None else (frame["point_id"].n_unique() if frame.height else 0)
    layout, refs = learning_curves_layout(data, late_values(frame, states), shown=n_shown, total=n_curves)
    methods = present_methods(data)
    traces: list[Trace] = size_legend(data, present_sizes(data), "learning_curves") if methods else []
    groups = frame.partition_by(["method", "size"], as_dict=True) if frame.height else {}
    for i, method in enumerate(methods):
        for size in data.sizes:
            group = groups.get((method, size))
            if group is not None:
                traces += curve_group_traces(data, method, size, group, states, refs[i])
    return {"data": traces, "layout": layout}
