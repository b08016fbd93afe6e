"""Every figure function against fixture sweeps written with the real StoreWriter: the
numbers drawn are the stored numbers, the markers mean what they say, the figure is valid
Plotly, deterministic, and shows user names as text."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from dashboards import figures, style
from dashboards.data import Filters, SweepData
from dashboards.figures.common import group_status
from sweeper.analysis.fits.document import FitsDocument
from sweeper.records.document import DocumentError

from .conftest import HOSTILE


def by_name(spec: dict, name: str) -> list[dict]:
    return [t for t in spec["data"] if t.get("name") == name]


def by_uid(spec: dict, *parts: object) -> dict:
    key = figures.uid(*parts)
    found = [t for t in spec["data"] if t["uid"] == key]
    assert len(found) == 1, parts
    return found[0]


@pytest.mark.parametrize("name", list(figures.FIGURES))
@pytest.mark.parametrize("fixture", ["finished", "midway"])
def test_every_figure_is_valid_deterministic_and_has_stable_unique_uids(name, fixture, request):
    data: SweepData = request.getfixturevalue(fixture)
    build = figures.FIGURES[name][1]
    spec = build(data)
    figures.to_figure(spec)  # raises on any property Plotly does not know
    text = json.dumps(spec, allow_nan=False)  # JSON-able, no NaN (the page parses it with JSON.parse)
    assert json.dumps(build(data), allow_nan=False) == text
    uids = [t["uid"] for t in spec["data"]]
    assert len(uids) == len(set(uids)) and all(uids)
    assert spec["layout"]["uirevision"] == name if name != "status" else "status_grid"
    assert sum(len(t.get("x") or t.get("z") or []) for t in spec["data"]) > 0


def test_empty_sweep_gives_valid_figures_with_a_message():
    from dashboards.data import empty_frames

    data = SweepData.build("empty", *empty_frames())
    for name, (_, build) in figures.FIGURES.items():
        spec = build(data)
        figures.to_figure(spec)
        notes = [a["text"] for a in spec["layout"].get("annotations", [])]
        assert any(n.startswith("No ") for n in notes), name


# Loss against LR ---------------------------------------------------------------------------------


def test_loss_vs_lr_lines_are_the_seed_means_of_the_stored_objectives(finished):
    spec = figures.loss_vs_lr(finished)
    ok = finished.points.filter(pl.col("state") == "ok")
    for (method, size), frame in ok.group_by("method", "size"):
        trace = by_uid(spec, "loss_vs_lr", "method", method, size, "line")
        expected = (
            frame.group_by("lr").agg(pl.col("objective").mean(), pl.col("objective").min().alias("lo")).sort("lr")
        )
        assert trace["x"] == expected["lr"].to_list()
        assert np.allclose(trace["y"], expected["objective"].to_numpy())
        assert trace["line"]["color"] == finished.size_shade(method, size)
        # two seeds: the error bar spans the seeds' range
        if "error_y" in trace:
            assert np.allclose(np.array(trace["y"]) - trace["error_y"]["arrayminus"], expected["lo"].to_numpy())
    assert spec["layout"]["xaxis"]["type"] == "log"


def test_loss_vs_lr_marks_diverged_points_above_every_finite_loss(finished):
    spec = figures.loss_vs_lr(finished)
    diverged = by_name(spec, "diverged")
    stored = finished.points.filter(pl.col("state") == "diverged")
    # one marker per (method, size, LR) saying in how many seeds it diverged
    per_lr = stored.group_by("method", "size", "lr").len()
    assert sum(len(t["x"]) for t in diverged) == per_lr.height > 0
    assert sum(c[1] for t in diverged for c in t["customdata"]) == stored.height
    assert sorted(x for t in diverged for x in t["x"]) == sorted(per_lr["lr"].to_list())
    lo, hi = spec["layout"]["yaxis"]["range"]
    in_frame = [y for t in spec["data"] if t.get("mode") == "lines+markers" for y in t["y"] if y <= hi]
    for t in diverged:
        assert t["marker"]["symbol"] == style.DIVERGED_SYMBOL
        assert all(max(in_frame) < y < hi for y in t["y"])  # above every drawn loss, inside the frame


def test_loss_vs_lr_marks_grid_and_interpolated_optima_of_every_size(finished):
    spec = figures.loss_vs_lr(finished)
    for label, lr_col in (("interpolated optimum", "interp_lr"), ("best grid point", "best_lr")):
        markers = by_name(spec, label)
        assert all(t["marker"]["symbol"] == (style.INTERP_SYMBOL if lr_col == "interp_lr" else style.GRID_BEST_SYMBOL)
                   for t in markers)  # fmt: skip
        expected = (
            finished.cells.filter(pl.col(lr_col).is_not_null())
            .group_by("method", "size")
            .agg(pl.col(lr_col).log().mean().exp(), pl.col(lr_col).min().alias("lo"), pl.len())
            .sort(lr_col)
        )
        drawn = sorted((x, c) for t in markers for x, c in zip(t["x"], t["customdata"]))
        assert [x for x, _ in drawn] == pytest.approx(expected[lr_col].to_list())  # geometric mean over seeds
        assert [c[1] for _, c in drawn] == expected["len"].to_list()  # seeds counted
        assert [c[3] for _, c in drawn] == pytest.approx(expected["lo"].to_list())  # their range
        assert all("error_x" in t for t in markers)  # two seeds: the range is drawn


def test_interpolated_optimum_sits_on_the_drawn_curve_with_the_parabola_in_the_hover(finished):
    # A parabola beside a divergence cliff can put its vertex below every measured loss; the
    # star marks the LR on the measured curve instead, and the hover gives the parabola's value.
    spec = figures.loss_vs_lr(finished)
    markers = by_name(spec, "interpolated optimum")
    assert markers
    checked = 0
    for t in markers:
        assert "parabola minimum" in t["hovertemplate"]
        for x, y, c in zip(t["x"], t["y"], t["customdata"]):
            line = by_uid(spec, "loss_vs_lr", "method", t["meta"], c[0], "line")
            xs, ys = np.log(line["x"]), np.asarray(line["y"], dtype=float)
            if xs[0] <= np.log(x) <= xs[-1]:
                assert y == pytest.approx(float(np.interp(np.log(x), xs, ys)))
                checked += 1
    assert checked > 0


def test_loss_vs_lr_shows_each_cells_status_in_the_line_style(midway):
    spec = figures.loss_vs_lr(midway)
    status = group_status(midway)
    checked = set()
    for (method, size), st in status.items():
        try:
            trace = by_uid(spec, "loss_vs_lr", "method", method, size, "line")
        except AssertionError:
            continue  # no finished point yet
        expected = {"bracketed": "solid", "edge": "dash", "running": "dot"}[st]
        assert trace["line"]["dash"] == expected
        assert trace["meta"][3] == st
        checked.add(st)
    assert {"bracketed", "edge", "running"} <= checked
    running = by_name(spec, "running")
    assert sum(len(t["x"]) for t in running) == midway.points.filter(pl.col("state") == "running").height > 0


def test_loss_vs_lr_draws_off_scale_points_at_the_top_with_their_true_value():
    from dashboards.data import empty_frames

    points, cells, curves = empty_frames()
    rows = [{"seq": i, "point_id": f"m/L4/s0/lr={lr:g}", "cell_id": "m/L4/s0", "method": "m", "size": "L4", "depth": 4,
             "seed": 0, "lr": lr, "state": "ok", "objective": obj, "loss": obj}
            for i, (lr, obj) in enumerate([(1e-4, 3.9), (3e-4, 3.5), (1e-3, 3.4), (3e-3, 3.45), (1e-2, 3.6), (3e-2, 9.5)])]  # fmt: skip
    points = pl.DataFrame(rows, schema=points.schema)
    spec = figures.loss_vs_lr(SweepData.build("x", points, cells, curves))
    (off,) = by_name(spec, "off scale")
    assert off["x"] == [3e-2] and off["customdata"][0][2] == 9.5  # [size, seeds, mean]
    lo, hi = spec["layout"]["yaxis"]["range"]
    assert hi < 9.5 and lo < 3.4 and off["y"][0] < hi


def stalled_sweep() -> SweepData:
    """pre bracketed at L4 and L32; post bracketed at L4, every point stalled at L32 (both seeds)."""
    from dashboards.data import empty_frames

    points, cells, curves = empty_frames()
    rows, cell_rows = [], []
    for method, depth, seed, state in (("pre", 4, 0, "ok"), ("pre", 32, 0, "ok"), ("post", 4, 0, "ok"),
                                       ("post", 32, 0, "stalled"), ("post", 32, 1, "stalled")):
        cid = f"{method}/L{depth}/s{seed}"
        losses = [(1e-3, 2.4), (3e-3, 2.2), (1e-2, 2.3)] if state == "ok" else [(1e-3, 3.25), (3e-3, 3.26), (1e-2, 3.25)]
        for lr, loss in losses:
            rows.append({"seq": len(rows), "point_id": f"{cid}/lr={lr:g}", "cell_id": cid, "method": method,
                         "size": f"L{depth}", "depth": depth, "seed": seed, "lr": lr, "state": state, "loss": loss,
                         "objective": loss if state == "ok" else None,
                         "reason": "stalled: learned nothing beyond token frequencies" if state == "stalled" else None})
        ok = state == "ok"
        cell_rows.append({"cell_id": cid, "method": method, "size": f"L{depth}", "depth": depth, "seed": seed,
                          "status": "bracketed" if ok else "stalled", "n_points": 3, "n_stalled": 0 if ok else 3,
                          "best_lr": 3e-3 if ok else None, "best_objective": 2.2 if ok else None})
    return SweepData.build("x", pl.DataFrame(rows, schema=points.schema), pl.DataFrame(cell_rows, schema=cells.schema),
                           curves)


def test_stalled_points_and_failed_sizes_are_marked():
    data = stalled_sweep()
    spec = figures.loss_vs_lr(data)
    (stalled,) = by_name(spec, "stalled")  # the post panel: its L32 points, one marker per LR over both seeds
    assert stalled["x"] == [1e-3, 3e-3, 1e-2] and stalled["marker"]["symbol"] == style.STALLED_SYMBOL
    assert [c[1] for c in stalled["customdata"]] == [2, 2, 2] and stalled["customdata"][0][2] == pytest.approx(3.25)
    assert "□ stalled" in spec["layout"]["title"]["subtitle"]["text"]
    scaling = figures.scaling(data)
    failed = by_uid(scaling, "scaling", "post", "failed")
    assert failed["x"] == [32.0] and failed["yaxis"] == "y2" and failed["marker"]["symbol"] == ["x"]
    assert failed["customdata"] == [["L32", 2, 2, "stalled"]] and "no usable LR" in failed["name"]
    assert figures.uid("scaling", "pre", "failed") not in [t["uid"] for t in scaling["data"]]
    observed = by_uid(scaling, "scaling", "post", "observed")
    assert observed["x"] == [4.0]  # the failed size has no loss to draw
    status = figures.status_grid(data)
    assert "stalled" in [t["name"] for t in status["data"]]
    for name, (_, build) in figures.FIGURES.items():  # every figure of such a sweep is valid Plotly and JSON
        spec = build(data)
        figures.to_figure(spec)
        json.dumps(spec, allow_nan=False)


def test_loss_vs_lr_facet_by_size_colours_lines_by_method(finished):
    spec = figures.loss_vs_lr(finished, facet="size")
    trace = by_uid(spec, "loss_vs_lr", "size", "pre", "L8", "line")
    assert trace["line"]["color"] == finished.colours["pre"]
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert "<b>L4</b>" in titles and "<b>L32</b>" in titles
    with pytest.raises(ValueError):
        figures.loss_vs_lr(finished, facet="seed")


# Scaling and optimal LR -------------------------------------------------------------------------


def test_scaling_draws_the_fitted_curve_band_points_and_holdout_from_fits(finished):
    spec = figures.scaling(finished)
    for method, entry in finished.fits.methods.items():
        fit = entry.loss_fit
        line = by_uid(spec, "scaling", method, "fit")
        curve = np.array(fit.curve)
        assert np.allclose(line["x"], curve[:, 0]) and np.allclose(line["y"], curve[:, 1])
        if fit.trustworthy:
            band = by_uid(spec, "scaling", method, "band")
            n = len(curve)
            assert np.allclose(band["y"][:n], curve[:, 3]) and np.allclose(band["y"][n:], curve[::-1, 2])
            assert band["fill"] == "toself"
        else:  # an unreliable fit: dashed, named so, and its (meaningless) interval not drawn
            assert not [t for t in spec["data"] if t["uid"] == figures.uid("scaling", method, "band")]
            assert "(unreliable)" in line["name"] and "unreliable" in spec["layout"]["title"]["subtitle"]["text"]
        assert f"α = {fit.alpha.value:.3f}" in line["name"]
        assert (line["line"]["dash"] == "solid") == fit.trustworthy
        points = by_uid(spec, "scaling", method, "points")
        assert points["x"] == [p[0] for p in fit.points]
        hold = by_uid(spec, "scaling", method, "holdout")
        assert hold["x"] == [fit.holdout.x] and hold["y"] == [fit.holdout.actual]
        assert line["line"]["color"] == finished.colours[method]
    assert spec["layout"]["xaxis"]["type"] == "log"
    assert any(s.get("fillcolor") for s in spec["layout"].get("shapes", []))  # the extrapolated region


def test_scaling_without_fits_shows_the_cells_best_losses(midway):
    spec = figures.scaling(midway)
    cells = midway.cells.filter(pl.col("best_objective").is_finite())
    for method in midway.methods:
        trace = by_uid(spec, "scaling", method, "observed")
        mine = cells.filter(pl.col("method") == method)
        expected = (
            mine.group_by("depth")
            .agg(pl.col("best_objective").mean(), (pl.col("status") == "bracketed").all())
            .sort("depth")
        )
        assert trace["x"] == expected["depth"].cast(float).to_list()
        assert np.allclose(trace["y"], expected["best_objective"].to_numpy())
        assert trace["marker"]["symbol"] == ["circle" if b else "circle-open" for b in expected["status"]]
    assert "sweeper fit" in spec["layout"]["title"]["subtitle"]["text"]


def test_optimal_lr_draws_fit_band_and_extrapolated_targets_with_intervals(finished):
    spec = figures.optimal_lr(finished)
    for method, entry in finished.fits.methods.items():
        fit = entry.lr_fit
        targets = by_uid(spec, "optimal_lr", method, "targets")
        assert targets["x"] == [t.x for t in fit.targets]
        assert np.allclose(targets["y"], [t.lr for t in fit.targets])
        assert np.allclose(np.array(targets["y"]) + targets["error_y"]["array"], [t.hi for t in fit.targets])
        assert np.allclose(np.array(targets["y"]) - targets["error_y"]["arrayminus"], [t.lo for t in fit.targets])
        if fit.trustworthy:
            assert by_uid(spec, "optimal_lr", method, "band")["fill"] == "toself"
    assert spec["layout"]["yaxis"]["type"] == "log" and spec["layout"]["xaxis"]["type"] == "log"
    ticks = spec["layout"]["xaxis"]["tickvals"]
    assert 64.0 in ticks and 128.0 in ticks  # the targets are labelled on the depth axis


def test_optimal_lr_without_fits_plots_each_cells_interpolated_optimum(midway):
    spec = figures.optimal_lr(midway)
    for method in midway.methods:
        trace = by_uid(spec, "optimal_lr", method, "observed")
        cells = midway.cells.filter((pl.col("method") == method) & pl.col("best_lr").is_finite())
        expected = sorted(
            (r["interp_lr"] if r["interp_lr"] is not None else r["best_lr"]) for r in cells.iter_rows(named=True)
            if r["interp_lr"] is not None or not any(
                c["interp_lr"] is not None for c in cells.filter(pl.col("size") == r["size"]).iter_rows(named=True))
        )  # fmt: skip
        assert sorted(trace["y"]) == pytest.approx(expected)


def test_fits_with_missing_fields_do_not_break_the_figures(finished):
    sparse = FitsDocument.from_json({"version": 1, "x": "depth", "methods": {
        "pre": {"loss_fit": {"curve": [[4, 3.9, None, None], [8, None], [16, 3.6, 3.5, 3.7]], "alpha": {"value": None}},
                "lr_fit": {"curve": [], "targets": [{"x": 64}]}},
        "layerrope": {}}})  # fmt: skip
    data = SweepData.build("b", finished.points, finished.cells, finished.curves, sparse)
    for build in (figures.scaling, figures.optimal_lr):
        figures.to_figure(build(data))
    line = by_uid(figures.scaling(data), "scaling", "pre", "fit")
    assert line["x"] == [4.0, 16.0]
    # a wrongly typed one never reaches the figures: it is refused where fits.json is read
    for wrong in ({"methods": {"post": None}}, {"methods": {"layerrope": {"loss_fit": "nonsense"}}},
                  {"methods": {"pre": {"loss_fit": {"curve": [[8, "x"]]}}}}):
        with pytest.raises(DocumentError):
            FitsDocument.from_json(wrong)


# Learning curves ---------------------------------------------------------------------------------


def test_learning_curves_downsample_but_keep_each_curves_extremes(finished):
    budget = 8
    spec = figures.learning_curves(finished, max_vertices=budget)
    good = [t for t in spec["data"] if t["uid"] == figures.uid("learning_curves", "pre", "L8", "good")][0]
    # curves are separated by one null each
    runs, current = [], []
    for x, y in zip(good["x"], good["y"]):
        if x is None:
            runs.append(current)
            current = []
        else:
            current.append(y)
    runs.append(current)
    assert all(len(r) <= budget for r in runs)
    curves = finished.curves.filter((pl.col("method") == "pre") & (pl.col("size") == "L8"))
    states = dict(zip(finished.points["point_id"], finished.points["state"]))
    ok_ids = [p for p in curves["point_id"].unique() if states[p] not in ("diverged", "failed")]
    assert len(runs) == len(ok_ids)
    stored_min = sorted(
        curves.filter(pl.col("point_id").is_in(ok_ids))
        .group_by("point_id")
        .agg(pl.col("train_loss").min())["train_loss"]
    )
    drawn_min = sorted(min(v for v in r if v is not None) for r in runs)
    assert np.allclose(drawn_min, stored_min, atol=1e-4)


def test_learning_curves_draw_diverged_points_dotted_and_group_by_size(finished):
    spec = figures.learning_curves(finished)
    bad = [t for t in spec["data"] if t.get("line", {}).get("dash") == "dot"]
    assert bad and all("diverged/stalled/failed" in t["name"] for t in bad)
    legend = [t["name"] for t in spec["data"] if t.get("showlegend", True)]
    assert legend == list(finished.sizes)  # one legend entry per size, for every method at once
    assert spec["layout"]["yaxis"]["range"][1] < 6  # the first steps near ln(vocab) do not squash the plot


# Status grid and progress -----------------------------------------------------------------------------


def test_status_grid_colours_each_cell_by_status_and_counts_points(midway):
    spec = figures.status_grid(midway)
    heat = spec["data"][0]
    order = list(style.STATUS_COLOURS)
    status = group_status(midway)
    counts = midway.points.group_by("method", "size").agg(
        pl.len(), pl.col("state").is_in(["ok", "diverged", "failed"]).sum().alias("done"),
        (pl.col("state") == "diverged").sum().alias("diverged"),
    )
    seeds = midway.cells.group_by("method", "size").agg(pl.len().alias("n"))
    n_seeds = {(r["method"], r["size"]): r["n"] for r in seeds.iter_rows(named=True)}
    for r in counts.iter_rows(named=True):
        i = heat["y"].index(r["method"])
        j = heat["x"].index(r["size"])
        st = status[(r["method"], r["size"])]
        assert heat["z"][i][j] == pytest.approx((order.index(st) + 0.5) / len(order))
        n = n_seeds[(r["method"], r["size"])]
        # points summed over the seeds the cell names; diverged points said, never hidden behind the colour
        assert heat["text"][i][j] == (f"{st}<br>{r['done']}/{r['len']} pts · {n} seed{'s' if n > 1 else ''}"
                                      + (f"<br>{r['diverged']} diverged" if r["diverged"] else ""))
    legend = [t["name"] for t in spec["data"][1:]]
    assert legend == ["pending", "running", "bracketed", "edge", "diverged"]


def test_progress_totals_match_the_store(finished):
    spec = figures.progress(finished)
    done = finished.points.filter(pl.col("state").is_in(["ok", "diverged", "failed"]))
    total = by_uid(spec, "progress", "\x00all", 1)
    assert total["y"][-1] == done.height
    flop = by_uid(spec, "progress", "\x00all", 2)
    unit = spec["layout"]["yaxis2"]["title"]["text"]
    factor = {"(PFLOP)": 1e15, "(TFLOP)": 1e12, "(GFLOP)": 1e9, "(EFLOP)": 1e18}.get(unit.split()[-1], 1.0)
    assert flop["y"][-1] * factor == pytest.approx((done["flops_per_token"] * done["tokens"]).sum())
    # the throughput curve integrates to the tokens trained
    tput = by_uid(spec, "progress", "throughput")
    x = np.array(tput["x"])
    scale = {"s": 1, "min": 60, "h": 3600, "days": 86400}[spec["layout"]["xaxis3"]["title"]["text"].split("(")[1][:-1]]
    width = (x[1] - x[0]) * scale
    assert sum(tput["y"]) * width == pytest.approx(done["tokens"].sum(), rel=1e-3)
    for method in finished.methods:
        assert by_uid(spec, "progress", method, 1)["line"]["color"] == finished.colours[method]


# Style across figures --------------------------------------------------------------------------------


def test_one_colour_per_method_in_every_figure(finished):
    """Method-coloured traces use exactly the method's colour; size-shaded ones a shade of it."""
    checked = {}
    for name, (_, build) in figures.FIGURES.items():
        for trace in build(finished)["data"]:
            meta = trace.get("meta")
            method = meta[0] if isinstance(meta, list) and meta else meta
            colour = (trace.get("line") or {}).get("color")
            if method not in finished.colours or not isinstance(colour, str):
                continue
            if name in ("scaling", "optimal_lr", "progress"):
                assert colour == finished.colours[method], (name, trace["uid"])
            else:  # loss_vs_lr, learning_curves: one shade of the method's colour per size
                assert colour in {finished.size_shade(method, s) for s in finished.sizes}, (name, trace["uid"])
            checked[name] = checked.get(name, 0) + 1
    assert set(checked) == {"scaling", "optimal_lr", "progress", "loss_vs_lr", "learning_curves"}

def test_names_from_the_yaml_are_escaped_wherever_plotly_renders_html(tmp_path):
    from dashboards.data import load_sweep
    from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep

    sweep = SyntheticSweep(
        tmp_path / "s", SyntheticSpec(methods=("pre", HOSTILE), depths=(4, 8), lrs_per_cell=4, steps=40)
    )
    sweep.finish()
    data = load_sweep(sweep.root)
    rendered = {"name", "text", "hovertemplate", "meta", "customdata", "ticktext", "tickvals", "x", "y", "hovertext"}

    def strings(node, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from strings(v, k)
        elif isinstance(node, list):
            for v in node:
                yield from strings(v, key)
        elif isinstance(node, str) and (key in rendered or key is None):
            yield node

    for name, (_, build) in figures.FIGURES.items():
        spec = build(data)
        texts = list(strings(spec["data"])) + list(strings(spec["layout"]))  # layout: titles, annotations, ticks
        assert not [t for t in texts if "<img" in t], name
        assert any("&lt;img src=x onerror=alert(1)&gt;" in t for t in texts), name


def test_filters_keep_colours_and_shades_of_the_whole_sweep(finished):
    narrowed = finished.filtered(Filters(methods=frozenset({"post"}), sizes=frozenset({"L16"}), seeds=frozenset({1})))
    assert set(narrowed.points["method"]) == {"post"} and set(narrowed.points["seed"]) == {1}
    assert narrowed.colours == finished.colours and narrowed.sizes == finished.sizes
    spec = figures.loss_vs_lr(narrowed)
    line = by_uid(spec, "loss_vs_lr", "method", "post", "L16", "line")
    assert line["line"]["color"] == finished.size_shade("post", "L16")
    assert set(narrowed.fits.methods) == {"post"}


def test_log_ticks_cover_the_range_with_readable_labels():
    vals, labels = figures.log_ticks(2e-4, 3e-2)
    assert min(vals) <= 2e-4 and max(vals) >= 3e-2
    assert "1e-3" in labels and "1e-2" in labels
    vals, labels = figures.log_ticks(3.2e-3, 4.5e-3)  # a narrow range still gets several ticks inside it
    assert sum(3.2e-3 <= v <= 4.5e-3 for v in vals) >= 2
    assert figures.log_ticks(0, 1) == ([], [])
    vals, _ = figures.log_ticks(2e-3, 2e-3)  # a single value
    assert sum(1e-3 <= v <= 4e-3 for v in vals) >= 3
    assert all(math.isfinite(v) for v in vals)


def test_past_max_curves_only_running_and_each_cells_best_curve_are_drawn(midway, monkeypatch):
    from dashboards.figures import curves

    monkeypatch.setattr(curves, "MAX_CURVES", 10)
    spec = figures.learning_curves(midway)
    running = set(midway.points.filter(pl.col("state") == "running")["point_id"])
    best = figures.best_point_ids(midway.cells)
    with_curves = set(midway.curves["point_id"])
    expected = (running | best) & with_curves
    drawn_lrs = sorted(v for t in spec["data"] for v in t.get("customdata") or [] if v is not None)
    assert len(set(drawn_lrs)) <= len({p.rsplit("=", 1)[1] for p in expected})
    n_curves = sum(t["x"].count(None) + 1 for t in spec["data"] if t.get("mode") == "lines" and t["x"] != [None])
    assert n_curves == len(expected)
    subtitle = spec["layout"]["title"]["subtitle"]["text"]
    assert f"{len(expected)} of {len(with_curves)} curves" in subtitle and "filter to see all" in subtitle


def test_status_grid_marks_stalled_points_in_a_green_cell(tmp_path):
    """A bracketed cell with stalled points says so (□), its points summed over its seeds (issue 33)."""
    import json as _json

    from dashboards.data import load_sweep
    from sweeper.core.grid import LRPolicy
    from sweeper.core.rows import CellFacts, PointRow
    from sweeper.records.fold import current_points, summarize
    from sweeper.records.store import MANIFEST, STORE_VERSION, StoreWriter

    facts = {s: CellFacts(cell_id=f"post/L32/s{s}", method="post", size="L32", depth=32, seed=s) for s in (0, 1)}
    rows = []
    for s, cell in facts.items():
        for lr, state, loss in ((1e-3, "stalled", 3.24), (2e-3, "ok", 3.0), (4e-3, "ok", 2.9), (8e-3, "ok", 3.1),
                                (1.6e-2, "diverged", None)):
            rows.append(PointRow(cell, lr, state, objective=loss if state == "ok" else None, loss=loss, steps=10,
                                 tokens=100))
    root = tmp_path / "sweep"
    root.mkdir()
    (root / MANIFEST).write_text(_json.dumps({"store_version": STORE_VERSION, "name": "stalls", "x": "depth"}))
    writer = StoreWriter(root)
    writer.append_points(rows)
    policy = LRPolicy(lo=1e-4, hi=1.0, max_points=8, refine=False)
    writer.write_cells(summarize({c.cell_id: c for c in facts.values()}, current_points(rows),
                                 {c.cell_id: policy for c in facts.values()}, now=1.0))
    spec = figures.status_grid(load_sweep(root))
    assert spec["data"][0]["text"] == [["bracketed<br>10/10 pts · 2 seeds<br>2 diverged, □ 2 stalled"]]
    assert "summed over seeds" in spec["layout"]["title"]["text"]
