"""The figures show the seeds: each seed's point, the mean ± its t-interval (none with one seed), stalled cells
at their loss, per-seed loss-against-LR curves, and the paired leads panel."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dashboards import figures
from dashboards.data import load_sweep
from dashboards.figures.common import present_methods, uid
from sweeper.analysis.compare import compare
from tests.sweeper.analysis.fits.conftest import Truth, write_sweep


@pytest.fixture
def sweep(tmp_path):
    return write_sweep(tmp_path / "s", {"pre": Truth(E=3.1), "layerrope": Truth(E=3.0)}, [2, 4, 8], seeds=(0, 1, 2),
                       noise=0.03, rng_seed=5, stalled_seeds={("pre", 8, 2)})


def by_uid(spec):
    return {t.get("uid"): t for t in spec["data"]}


def test_scaling_shows_each_seed_and_the_t_interval(sweep):
    data = load_sweep(sweep)
    spec = figures.scaling(data)
    figures.to_figure(spec)
    traces = by_uid(spec)
    seeds = traces[uid("scaling", "layerrope", "seeds")]
    assert len(seeds["y"]) == 9  # 3 sizes × 3 seeds
    mean = traces[uid("scaling", "layerrope", "seed-mean")]
    cells = data.cells.filter(data.cells["method"] == "layerrope").sort("size", "seed")
    for x, m, half in zip(mean["x"], mean["y"], mean["error_y"]["array"]):
        vals = cells.filter(cells["depth"] == int(x))["best_objective"].to_list()
        assert m == pytest.approx(np.mean(vals))
        assert half == pytest.approx(stats.t.ppf(0.975, 2) * np.std(vals, ddof=1) / math.sqrt(3))
    # pre at depth 8: seed 2 stalled, drawn at its stalled loss; the two others keep a df-1 interval
    stalled = traces[uid("scaling", "pre", "stalled")]
    assert stalled["x"] == [8.0] and stalled["customdata"][0][1] == 2
    pre_mean = traces[uid("scaling", "pre", "seed-mean")]
    i = pre_mean["x"].index(8.0)
    assert pre_mean["customdata"][i][1:3] == [2, 1]


def test_one_seed_draws_no_bar(tmp_path):
    data = load_sweep(write_sweep(tmp_path / "one", {"pre": Truth()}, [2, 4, 8]))
    traces = by_uid(figures.scaling(data))
    assert uid("scaling", "pre", "seeds") in traces and uid("scaling", "pre", "seed-mean") not in traces


def test_loss_vs_lr_has_a_curve_per_seed(sweep):
    spec = figures.loss_vs_lr(load_sweep(sweep))
    figures.to_figure(spec)
    traces = by_uid(spec)
    for seed in (0, 1, 2):
        assert uid("loss_vs_lr", "method", "layerrope", "L4", "seed", seed) in traces


def test_leads_panel_is_the_compare_command(sweep):
    data = load_sweep(sweep)
    spec = figures.leads(data)
    figures.to_figure(spec)
    base, other = present_methods(data)[:2]
    mean = by_uid(spec)[uid("leads", other, "mean")]
    result = compare(sweep, base, other)
    assert mean["y"] == pytest.approx([c.mean for c in result.sizes])
    assert mean["error_y"]["array"] == pytest.approx([c.ci[1] - c.mean for c in result.sizes])


def test_a_partial_size_is_marked_on_the_scaling_figure(sweep):
    from sweeper.cli import main

    assert main(["fit", str(sweep), "--resamples", "200"]) == 0  # writes fits.json; pre L8 is partial
    spec = figures.scaling(load_sweep(sweep))
    figures.to_figure(spec)
    partial = by_uid(spec)[uid("scaling", "pre", "partial")]
    assert partial["x"] == [8.0] and partial["marker"]["symbol"] == ["diamond-open"]  # not fitted
    assert "s2 stalled" in partial["customdata"][0][1]
