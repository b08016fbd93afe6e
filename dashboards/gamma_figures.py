"""Figures of the γ probe: one offline HTML page comparing several models.

Reads the results document of `sweeper gamma` (`sweeper.analysis.gamma.report.analyze`, the `gamma.json`
file) and builds, per site, Plotly figures with one panel per model:

- magnitude percentiles (mean, median, p90, p99 of |γ_l|) against layer index;
- the LayerRoPE schedule view: RMS of γ_l against l on log–log axes, every model on one panel,
  each with its fitted power law l^b dashed;
- the cosine-similarity matrix of the normalised gains (each panel on its own colour range);
- the classical-MDS arc, points coloured by depth and joined in depth order;

and a table across models (`sweeper.analysis.gamma.report.summary_rows`). `write_page` writes
`gamma.html` with plotly.js from the installed plotly package beside it (`plotly.min.js`), so
the page opens without network access.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.style import GRID, INK, axis, base_layout, method_colours, shade, text
from sweeper.analysis.gamma.layouts import SITES
from sweeper.analysis.gamma.report import SUMMARY_COLUMNS, summary_rows

PAGE = "gamma.html"
PLOTLY_JS = "plotly.min.js"
COLUMNS = 3
PANEL_HEIGHT = 300
STAT_STYLE = {  # statistic -> (label, colour, dash)
    "mean": ("mean |γ|", INK, "solid"),
    "median": ("median |γ|", "#0072B2", "dot"),
    "p90": ("p90 |γ|", "#E69F00", "dash"),
    "p99": ("p99 |γ|", "#D55E00", "longdash"),
}
DEPTH_SCALE = "Viridis"


def model_colours(results: dict[str, Any]) -> dict[str, str]:
    """A colour per model: this project's exports by scheme (shaded by order), others by name."""
    models = results["models"]
    keys = [m["model_type"] if m["source"] == "layerrope-sweeper" and m["model_type"] else m["name"] for m in models]
    base = method_colours(keys)
    out: dict[str, str] = {}
    for key in set(keys):
        members = [m["name"] for m, k in zip(models, keys) if k == key]
        for rank, name in enumerate(members):
            out[name] = shade(base[key], rank, len(members)) if len(members) > 1 else base[key]
    return out


def _models_with(results: dict[str, Any], site: str) -> list[dict[str, Any]]:
    return [m for m in results["models"] if site in m["sites"]]


def _grid(n: int) -> tuple[int, int]:
    cols = min(COLUMNS, n)
    return math.ceil(n / cols), cols


def _cell(i: int, cols: int) -> tuple[int, int]:
    return i // cols + 1, i % cols + 1


def _fmt(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def magnitude_figure(results: dict[str, Any], site: str) -> go.Figure:
    """Per model: mean, median, p90 and p99 of |γ_l| against layer index."""
    models = _models_with(results, site)
    rows, cols = _grid(len(models))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[text(m["name"]) for m in models],
                        horizontal_spacing=0.07, vertical_spacing=0.12)
    for i, model in enumerate(models):
        s = model["sites"][site]
        row, col = _cell(i, cols)
        for stat, (label, colour, dash) in STAT_STYLE.items():
            trend = s["trend"][stat]
            fig.add_trace(go.Scatter(
                x=s["depth"], y=s["magnitude"][stat], mode="lines+markers", name=label, legendgroup=stat,
                showlegend=i == 0, line={"color": colour, "dash": dash, "width": 1.6}, marker={"size": 4},
                hovertemplate=f"{text(model['name'])}<br>layer %{{x}}<br>{label} %{{y:.4g}}"
                f"<br>ρ with depth {_fmt(trend['spearman'])}<extra></extra>",
            ), row=row, col=col)
        fig.update_xaxes(axis("layer l"), row=row, col=col)
        fig.update_yaxes(axis("|γ|"), row=row, col=col)
    layout = base_layout(f"Magnitude of {site} gains against depth", height=80 + PANEL_HEIGHT * rows,
                         uirevision=f"gamma-mag-{site}")
    fig.update_layout(**layout)
    return fig


def schedule_figure(results: dict[str, Any], site: str) -> go.Figure:
    """RMS of γ_l against l, log–log, every model on one panel with its fitted l^b dashed."""
    models = _models_with(results, site)
    colours = model_colours(results)
    fig = go.Figure()
    for model in models:
        s = model["sites"][site]
        colour = colours[model["name"]]
        fit = s["schedule"]
        fig.add_trace(go.Scatter(
            x=s["depth"], y=s["magnitude"]["rms"], mode="lines+markers", name=text(model["name"]),
            legendgroup=model["name"], line={"color": colour, "width": 1.6}, marker={"size": 4},
            hovertemplate=f"{text(model['name'])}<br>layer %{{x}}<br>RMS γ %{{y:.4g}}<extra></extra>",
        ))
        if fit["a"] is not None and fit["b"] is not None:
            ys = [math.exp(fit["a"] + fit["b"] * math.log(l)) for l in s["depth"]]
            fig.add_trace(go.Scatter(
                x=s["depth"], y=ys, mode="lines", legendgroup=model["name"], showlegend=False,
                name=f"fit {text(model['name'])}", line={"color": colour, "dash": "dash", "width": 1.2},
                hovertemplate=f"{text(model['name'])} fit: l^{fit['b']:.3f}, R² {_fmt(fit['r2'])}<extra></extra>",
            ))
    fig.update_layout(**base_layout(
        f"{site}: RMS γ against depth (log–log) with LayerRoPE's schedule l^b fitted (dashed)",
        height=420, uirevision=f"gamma-sched-{site}"))
    fig.update_xaxes(axis("layer l", log=True))
    fig.update_yaxes(axis("RMS γ_l = ‖γ_l‖/√d", log=True))
    return fig


def cosine_figure(results: dict[str, Any], site: str) -> go.Figure:
    """Per model: cosine similarity of normalised gains between every pair of layers."""
    models = _models_with(results, site)
    rows, cols = _grid(len(models))
    titles = []
    for m in models:
        cos = m["sites"][site]["direction"]["cosine"]
        lo = min(min(r) for r in cos)
        titles.append(f"{text(m['name'])}  (cos ∈ [{lo:.6g}, 1])")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.07, vertical_spacing=0.12)
    for i, model in enumerate(models):
        s = model["sites"][site]
        cos = s["direction"]["cosine"]
        lo = min(min(r) for r in cos)
        row, col = _cell(i, cols)
        fig.add_trace(go.Heatmap(
            z=cos, x=s["depth"], y=s["depth"], zmin=lo, zmax=1.0, colorscale="Viridis", showscale=False,
            hovertemplate=f"{text(model['name'])}<br>layers %{{y}} × %{{x}}<br>cos %{{z:.4f}}<extra></extra>",
        ), row=row, col=col)
        fig.update_xaxes(axis("layer", showgrid=False), row=row, col=col)
        fig.update_yaxes(axis("layer", showgrid=False, autorange="reversed"), row=row, col=col)
    fig.update_layout(**base_layout(f"{site}: cosine similarity of γ_l/‖γ_l‖ (each panel on its own range)",
                                    height=80 + PANEL_HEIGHT * rows, uirevision=f"gamma-cos-{site}"))
    return fig


def mds_figure(results: dict[str, Any], site: str) -> go.Figure:
    """Per model: classical MDS of the normalised gains, coloured by relative depth."""
    models = _models_with(results, site)
    rows, cols = _grid(len(models))
    titles = [
        f"{text(m['name'])}  (arc order {_fmt(m['sites'][site]['direction']['arc_order'], 2)},"
        f" 2-D var. {_fmt(m['sites'][site]['direction']['mds_explained'], 2)})"
        for m in models
    ]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.07, vertical_spacing=0.12)
    for i, model in enumerate(models):
        s = model["sites"][site]
        xy = s["direction"]["mds"]
        depth = s["depth"]
        rel = [l / max(depth) for l in depth]
        row, col = _cell(i, cols)
        fig.add_trace(go.Scatter(
            x=[p[0] for p in xy], y=[p[1] for p in xy], mode="lines", line={"color": GRID, "width": 1},
            hoverinfo="skip", showlegend=False,
        ), row=row, col=col)
        fig.add_trace(go.Scatter(
            x=[p[0] for p in xy], y=[p[1] for p in xy], mode="markers", showlegend=False, customdata=depth,
            marker={"color": rel, "colorscale": DEPTH_SCALE, "cmin": 0, "cmax": 1, "size": 7,
                    "line": {"width": 0.5, "color": INK}, "showscale": i == 0,
                    "colorbar": {"title": {"text": "l / L"}, "len": 0.5, "thickness": 12}},
            hovertemplate=f"{text(model['name'])}<br>layer %{{customdata}}<extra></extra>",
        ), row=row, col=col)
        k = i + 1
        fig.update_xaxes(axis("MDS 1", zeroline=False), row=row, col=col)
        fig.update_yaxes(axis("MDS 2", scaleanchor=f"x{'' if k == 1 else k}", scaleratio=1), row=row, col=col)
    fig.update_layout(**base_layout(f"{site}: classical MDS of γ_l/‖γ_l‖, coloured by depth",
                                    height=80 + PANEL_HEIGHT * rows, uirevision=f"gamma-mds-{site}"))
    return fig


def summary_table_html(results: dict[str, Any]) -> str:
    """The table across models as an HTML table."""
    head = "".join(f"<th>{html.escape(label)}</th>" for label in SUMMARY_COLUMNS.values())
    body = []
    for row in summary_rows(results):
        cells = []
        for key in SUMMARY_COLUMNS:
            value = row[key]
            shown = html.escape(str(value)) if isinstance(value, str) else _fmt(value)
            cells.append(f"<td>{shown}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='summary'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _notes_html(results: dict[str, Any]) -> str:
    items = []
    for m in results["models"]:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in m["notes"])
        items.append(
            f"<li><b>{html.escape(m['name'])}</b>: {html.escape(m['layout'])}, {m['n_layers']} layers,"
            f" gain = {html.escape(m['gain_transform'])} <span class='path'>{html.escape(m['path'])}</span>"
            f"<ul>{notes}</ul></li>"
        )
    return "<ul class='models'>" + "".join(items) + "</ul>"


_CSS = """
body { font-family: Arial, Helvetica, sans-serif; color: #222; margin: 24px; }
table.summary { border-collapse: collapse; font-size: 13px; }
table.summary th, table.summary td { border-bottom: 1px solid #E5E5E5; padding: 4px 8px; text-align: right; }
table.summary th:nth-child(-n+2), table.summary td:nth-child(-n+2) { text-align: left; }
.path { color: #8A8A8A; font-size: 12px; }
.definitions { max-width: 980px; font-size: 13px; color: #444; }
"""

_DEFINITIONS = """
<p class='definitions'>Magnitude: per-layer statistics of |γ_l| over channels; ρ is Spearman's rank correlation
with the layer index l, the slope is against ln l. Schedule: ln RMS(γ_l) = a + b ln l (LayerRoPE's magnitude
schedule, gain ∝ l<sup>b</sup>) with its R². Direction: cosines of γ_l/‖γ_l‖; locality = mean distance of
depth-adjacent layers over the mean distance of all pairs (≈1: no depth structure). Arc order = |ρ| between
the position of each layer along the 2-D MDS configuration (angle around the fitted circle, cut at the
widest gap; projection on the main axis for a straight configuration) and depth: ≈1 for a smooth drift,
≈0 for a rigid rotation by a large step or noise.</p>
"""


def page_html(results: dict[str, Any], plotly_src: str = PLOTLY_JS) -> str:
    """The full page: table, model notes and, per site, the four figures."""
    config = {"displaylogo": False, "responsive": True}
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>γ probe</title>",
        f"<style>{_CSS}</style><script src='{html.escape(plotly_src)}'></script></head><body>",
        f"<h1>γ probe — {html.escape(results['site_group'])} sites</h1>",
        summary_table_html(results),
        _DEFINITIONS,
        _notes_html(results),
    ]
    for site in SITES:
        if not _models_with(results, site):
            continue
        parts.append(f"<h2 id='site-{site}'>{site}</h2>")
        for fig in (magnitude_figure(results, site), schedule_figure(results, site),
                    cosine_figure(results, site), mds_figure(results, site)):
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False, config=config))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_page(results: dict[str, Any], out_dir: Path) -> Path:
    """Write `gamma.html` and `plotly.min.js` into `out_dir`; returns the page's path."""
    from plotly.offline import get_plotlyjs  # the bundled plotly.js, only when a page is written

    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in ((PLOTLY_JS, get_plotlyjs()), (PAGE, page_html(results))):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, out_dir / name)
    return out_dir / PAGE
