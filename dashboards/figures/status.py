"""The method × size status grid: bracketing status over seeds and points done; for a sweep that scores
LAMBADA (`eval.tasks`), each cell's best point's LAMBADA perplexity beside its validation loss."""

from __future__ import annotations

import math

import polars as pl

from dashboards import style
from dashboards.data import SweepData
from sweeper.core.ids import canonical
from dashboards.figures.common import (
    FINISHED,
    FigureDict,
    Trace,
    empty_note,
    group_status,
    present_methods,
    present_sizes,
    uid,
)


STALL_MARK = "□ "  # as the loss-vs-LR plot marks a stalled point (style.STALLED_SYMBOL)


def status_grid(data: SweepData) -> FigureDict:
    """Method × size: the cell status over seeds (colour) and the points done, diverged and stalled (text,
    summed over the seeds, which the cell names)."""
    layout = style.base_layout("Sweep status (points summed over seeds)", height=200, uirevision="status_grid")
    methods, sizes = present_methods(data), present_sizes(data)
    layout["height"] = 170 + 46 * max(len(methods), 1)
    layout["xaxis"] = style.axis("Size", type="category", showgrid=False, ticks="", mirror=False, showline=False)
    layout["yaxis"] = style.axis("", type="category", showgrid=False, ticks="", autorange="reversed", mirror=False,
                                 showline=False)  # fmt: skip
    layout["legend"].update({"orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"})
    layout["margin"]["t"] = 90
    if not methods or not sizes:
        layout["xaxis"]["visible"] = layout["yaxis"]["visible"] = False
        empty_note(layout, "No cell planned yet")
        return {"data": [], "layout": layout}
    layout["yaxis"]["tickmode"] = "array"
    layout["yaxis"]["tickvals"] = [style.text(m) for m in methods]
    layout["yaxis"]["ticktext"] = [
        f"<span style='color:{data.colours[m]}'><b>{style.text(m)}</b></span>" for m in methods
    ]
    status = group_status(data)
    counts = {
        (r["method"], r["size"]): r
        for r in data.points.group_by("method", "size")
        .agg(
            pl.len().alias("total"),
            pl.col("state").is_in(FINISHED).sum().alias("done"),
            (pl.col("state") == "running").sum().alias("running"),
            (pl.col("state") == "diverged").sum().alias("diverged"),
            (pl.col("state") == "stalled").sum().alias("stalled"),
            (pl.col("state") == "failed").sum().alias("failed"),
            (pl.col("state") == "infra_failed").sum().alias("infra_failed"),
        )
        .iter_rows(named=True)
    }
    lambada = best_lambada(data)
    seeds: dict[tuple[str, str], list[str]] = {}
    for r in data.cells.sort("seed").iter_rows(named=True):
        lr_name = "recipe LR" if r["status"] == "fixed" else "LR*"  # a fixed recipe claims no optimum
        best = f", {lr_name} {r['interp_lr'] or r['best_lr']:.3g}" if (r["interp_lr"] or r["best_lr"]) else ""
        if r["cell_id"] in lambada:
            loss, ppl = lambada[r["cell_id"]]
            best += f", loss {loss:.4f}, LAMBADA ppl {ppl:.4g}"
        seeds.setdefault((r["method"], r["size"]), []).append(f"s{r['seed']}: {r['status']}{best}")
    ppl_by_group: dict[tuple[str, str], list[float]] = {}
    for r in data.cells.iter_rows(named=True):
        if r["cell_id"] in lambada:
            ppl_by_group.setdefault((r["method"], r["size"]), []).append(lambada[r["cell_id"]][1])
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
            ppl = ppl_by_group.get((m, s))  # geometric mean over seeds, as `sweeper fit`'s table
            n_seeds = len(seeds.get((m, s), [])) or 1
            bad = [f"{c[k]} {k}" if k != "stalled" else f"{STALL_MARK}{c[k]} stalled"
                   for k in ("diverged", "stalled") if c.get(k)]  # never hidden behind a green cell
            tr.append(f"{st}<br>{done}/{total} pts · {n_seeds} seed{'s' if n_seeds > 1 else ''}"
                      + (f"<br>{', '.join(bad)}" if bad else "")
                      + (f"<br>ppl {math.exp(sum(map(math.log, ppl)) / len(ppl)):.4g}" if ppl else ""))
            details = [f"{done} of {total} points done", f"{c.get('running', 0)} running",
                       f"{c.get('diverged', 0)} diverged", f"{c.get('stalled', 0)} stalled",
                       f"{c.get('failed', 0)} failed", f"{c.get('infra_failed', 0)} infra_failed"]  # fmt: skip
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
    shown = set(status.values())
    for name in order:
        if name in ("failed", "stalled", "fixed", "infra_failed") and name not in shown:
            continue  # a rare status (or a fixed-recipe sweep's): in the legend only when some cell has it
        traces.append(
            {
                "type": "scatter", "mode": "markers", "uid": uid("status_grid", "legend", name),
                "x": [None], "y": [None], "name": name, "hoverinfo": "skip",
                "marker": {"symbol": "square", "size": 13, "color": style.STATUS_COLOURS[name]},
            }
        )  # fmt: skip
    return {"data": traces, "layout": layout}


def best_lambada(data: SweepData) -> dict[str, tuple[float, float]]:
    """cell id -> (loss, LAMBADA perplexity) of the cell's grid-best point, for the cells that have one."""
    points = data.points
    if "lambada_ppl" not in points.columns or not points.height or points["lambada_ppl"].null_count() == points.height:
        return {}
    best = {(r["cell_id"], canonical(r["best_lr"])) for r in data.cells.iter_rows(named=True) if r["best_lr"] is not None}
    out = {}
    for r in points.filter(pl.col("lambada_ppl").is_not_null()).iter_rows(named=True):
        if (r["cell_id"], canonical(r["lr"])) in best and r["loss"] is not None:
            out[r["cell_id"]] = (float(r["loss"]), float(r["lambada_ppl"]))
    return out
