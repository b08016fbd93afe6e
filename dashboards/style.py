"""The visual language shared by every figure: one colour per method, depth shades,
status colours, axis labels with units, and the publication layout.

Method colours are stable across figures, filters and sweeps: the study's schemes have
fixed colours, any other name gets a colour from its hash (probing past colours already
taken), so adding a method never recolours the others.
"""

from __future__ import annotations

import hashlib
import html
from functools import lru_cache
from typing import Any, Iterable

FONT = "Arial, Helvetica, sans-serif"
FONT_SIZE = 13
INK = "#222222"
GRID = "#E5E5E5"
MUTED = "#8A8A8A"

# The schemes of the study (models/schemes) and the baselines worth having.
KNOWN_METHOD_COLOURS: dict[str, str] = {
    "layerrope": "#D55E00",  # vermillion: the project's method stands out
    "pre": "#0072B2",
    "post": "#009E73",
    "peri": "#CC79A7",
    "lns": "#E69F00",
    "deepnet": "#56B4E9",
    "mixln": "#8C564B",
    "scaled_init": "#7F7F7F",
    "completep": "#6A3D9A",
    "deepscalelm": "#332288",
}
FALLBACK_COLOURS = (
    "#1B9E77", "#7570B3", "#E7298A", "#66A61E", "#A6761D",
    "#1F78B4", "#B15928", "#E6AB02", "#666666", "#882255",
    "#44AA99", "#117733", "#999933", "#AA4499", "#DDCC77",
)  # fmt: skip

STATUS_COLOURS: dict[str, str] = {
    "pending": "#D9D9D9",
    "running": "#9ECAE1",
    "bracketed": "#74C476",
    "edge": "#FDAE6B",
    "diverged": "#E34A33",
    "stalled": "#AE017E",  # every point diverged or stalled (learned nothing beyond token frequencies)
    "failed": "#969696",  # every point of the cell crashed
    "fixed": "#6BAED6",  # a fixed recipe (lr.fixed): trained at its one learning rate, no optimum searched
    "infra_failed": "#FFD92F",  # waits for points the infrastructure failed (out of memory, storage, a lost node)
}
OUTCOME_COLOURS: dict[str, str] = {"ok": "#333333", "diverged": "#E34A33", "stalled": "#AE017E", "failed": "#7F7F7F",
                                   "infra_failed": "#FFD92F"}

DIVERGED_SYMBOL = "x-thin-open"
STALLED_SYMBOL = "square-open"  # trained to the end at the frequency-only loss
FAILED_SIZE_SYMBOL = "x"  # a (method, size) that found no usable learning rate
OFFSCALE_SYMBOL = "triangle-up-open"
GRID_BEST_SYMBOL = "circle-open"
INTERP_SYMBOL = "star"


def method_colours(methods: Iterable[str]) -> dict[str, str]:
    """A colour per method: fixed for the study's schemes, hashed (collision-free) otherwise."""
    names = sorted(set(methods))
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        colour = KNOWN_METHOD_COLOURS.get(name.lower())
        if colour is not None:
            out[name] = colour
            taken.add(colour)
    for name in names:
        if name in out:
            continue
        start = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % len(FALLBACK_COLOURS)
        for i in range(len(FALLBACK_COLOURS)):
            colour = FALLBACK_COLOURS[(start + i) % len(FALLBACK_COLOURS)]
            if colour not in taken:
                break
        else:  # more methods than colours: reuse, still deterministic
            colour = FALLBACK_COLOURS[start]
        out[name] = colour
        taken.add(colour)
    return out


def _rgb(colour: str) -> tuple[int, int, int]:
    colour = colour.lstrip("#")
    return int(colour[0:2], 16), int(colour[2:4], 16), int(colour[4:6], 16)


def _hex(rgb: Iterable[float]) -> str:
    return "#" + "".join(f"{max(0, min(255, round(c))):02X}" for c in rgb)


@lru_cache(maxsize=4096)
def mix(colour: str, other: str, t: float) -> str:
    """`colour` moved a fraction `t` of the way towards `other`."""
    a, b = _rgb(colour), _rgb(other)
    return _hex(x + (y - x) * t for x, y in zip(a, b))


@lru_cache(maxsize=4096)
def shade(colour: str, rank: int, count: int) -> str:
    """The method's colour for the `rank`-th of `count` sizes: light for small, dark for large."""
    if count <= 1:
        return colour.upper()
    t = rank / (count - 1)  # 0 smallest .. 1 largest
    if t < 0.5:
        return mix(colour, "#FFFFFF", 0.6 * (1 - 2 * t))
    return mix(colour, "#000000", 0.45 * (2 * t - 1))


def rgba(colour: str, alpha: float) -> str:
    r, g, b = _rgb(colour)
    return f"rgba({r},{g},{b},{alpha:g})"


def text(value: object) -> str:
    """A name from the user's YAML made safe for Plotly text: Plotly renders a subset of HTML
    in names, titles and hover labels, so `<`, `>` and `&` are escaped and show literally."""
    return html.escape(str(value), quote=False)


def axis(title: str, *, log: bool = False, **extra: Any) -> dict[str, Any]:
    """An axis in the publication style: a thin frame, light grid, outside ticks."""
    spec: dict[str, Any] = {
        "title": {"text": title, "standoff": 8},
        "type": "log" if log else "linear",
        "showline": True,
        "linecolor": INK,
        "linewidth": 1,
        "mirror": True,
        "ticks": "outside",
        "ticklen": 4,
        "tickcolor": INK,
        "showgrid": True,
        "gridcolor": GRID,
        "zeroline": False,
        "exponentformat": "power" if log else "SI",
        "automargin": True,
    }
    spec.update(extra)
    return spec


def base_layout(title: str, *, height: int, width: int | None = None, uirevision: str) -> dict[str, Any]:
    """The layout every figure starts from. `uirevision` keeps zoom, legend toggles and
    selections across live updates."""
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.0, "xanchor": "left", "font": {"size": FONT_SIZE + 3}},
        "font": {"family": FONT, "size": FONT_SIZE, "color": INK},
        "paper_bgcolor": "#FFFFFF",
        "plot_bgcolor": "#FFFFFF",
        "height": height,
        "margin": {"l": 70, "r": 20, "t": 60, "b": 60},
        "hovermode": "closest",
        "hoverlabel": {"font": {"family": FONT}},
        "legend": {
            "bgcolor": "rgba(255,255,255,0.85)",
            "bordercolor": GRID,
            "borderwidth": 1,
            "groupclick": "toggleitem",
            "tracegroupgap": 6,
        },
        "uirevision": uirevision,
    }
    if width is not None:
        layout["width"] = width
    return layout


def size_label_unit(kind: str) -> tuple[str, bool]:
    """(axis title, log scale) for a scaling axis: depth, parameters or compute."""
    return {
        "depth": ("Depth (blocks)", True),
        "params": ("Parameters", True),
        "compute": ("Training compute (FLOP)", True),
        "loops": ("Loop count T (core iterations)", True),
    }.get(kind, (kind, True))
