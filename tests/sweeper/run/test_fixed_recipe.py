"""A fixed recipe (`lr: {fixed: X}`): one point per cell at the recipe's learning rate, no search, the cell's
own status `fixed`; readers (optima, fits, figures) claim no optimum and compare at equal recipe. Driven
through the real cell book, ledger and store (no Ray), then the real `sweeper optima` / `sweeper fit`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.records.durable import write_json_atomic
from sweeper.core.states import CellStatus, PointState
from sweeper.records.store import MANIFEST, load_cells, load_points
from sweeper.run.sweep_dir import manifest_for
from sweeper.core.grid import GridPoint, LRPolicy
from sweeper.search.bracketing import decide
from sweeper.spec.schema import LRSection
from tests.sweeper.run.driving import make_sweep
from tests.sweeper.run.test_sweep_run import drive

RECIPE = 2e-3


def test_decide_trains_the_recipes_one_learning_rate_and_claims_no_optimum() -> None:
    policy = LRSection.model_validate({"fixed": RECIPE}).to_policy()
    assert decide([], policy).next_lrs == (RECIPE,)
    assert decide([GridPoint(RECIPE, PointState.RUNNING)], policy).status == "running"
    done = decide([GridPoint(RECIPE, PointState.OK, 3.2)], policy)
    assert done.status == CellStatus.FIXED and done.done and not done.next_lrs
    assert done.best == GridPoint(RECIPE, PointState.OK, 3.2) and done.interp_lr is None
    assert decide([GridPoint(RECIPE, PointState.DIVERGED)], policy).status == "diverged"
    assert decide([GridPoint(RECIPE, PointState.STALLED, 6.0)], policy).status == "stalled"
    assert decide([GridPoint(RECIPE, PointState.FAILED)], policy).status == "failed"
    # points of an earlier, swept launch at other learning rates are not the recipe's
    swept = [GridPoint(1e-3, PointState.OK, 3.0), GridPoint(4e-3, PointState.OK, 3.1)]
    assert decide(swept, policy).next_lrs == (RECIPE,)
    # the same points under a search policy would bracket nothing without more points; never `fixed`
    assert decide([GridPoint(RECIPE, PointState.OK, 3.2)], LRPolicy(points=1)).status != "fixed"


@pytest.mark.parametrize("raw, error", [
    ({"fixed": 1e-3, "grid": [1e-3]}, "not both"),
    ({"fixed": 1e-3, "prior": "extrapolate"}, "leave prior out"),
    ({"fixed": 0.5, "bounds": [1e-5, 0.1]}, "within lr.bounds"),
])
def test_a_fixed_recipe_refuses_search_settings(raw: dict, error: str) -> None:
    with pytest.raises(Exception, match=error):
        LRSection.model_validate(raw)


@pytest.fixture(scope="module")
def fixed_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished fixed-recipe sweep (2 methods x 2 depths), shared by the tests below (read-only but fits.json)."""
    tmp_path = tmp_path_factory.mktemp("recipe")
    raw = {
        "name": "recipe", "methods": ["pre", "layerrope"],
        "model": {"width": 32, "heads": 2, "depths": [2, 4], "seq_len": 32},
        "train": {"steps": 30, "batch_size": 4},
        "lr": {"fixed": RECIPE},
        "stack": 3,
    }
    state = make_sweep(tmp_path, raw, concurrency=2)
    state.load([])
    # a loss that falls with depth and is lower for LayerRoPE, at the recipe's LR
    configs = drive(state, loss=lambda depth, lr: 3.0 + 1.0 / depth + (0.0 if lr == RECIPE else 9.0))
    assert [c["spec"]["lrs"] for c in configs] == [[RECIPE]] * 4  # one trial, one point per cell
    assert all(state.book.decisions[cid].status == CellStatus.FIXED for cid in state.cells)
    state.flush(force=True)
    sweep = state.plan.sweep_dir
    (sweep / "sweep.yaml").write_text(json.dumps(raw))
    write_json_atomic(sweep / MANIFEST, manifest_for(state.plan, None, state.ledger.url).to_json())
    return sweep


def test_a_fixed_recipe_sweep_ends_fixed_and_fits_compare_at_equal_recipe(fixed_sweep: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    sweep = fixed_sweep
    assert set(load_cells(sweep)["status"]) == {"fixed"}
    assert load_points(sweep).height == 4
    assert main(["optima", str(sweep), "--format", "json"]) == 0
    optima = json.loads(capsys.readouterr().out)
    assert {c["status"] for c in optima["cells"]} == {"fixed"} and optima["points_per_bracketed_cell"]["all"] is None
    assert main(["fit", str(sweep), "--json", "--no-write", "--resamples", "200"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for method in ("pre", "layerrope"):
        m = doc["methods"][method]
        assert m["lr_fit"] is None  # no optimum was searched: no LR law
        assert m["recipe"] == {"kind": "fixed", "lrs": [RECIPE]}
        assert [s["lr_source"] for s in m["sizes"]] == [["fixed"], ["fixed"]]
        assert [s["loss"] for s in m["sizes"]] == pytest.approx([3.5, 3.25])
    assert all(r["comparable"] for r in doc["ranking"])  # the same recipe for both methods
    assert "fixed-recipe method" in doc["inputs"]["rule"]
    assert main(["fit", str(sweep), "--no-write", "--resamples", "200"]) == 0
    assert "fixed recipe (lr 0.002): no LR law" in capsys.readouterr().out


def test_figures_draw_a_fixed_recipes_points_but_no_optimum(fixed_sweep: Path) -> None:
    from dashboards import figures
    from dashboards.data import load_sweep

    sweep = fixed_sweep
    assert main(["fit", str(sweep), "--resamples", "200"]) == 0  # writes fits.json, which the figures read
    data = load_sweep(sweep)
    specs = figures.all_figures(data)
    # the LR figures mark no optimum: no optimal-LR marker and no LR law for a fixed recipe
    optimum_traces = [t for t in specs["optimal_lr"]["data"] if t.get("y")]
    assert optimum_traces == []
    stars = [t for t in specs["loss_vs_lr"]["data"] if t.get("name") in ("best grid point", "interpolated optimum")
             and any(v is not None for v in t.get("y") or [])]
    assert stars == []
    # the scaling figure shows the recipe's losses, labelled as such
    observed = [t for t in specs["scaling"]["data"] if t.get("customdata") and t["name"].endswith(" cells")]
    assert observed and all(row[2] == "fixed recipe, no LR search" for t in observed for row in t["customdata"])
    seeds = [t for t in specs["scaling"]["data"] if t["name"].endswith(" seeds")]  # each seed's point, its status
    assert seeds and all(row[2] == "fixed" for t in seeds for row in t["customdata"])
    legend = [t["name"] for t in specs["status"]["data"][1:]]
    assert "fixed" in legend and "bracketed" in legend
