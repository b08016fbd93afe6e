"""`sweeper.open(DIR)`: the same numbers as the command line's JSON, on real stored sweeps (written with
the real StoreWriter: `sweeper.sim.synthetic` for points, curves and cells; the fits tests' planted power
laws for `sweeper fit`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest

import sweeper
from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep
from sweeper.api import FIGURE_NAMES, OPTIMA_SCHEMA, Fits
from sweeper.cli import main
from sweeper.core.errors import UserError
from tests.sweeper.analysis.fits.conftest import Truth, write_sweep

SPEC = SyntheticSpec(methods=("pre", "layerrope"), depths=(4, 8, 16), seeds=(0,), lrs_per_cell=5, steps=60,
                     report_every=10, name="api-sweep")


@pytest.fixture(scope="module")
def midway(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api") / "sweep"
    SyntheticSweep(root, SPEC).advance(0.6)
    return root


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_frames_are_the_cli_numbers(midway: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = sweeper.open(midway)
    assert sweep.name == "api-sweep"

    optima = sweep.optima()
    assert optima.schema == pl.Schema(OPTIMA_SCHEMA)
    assert optima.to_dicts() == _cli_json(capsys, "optima", str(midway), "--format", "json")["cells"]
    assert set(optima["status"]) >= {"bracketed", "running"}  # caught mid-sweep: not a trivially finished table

    assert sweep.cells().to_dicts() == _cli_json(capsys, "status", str(midway), "--json")["cells"]

    points = sweep.points()
    assert points["point_id"].n_unique() == points.height  # one row per point: its current state
    curves = sweep.curves()
    assert curves.height > points.height and set(curves["point_id"]) <= set(points["point_id"])
    finished = points.filter(pl.col("state") == "ok")
    assert finished.height and finished["objective"].is_not_null().all()


def test_fits_are_fits_json_typed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truths = {"pre": Truth(alpha=0.5, b=-0.5), "post": Truth(E=3.2, alpha=0.3, c=0.02, b=-0.8)}
    root = write_sweep(tmp_path / "fit", truths, [4, 8, 16, 32, 64], on_optimum=True)
    sweep = sweeper.open(root)
    assert sweep.fits() is None  # before `sweeper fit`

    doc = _cli_json(capsys, "fit", str(root), "--json", "--resamples", "200", "--to", "128")
    fits = sweep.fits()
    assert isinstance(fits, Fits)
    assert fits.document == doc
    assert fits.x == "depth" and fits.targets == (128.0,)
    assert set(fits.methods) == {"pre", "post"} and set(fits.ranking) == {"pre", "post"}
    for method, truth in truths.items():
        typed, raw = fits.methods[method], doc["methods"][method]
        assert typed.loss.alpha.value == raw["loss_fit"]["alpha"]["value"]
        assert typed.loss.E.lo == raw["loss_fit"]["E"]["lo"]
        assert typed.lr.exponent.value == raw["lr_fit"]["exponent"]["value"]
        assert [s.size for s in typed.sizes] == ["L4", "L8", "L16", "L32", "L64"]
        # the planted truths: L = E + A·depth^(-α) exactly at the grid's optimum, LR* = c·depth^b
        assert typed.loss.alpha.value == pytest.approx(truth.alpha, rel=0.02)
        assert typed.lr.exponent.value == pytest.approx(truth.b, abs=0.02)
        (target,) = typed.loss.targets
        assert target.x == 128 and target.value == pytest.approx(truth.E + truth.A * 128 ** -truth.alpha, rel=1e-3)
        assert typed.loss.points[0] == pytest.approx((4.0, truth.E + truth.A * 4 ** -truth.alpha))


def test_figures(midway: Path) -> None:
    sweep = sweeper.open(midway)
    fig = sweep.figure("loss_vs_lr")
    assert isinstance(fig, go.Figure)
    ok = sweep.points().filter(pl.col("state") == "ok")
    plotted = {round(y, 9) for trace in fig.data for y in (trace.y or ()) if isinstance(y, float) and math.isfinite(y)}
    assert {round(v, 9) for v in ok["objective"]} <= plotted  # every ok point's loss is drawn
    assert set(FIGURE_NAMES) == set(__import__("dashboards.figures", fromlist=["FIGURES"]).FIGURES)
    with pytest.raises(ValueError, match="no figure 'nope'; the figures are status, loss_vs_lr"):
        sweep.figure("nope")


def test_not_a_sweep(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a sweep directory"):
        sweeper.open(tmp_path)
