"""The sweep's figures as pure functions: `SweepData` (polars frames + fits dict) in, a Plotly
figure out, as a plain JSON-able dict (`{"data": [...], "layout": {...}}`; `to_figure` wraps
it in a validated `plotly.graph_objects.Figure` for export).

Plain dicts rather than `go.Figure` objects because the live dashboard serialises traces
one by one and sends only those that changed; building validated objects for a hundred
thousand curve vertices on every update would cost more than the update itself.

Every trace has a stable `uid` derived from what it shows, every layout a `uirevision`, so
Plotly keeps zoom, legend toggles and selections across updates; inputs are sorted and no
figure reads a clock, so the same store always gives the same bytes. Names from the
sweep's YAML are escaped (`style.text`) wherever Plotly would render HTML.

Figures (`FIGURES`, in the dashboard's order): the method × size status grid, loss against
LR, best loss against scale with the fitted power law, optimal LR against scale with its
fit and extrapolated targets, the paired leads of each method over the first with t-intervals,
learning curves, and sweep progress.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from dashboards.data import SweepData
from dashboards.figures.common import (
    STATIC_WIDTH,
    FigureDict,
    group_status,
    log_ticks,
    uid,
)
from dashboards.figures.curves import (
    CURVE_VERTEX_BUDGET,
    MAX_CURVES,
    best_point_ids,
    curve_budget,
    curve_group_traces,
    late_values,
    learning_curves,
    learning_curves_layout,
    prepare_curves,
    shown_points,
)
from dashboards.figures.loss_lr import loss_vs_lr
from dashboards.figures.progress import progress
from dashboards.figures.scaling import optimal_lr, scaling
from dashboards.figures.seeds import leads
from dashboards.figures.status import status_grid

FIGURES: dict[str, tuple[str, Callable[[SweepData], FigureDict]]] = {
    "status": ("Sweep status", status_grid),
    "loss_vs_lr": ("Final loss against learning rate", loss_vs_lr),
    "scaling": ("Best loss against size", scaling),
    "optimal_lr": ("Optimal learning rate against size", optimal_lr),
    "leads": ("Lead over the first method, paired by seed", leads),
    "learning_curves": ("Learning curves", learning_curves),
    "progress": ("Sweep progress", progress),
}


def all_figures(data: SweepData) -> dict[str, FigureDict]:
    return {name: build(data) for name, (_, build) in FIGURES.items()}


def to_figure(spec: FigureDict) -> Any:
    """A validated `plotly.graph_objects.Figure` of a figure dict (raises on any bad property).
    The dict is copied first: `go.Figure` consumes keys of the dicts it is given."""
    import plotly.graph_objects as go  # plotly's figure classes load slowly; only export and tests validate

    return go.Figure(copy.deepcopy(spec))


__all__ = [
    "CURVE_VERTEX_BUDGET", "FIGURES", "MAX_CURVES", "best_point_ids", "shown_points", "STATIC_WIDTH", "FigureDict", "all_figures", "curve_budget", "curve_group_traces",
    "group_status", "late_values", "leads", "learning_curves", "learning_curves_layout", "log_ticks", "loss_vs_lr",
    "optimal_lr", "prepare_curves", "progress", "scaling", "status_grid", "to_figure", "uid",
]  # fmt: skip
