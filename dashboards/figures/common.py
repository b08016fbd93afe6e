"""What every figure shares: stable trace ids, faceted panels, tick choices, the size
legend, the per-(method, size) status, and the loss-axis window."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from dashboards import style
from dashboards.data import SweepData
from sweeper.core.rows import finite as num  # a finite float or None
from sweeper.core.states import FINISHED_STATES

FigureDict = dict[str, Any]
Trace = dict[str, Any]

PANEL_HEIGHT = 300
STATIC_WIDTH = 1100  # `sweeper plots` draws at this width; the dashboard fills the window
FINISHED = tuple(s.value for s in FINISHED_STATES)


def uid(*parts: object) -> str:
    """A stable trace id from what the trace shows (names may hold any character)."""
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]


def nums(values: Any) -> list[float | None]:
    return [num(v) for v in values]


def axis_name(kind: str, index: int) -> str:
    return kind if index == 1 else f"{kind}{index}"


def ref(kind: str, index: int) -> str:
    return kind[0] if index == 1 else f"{kind[0]}{index}"


def empty_note(layout: dict[str, Any], message: str) -> None:
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


def facets(
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
        xa = {**x_axis, "domain": [round(x0, 6), round(x0 + width, 6)], "anchor": ref("yaxis", k)}
        ya = {**y_axis, "domain": [round(y1 - height, 6), round(y1, 6)], "anchor": ref("xaxis", k)}
        if k > 1:
            ya["matches"] = "y"
            if share_x:
                xa["matches"] = "x"
        if c > 0:
            ya["showticklabels"] = False
            ya["title"] = {"text": ""}
        if r < rows - 1 and i + cols < n:
            xa["title"] = {"text": ""}
        layout[axis_name("xaxis", k)] = xa
        layout[axis_name("yaxis", k)] = ya
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
        refs.append((ref("xaxis", k), ref("yaxis", k)))
    layout["height"] = 130 + rows * PANEL_HEIGHT
    return refs


def _present(data: SweepData, column: str) -> set[str]:
    return set(data.points[column].drop_nulls().unique().to_list()) | set(
        data.cells[column].drop_nulls().unique().to_list()
    )


def present_methods(data: SweepData) -> list[str]:
    present = _present(data, "method")
    return [m for m in data.methods if m in present]


def present_sizes(data: SweepData) -> list[str]:
    present = _present(data, "size")
    return [s for s in data.sizes if s in present]


def group_status(data: SweepData) -> dict[tuple[str, str], str]:
    """One status per (method, size), over its seeds: running while any seed runs (or some
    are done and others not started); the seeds' status when they all agree; otherwise
    edge (some seed's optimum is not bracketed). Unknown statuses count as edge."""
    statuses: dict[tuple[str, str], list[str]] = {}
    for row in data.cells.select("method", "size", "status").iter_rows():
        statuses.setdefault((row[0], row[1]), []).append(row[2] or "pending")
    for row in data.points.select("method", "size", "state").unique().iter_rows():
        key = (row[0], row[1])
        if key not in statuses:
            statuses[key] = ["running" if row[2] == "running" else "pending"]
    out = {}
    for key, values in statuses.items():
        s = {v if v in style.STATUS_COLOURS else "edge" for v in values}
        if "running" in s or ("pending" in s and len(s) > 1):
            out[key] = "running"
        elif len(s) == 1:
            out[key] = s.pop()  # pending, bracketed, edge, diverged, failed or fixed on every seed
        else:
            out[key] = "edge"  # some seed's optimum is not bracketed
    return out


STATUS_DASH = {"bracketed": "solid", "edge": "dash", "running": "dot", "pending": "dot", "diverged": "dot",
               "stalled": "dot", "fixed": "dashdot"}


def y_window(values: list[float]) -> tuple[float, float, float] | None:
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


def si(value: float) -> str:
    for factor, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def log_ticks(lo: float, hi: float, *, style_: str = "e") -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis over [lo, hi] (one decade beyond each side, so
    zooming out keeps labels): fewer per decade the more decades there are, and at least
    three inside the range however narrow it is. Labels "2e-3" (learning rates) or SI
    ("20M", parameters and FLOPs)."""
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return [], []
    lo, hi = min(lo, hi), max(lo, hi)
    if hi < lo * 1.2:  # one value (or nearly): label its neighbourhood
        lo, hi = lo / 1.5, hi * 1.5
    decades = math.log10(hi / lo)
    ladders: list[tuple[float, ...]] = [(1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)]
    start = 0 if decades >= 2.5 else 1 if decades >= 1.0 else 2 if decades >= 0.5 else 3
    exponents = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
    for mantissas in ladders[start:]:  # denser until at least three ticks fall inside
        values = {float(f"{m * 10.0**k:.6g}") for k in exponents for m in mantissas}
        inside = [v for v in values if lo <= v <= hi]
        if len(inside) >= 3:
            break
    if len(inside) < 3:  # a very narrow range: evenly spaced round values across it
        step = _nice_step((hi - lo) / 4)
        start = math.ceil(lo / step) * step
        values |= {float(f"{start + i * step:.6g}") for i in range(6) if start + i * step <= hi * 1.0001}
    ordered = sorted(values)
    return ordered, [_tick_text(v) if style_ == "e" else si(v) for v in ordered]


def _nice_step(raw: float) -> float:
    exponent = math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10.0**exponent >= raw:
            return m * 10.0**exponent
    return 10.0 ** (exponent + 1)


def _tick_text(value: float) -> str:
    """2e-3, 3.5e-3: the mantissa with up to three significant digits."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def scale_axis_ticks(axis: dict[str, Any], kind: str, xs: list[float]) -> None:
    """Readable ticks on a scaling axis: the depths themselves, or SI-labelled decades."""
    xs = sorted({x for x in xs if x and x > 0})
    if not xs:
        return
    if kind in ("depth", "loops"):
        axis["tickmode"] = "array"
        axis["tickvals"] = xs
        axis["ticktext"] = [f"{x:g}" for x in xs]
    else:
        axis["tickmode"] = "array"
        axis["tickvals"], axis["ticktext"] = log_ticks(xs[0], xs[-1], style_="si")
        axis["range"] = [math.log10(xs[0]) - 0.08, math.log10(xs[-1]) + 0.08]


def size_legend(data: SweepData, sizes: list[str], fig: str) -> list[Trace]:
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
