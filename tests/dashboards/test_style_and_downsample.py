"""The shared style (stable method colours, depth shades, escaping) and curve downsampling."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from dashboards import style
from dashboards.downsample import downsample_curves


def test_method_colours_are_fixed_for_known_schemes_and_stable_for_others():
    a = style.method_colours(["pre", "layerrope", "my-variant"])
    b = style.method_colours(["my-variant", "another", "layerrope", "pre", "zzz"])
    assert a["layerrope"] == style.KNOWN_METHOD_COLOURS["layerrope"] == b["layerrope"]
    assert a["pre"] == b["pre"]
    assert len(set(b.values())) == len(b)  # no two methods share a colour
    assert style.method_colours(["my-variant"]) == style.method_colours(["my-variant"])


def test_many_methods_still_get_distinct_colours_while_the_palette_lasts():
    names = [f"m{i}" for i in range(len(style.FALLBACK_COLOURS))]
    colours = style.method_colours(names)
    assert len(set(colours.values())) == len(names)


def test_shades_go_from_light_to_dark_with_size():
    def lightness(hex_colour: str) -> float:
        return sum(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))

    shades = [style.shade("#0072B2", rank, 5) for rank in range(5)]
    values = [lightness(s) for s in shades]
    assert values == sorted(values, reverse=True)
    assert style.shade("#0072B2", 0, 1) == "#0072B2"


@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "a & b", "<b>bold</b>", 'x" onmouseover="y'])
def test_text_escapes_the_html_plotly_would_render(name):
    escaped = style.text(name)
    assert "<" not in escaped and ">" not in escaped
    assert escaped.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == name


def _curve(pid: str, y: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"point_id": [pid] * len(y), "tokens": np.arange(len(y)) * 100, "train_loss": y})


def test_downsampling_bounds_vertices_and_keeps_spikes_dips_and_ends():
    rng = np.random.default_rng(0)
    y = 3 + np.exp(-np.arange(5000) / 500) + rng.normal(0, 0.01, 5000)
    y[1234] = 9.0  # a loss spike
    y[4321] = 1.0  # a dip
    frame = pl.concat([_curve("a", y), _curve("b", y[:50])])
    out = downsample_curves(frame, max_vertices=64)
    a = out.filter(pl.col("point_id") == "a")
    assert a.height <= 64
    assert 9.0 in a["train_loss"].to_list() and 1.0 in a["train_loss"].to_list()
    assert a["tokens"][0] == 0 and a["tokens"][-1] == 4999 * 100
    assert a["tokens"].is_sorted()
    assert out.filter(pl.col("point_id") == "b").height == 50  # short curves are left alone


def test_downsampling_turns_non_finite_losses_into_gaps():
    y = np.array([5.0, 4.0, math.nan, math.inf, 3.0])
    out = downsample_curves(_curve("a", y), max_vertices=64)
    assert out["train_loss"].to_list()[:2] == [5.0, 4.0]
    assert out["train_loss"].null_count() == 2


def test_downsampling_rejects_a_useless_budget():
    with pytest.raises(ValueError):
        downsample_curves(_curve("a", np.ones(10)), max_vertices=2)


def test_downsampling_handles_interleaved_and_out_of_order_rows():
    rng = np.random.default_rng(1)
    y = 3 + rng.normal(0, 0.1, 400)
    y[77] = 8.0
    frame = pl.concat([_curve("a", y), _curve("b", y + 1)]).sample(fraction=1.0, shuffle=True, seed=3)
    out = downsample_curves(frame, max_vertices=32)
    for pid, spike in (("a", 8.0), ("b", 9.0)):
        mine = out.filter(pl.col("point_id") == pid)
        assert mine.height <= 32 and mine["tokens"].is_sorted()
        assert spike in mine["train_loss"].to_list()
        assert mine["tokens"][0] == 0 and mine["tokens"][-1] == 399 * 100
