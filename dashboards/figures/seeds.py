"""The seeds on the figures: each seed's best loss (its evaluation SE on hover), the mean with its Student-t 95%
interval and the seeds' sd (the training noise), stalled cells
at their loss (marked), partial sizes; and the panel of paired leads between methods (`sweeper compare`).

The interval of a size's mean over n seeds is `mean ± t(0.975, n−1)·sd/√n` (n − 1 degrees of freedom); with
one seed no bar is drawn (no interval exists). Used by `dashboards.figures.scaling` and `loss_lr`.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
from scipy import stats

from dashboards import style
from dashboards.data import SweepData
from dashboards.figures.common import FigureDict, Trace, empty_note, present_methods, scale_axis_ticks, uid
from sweeper.analysis.compare import compare_rows

SEED_OPACITY = 0.55


def t_half_width(values: list[float]) -> float | None:
    """Half the 95% Student-t interval of the mean of `values` (None below two values)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def _best_eval_se(data: SweepData, method: str) -> dict[str, float]:
    """Per cell of `method`: the evaluation SE of its best point (the ok point at its best LR)."""
    cells = data.cells.filter((pl.col("method") == method) & pl.col("best_lr").is_finite())
    if cells.height == 0 or data.points.height == 0 or "loss_se" not in data.points.columns:
        return {}
    best = dict(zip(cells["cell_id"].to_list(), cells["best_lr"].to_list()))
    pts = data.points.filter(pl.col("cell_id").is_in(list(best)) & (pl.col("state") == "ok") & pl.col("loss_se").is_finite())
    out = {}
    for cid, lr, se in zip(pts["cell_id"].to_list(), pts["lr"].to_list(), pts["loss_se"].to_list()):
        if abs(lr - best[cid]) <= 1e-4 * best[cid]:
            out[cid] = float(se)
    return out


def _stalled_losses(data: SweepData, method: str) -> dict[str, float]:
    """Per stalled cell of `method`: the lowest final loss of its stalled points."""
    cells = data.cells.filter((pl.col("method") == method) & (pl.col("status") == "stalled"))
    if cells.height == 0 or data.points.height == 0:
        return {}
    pts = data.points.filter(pl.col("cell_id").is_in(cells["cell_id"].to_list()) & (pl.col("state") == "stalled")
                             & pl.col("loss").is_finite())
    return {row["cell_id"]: float(row["loss"]) for row in pts.group_by("cell_id").agg(pl.col("loss").min()).to_dicts()}


def seed_traces(data: SweepData, method: str, kind: str, colour: str) -> list[Trace]:
    """Per size of `method`: every seed's grid-best loss (small markers), the mean ± its t-interval where there
    are two or more seeds, and each stalled cell at its stalled loss (□, never an optimum)."""
    values = data.size_values()
    cells = data.cells.filter((pl.col("method") == method) & pl.col("best_objective").is_finite()).sort("size", "seed")
    eval_se = _best_eval_se(data, method)
    xs, ys, custom, mean_x, mean_y, half, mean_custom = [], [], [], [], [], [], []
    for size in data.sizes:
        frame = cells.filter(pl.col("size") == size)
        x = values.get(size, {}).get(kind)
        if frame.height == 0 or x is None:
            continue
        vals = [float(v) for v in frame["best_objective"].to_list()]
        for v, seed, status, cid in zip(vals, frame["seed"].to_list(), frame["status"].to_list(),
                                        frame["cell_id"].to_list()):
            xs.append(x)
            ys.append(v)
            se = eval_se.get(cid)
            custom.append([style.text(size), seed, status, "—" if se is None else f"{se:.4f}"])
        h = t_half_width(vals)
        if h is not None:
            mean_x.append(x)
            mean_y.append(sum(vals) / len(vals))
            half.append(h)
            sd = h * math.sqrt(len(vals)) / float(stats.t.ppf(0.975, len(vals) - 1))
            mean_custom.append([style.text(size), len(vals), len(vals) - 1, h, sd])
    traces: list[Trace] = []
    name = style.text(method)
    if xs:
        traces.append({
            "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "seeds"), "x": xs, "y": ys,
            "marker": {"color": style.rgba(colour, SEED_OPACITY), "size": 6, "symbol": "circle",
                       "line": {"color": colour, "width": 1}},
            "name": name + " seeds", "legendgroup": method, "showlegend": False, "meta": name, "customdata": custom,
            "hovertemplate": "%{meta} · %{customdata[0]} seed %{customdata[1]} (%{customdata[2]})<br>x %{x:.4g}"
            "<br>best %{y:.4f} ± %{customdata[3]} (evaluation SE of the point)<extra></extra>",
        })
    if mean_x:
        traces.append({
            "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "seed-mean"), "x": mean_x,
            "y": mean_y, "marker": {"color": colour, "size": 10, "symbol": "line-ew-open", "line": {"width": 2}},
            "error_y": {"type": "data", "array": half, "color": colour, "thickness": 1.5, "width": 6},
            "name": name + " mean ± 95% t-interval", "legendgroup": method, "showlegend": False, "meta": name,
            "customdata": mean_custom,
            "hovertemplate": "%{meta} · %{customdata[0]}<br>x %{x:.4g}<br>mean %{y:.4f} ± %{customdata[3]:.4f} "
            "(95% t-interval, %{customdata[1]} seeds, df %{customdata[2]})<br>seeds' sd %{customdata[4]:.4f} "
            "(training noise)<extra></extra>",
        })
    stalled = _stalled_losses(data, method)
    if stalled:
        rows = data.cells.filter(pl.col("cell_id").is_in(list(stalled))).sort("size", "seed")
        sx = [values.get(s, {}).get(kind) for s in rows["size"].to_list()]
        keep = [i for i, x in enumerate(sx) if x is not None]
        if keep:
            ids, sizes, seeds = rows["cell_id"].to_list(), rows["size"].to_list(), rows["seed"].to_list()
            traces.append({
                "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "stalled"),
                "x": [sx[i] for i in keep], "y": [stalled[ids[i]] for i in keep],
                "marker": {"color": colour, "size": 9, "symbol": style.STALLED_SYMBOL, "line": {"width": 2}},
                "name": name + " stalled", "legendgroup": method, "showlegend": False, "meta": name,
                "customdata": [[style.text(sizes[i]), seeds[i]] for i in keep],
                "hovertemplate": "%{meta} · %{customdata[0]} seed %{customdata[1]}: stalled (no point learned beyond "
                "token frequencies), lowest loss %{y:.4f}; never an optimum<extra></extra>",
            })
    return traces


def partial_traces(data: SweepData, method: str, colour: str) -> list[Trace]:
    """The method's partial sizes from fits.json (some seed had no usable optimum): ◇ at the surviving seeds'
    mean, open when the fit left them out."""
    if data.fits is None:
        return []
    rows = [p for p in data.fits.inputs.partial if p.method == method and p.x is not None and p.loss is not None]
    if not rows:
        return []
    return [{
        "type": "scatter", "mode": "markers", "uid": uid("scaling", method, "partial"),
        "x": [float(p.x) for p in rows], "y": [float(p.loss) for p in rows],  # type: ignore[arg-type]
        "marker": {"color": colour, "size": 12, "line": {"color": colour, "width": 2},
                   "symbol": ["diamond" if p.fitted else "diamond-open" for p in rows]},
        "name": style.text(method) + " partial size", "legendgroup": method, "showlegend": False,
        "meta": style.text(method),
        "customdata": [[style.text(p.size), ", ".join(f"s{int(m.seed)} {m.status}" for m in p.missing_seeds),
                        "fitted (--allow-partial)" if p.fitted else "not fitted"] for p in rows],
        "hovertemplate": "%{meta} · %{customdata[0]}: partial (%{customdata[1]}), %{customdata[2]}<br>x %{x:.4g}"
        "<br>surviving seeds' mean %{y:.4f}<extra></extra>",
    }]


def seed_curve_traces(data: SweepData, method: str, size: str, colour: str, xref: str, yref: str,
                      facet: str) -> list[Trace]:
    """Loss against LR of each seed of (method, size), thin lines under the mean (drawn only with 2+ seeds)."""
    ok = data.points.filter((pl.col("method") == method) & (pl.col("size") == size) & (pl.col("state") == "ok")
                            & pl.col("objective").is_finite())
    seeds = sorted(ok["seed"].drop_nulls().unique().to_list()) if ok.height else []
    if len(seeds) < 2:
        return []
    out: list[Trace] = []
    for seed in seeds:
        frame = ok.filter(pl.col("seed") == seed).group_by("lr").agg(pl.col("objective").min()).sort("lr")
        out.append({
            "type": "scatter", "mode": "lines+markers", "uid": uid("loss_vs_lr", facet, method, size, "seed", seed),
            "x": [float(v) for v in frame["lr"]], "y": [float(v) for v in frame["objective"]],
            "xaxis": xref, "yaxis": yref, "opacity": SEED_OPACITY, "hoverinfo": "x+y+name",
            "name": style.text(f"{method} {size} seed {seed}"),
            "legendgroup": f"size:{size}" if facet == "method" else f"method:{method}", "showlegend": False,
            "line": {"color": colour, "width": 1}, "marker": {"color": colour, "size": 3},
        })
    return out


def leads(data: SweepData) -> FigureDict:
    """Paired leads over the first method: per size and other method B, each seed's lead (A's best loss − B's at
    the same seed) and the mean with its 95% Student-t interval (df = seeds − 1; no bar with one seed)."""
    layout = style.base_layout("Lead over the first method, paired by seed", height=420, uirevision="leads")
    present = present_methods(data)
    # the sweep file's order (its first method is the baseline), else the figures' order
    methods = [m for m in data.declared_methods if m in present] + [m for m in present if m not in data.declared_methods]
    kind = "params" if data.x_kind == "params" else "depth"
    layout["xaxis"] = style.axis(style.size_label_unit(kind)[0], log=True)
    layout["yaxis"] = style.axis("Lead (loss of the first − this one)")
    traces: list[Trace] = []
    if len(methods) < 2:
        empty_note(layout, "No comparison: it needs two methods")
        return {"data": traces, "layout": layout}
    base = methods[0]
    rows = data.cells.select("method", "size", "seed", "status", "best_objective", "depth", "params").to_dicts()
    for method in methods[1:]:
        colour = data.colours[method]
        result = compare_rows(rows, base, method, x=kind)  # type: ignore[arg-type]
        xs, ys, custom, mx, my, err, mcustom = [], [], [], [], [], [], []
        for c in result.sizes:
            x = c.x_b if c.x_b is not None else c.x_a
            if x is None:
                continue
            for s in c.per_seed:
                xs.append(x)
                ys.append(s.lead)
                custom.append([style.text(c.size), s.seed])
            if c.mean is not None:
                ci = c.ci
                mx.append(x)
                my.append(c.mean)
                err.append(0.0 if ci is None else ci[1] - c.mean)
                mcustom.append([style.text(c.size), c.n_seeds, c.df,
                                "no interval (1 seed)" if ci is None else f"[{ci[0]:+.4f}, {ci[1]:+.4f}]",
                                "excludes 0" if c.significant else "contains 0" if c.significant is False else "no claim"])
        name = style.text(f"{method} over {base}")
        traces.append({
            "type": "scatter", "mode": "markers", "uid": uid("leads", method, "seeds"), "x": xs, "y": ys,
            "marker": {"color": style.rgba(colour, SEED_OPACITY), "size": 6}, "name": name + " seeds",
            "legendgroup": method, "showlegend": False, "customdata": custom, "meta": name,
            "hovertemplate": "%{meta} · %{customdata[0]} seed %{customdata[1]}<br>lead %{y:+.4f}<extra></extra>",
        })
        traces.append({
            "type": "scatter", "mode": "lines+markers", "uid": uid("leads", method, "mean"), "x": mx, "y": my,
            "marker": {"color": colour, "size": 9}, "line": {"color": colour, "width": 1.5},
            "error_y": {"type": "data", "array": err, "color": colour, "thickness": 1.5, "width": 6},
            "name": name, "legendgroup": method, "customdata": mcustom, "meta": name,
            "hovertemplate": "%{meta} · %{customdata[0]}<br>mean lead %{y:+.4f}, 95% t-interval %{customdata[3]} "
            "(%{customdata[1]} seeds, df %{customdata[2]}; %{customdata[4]})<extra></extra>",
        })
    layout.setdefault("shapes", []).append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": 0,
                                            "y1": 0, "line": {"color": style.MUTED, "width": 1, "dash": "dot"}})
    layout["title"]["subtitle"] = {
        "text": f"above 0: better than {style.text(base)} · dots: seeds · bars: 95% Student-t interval of the mean "
                "(df = seeds − 1; none with one seed) · grid-best losses",
        "font": {"size": style.FONT_SIZE - 2, "color": style.MUTED}}
    layout["margin"]["t"] = 80
    xs = [x for t in traces for x in t["x"]]
    if not xs:
        empty_note(layout, "No size where both methods have a usable optimum yet")
    scale_axis_ticks(layout["xaxis"], kind, xs)
    return {"data": traces, "layout": layout}
