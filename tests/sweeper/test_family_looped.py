"""The looped family through the tool: named sizes, the loop-count axis, trials (deterministic loop
counts, exact resume), and the fits / dashboards reading the loop count as the x axis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models import count_params, named_config
from models.families.looped import loop_settings
from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.search.planner import build_plan
from sweeper.spec.schema import load_sweep, validate_data
from trials.run import run_trial
from trials.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[2]


def test_named_looped_sizes_and_their_gpt_baselines_in_sweeper_models(capsys):
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["configs"]}
    for name, (width, split) in {"parcae-140M": (768, "2/2/2"), "parcae-370M": (1024, "4/4/4"), "parcae-770M": (1280, "6/6/6")}.items():
        looped, gpt = rows[name], rows[f"{name}-gpt"]
        assert (looped["family"], looped["blocks"], looped["width"], looped["ladder"]) == ("looped", split, width, "looped")
        assert gpt["family"] == "llama" and gpt["depth"] == looped["depth"] == 3 * int(split[0])
        # the re-injection B, dt, A and the prelude norm's gain
        assert looped["params"] - gpt["params"] == width * width + 3 * width
        assert looped["params"] == count_params(named_config(name))["total"]
        assert looped["mlp_hidden"] == gpt["mlp_hidden"] == 4 * width  # the ReLU^2 MLP of both
    assert round(rows["parcae-140M"]["params"] / 1e6) == 144  # schemes.md: about 143M with its value tables
    assert {"parcae-tiny", "parcae-tiny-gpt", "ViT-T", "ViT-S", "vit-tiny"} <= set(rows)
    assert round(rows["ViT-T"]["params"] / 1e5) == 57 and round(rows["ViT-S"]["params"] / 1e6) == 22  # DeiT-Ti 5.7M, DeiT-S 22M
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    assert "parcae-370M" in table and "4/4/4" in table and "ViT-S" in table


def test_study_sweeps_plan():
    plan = build_plan(load_sweep(ROOT / "sweeps" / "parcae.yaml").config, output="/tmp/unused")
    cell = plan.by_id()["layerrope/parcae-370M/s0"]
    assert cell.family == "looped" and cell.depth == 12 and cell.x == cell.params
    extra = cell.model.extra
    loops = loop_settings(cell.model)  # the family's defaults filled in (Parcae's mean 8, gradients through 4)
    assert (loops.prelude, loops.core, loops.coda, loops.mean_loops, loops.backprop_loops) == (4, 4, 4, 8, 4)
    baseline = build_plan(load_sweep(ROOT / "sweeps" / "parcae-baseline.yaml").config, output="/tmp/unused")
    gpt = baseline.by_id()["layerrope/parcae-370M-gpt/s0"]
    assert gpt.family == "llama" and gpt.params == cell.params - (1024 * 1024 + 3 * 1024)
    assert gpt.model.extra["mlp"] == extra["mlp"] == "relu2" and gpt.model.extra["value_embeddings"]


def test_loop_count_axis():
    cfg = validate_data({
        "name": "loops", "methods": ["pre"], "data": {"source": "synthetic"}, "train": {"steps": 5},
        "model": {"family": "looped", "width": 32, "heads": 2, "loops": [1, 4, 16], "seq_len": 16,
                  "extra": {"prelude": 1, "core": 2, "coda": 1, "backprop_loops": 2}},
    })
    plan = build_plan(cfg, output="/tmp/unused")
    cells = {c.size: c for c in plan.cells}
    assert list(cells) == ["T1", "T4", "T16"]
    for count, cell in zip((1, 4, 16), cells.values()):
        assert cell.loops == count and cell.x == count and cell.depth == cell.model.depth == 4
        assert cell.model.extra["mean_loops"] == count == cell.model.extra["eval_loops"]
    assert cells["T1"].params == cells["T16"].params
    assert cells["T1"].flops_per_token < cells["T4"].flops_per_token < cells["T16"].flops_per_token
    with pytest.raises(UserError, match="needs family: looped"):
        validate_data({"name": "x", "methods": ["pre"], "train": {"steps": 5}, "model": {"loops": [2]}})
    with pytest.raises(UserError, match="not depths"):
        validate_data({"name": "x", "methods": ["pre"], "train": {"steps": 5}, "model": {"family": "looped", "depths": [6]}})


def test_looped_trial_samples_loops_per_step_and_resumes_exactly(tmp_path):
    spec = TrialSpec.from_dict({
        "model": {"family": "looped", "scheme": "layerrope", "width": 32, "depth": 4, "n_heads": 2, "vocab": 64,
                  "seq_len": 16, "extra": {"prelude": 1, "core": 2, "coda": 1, "mean_loops": 3, "backprop_loops": 2,
                                           "eval_loops": 3, "loop_sampling": "per_sequence"}},
        "train": {"steps": 30, "batch_size": 8, "eval_every": 10, "eval_batches": 2, "checkpoint_every": 10},
        "data": {"source": "synthetic"},
        "divergence": {"stall_margin": None},  # 30 steps learn little: the stall rule is tested elsewhere
        "lrs": [3e-3, 1e-2],
    })
    full = run_trial(spec)
    assert [r.outcome for r in full] == ["ok", "ok"] and all(r.loss < r.init_loss for r in full)
    stopped = run_trial(spec, checkpoint_dir=tmp_path, should_stop=iter([False] * 15 + [True]).__next__)
    assert {r.outcome for r in stopped} == {"failed"}
    resumed = run_trial(spec, checkpoint_dir=tmp_path)
    for a, b in zip(full, resumed):
        assert a.loss == pytest.approx(b.loss, rel=1e-6)


def test_fits_and_dashboards_put_the_loop_count_on_the_x_axis(tmp_path, capsys):
    """A loop-count sweep stores T in the `loops` column (its `depth` is the number of blocks) and `x: loops`
    in the manifest: the fits and the dashboards' scaling figures use T as x, labelled as the loop count
    (with fits.json and before it)."""
    from dashboards.data import load_sweep as load_dashboard
    from dashboards.figures.scaling import optimal_lr, scaling
    from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep
    from sweeper.analysis.fits.report import LOOPS_LABEL
    from sweeper.records.store import load_points, read_manifest

    spec = SyntheticSpec(methods=("pre", "layerrope"), depths=(1, 2, 4, 8), loop_blocks=4, lrs_per_cell=5)
    sweep = SyntheticSweep(tmp_path / "s", spec)
    sweep.finish()
    assert read_manifest(tmp_path / "s").x == "loops"
    points = load_points(tmp_path / "s")
    assert set(points["loops"]) == {1, 2, 4, 8} and set(points["depth"]) == {4} and set(points["size"]) == {"T1", "T2", "T4", "T8"}
    data = load_dashboard(tmp_path / "s")
    assert data.x_kind == "loops" and {v["loops"] for v in data.size_values().values()} == {1.0, 2.0, 4.0, 8.0}
    for figure in (scaling(data), optimal_lr(data)):
        assert figure["layout"]["xaxis"]["title"]["text"].startswith("Loop count T")
        xs = {x for t in figure["data"] if t.get("mode") == "lines+markers" or t.get("mode") == "markers" for x in t["x"]}
        assert xs and xs <= {1.0, 2.0, 4.0, 8.0}
    assert main(["fit", str(tmp_path / "s"), "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert f"fits against {LOOPS_LABEL}" in out and "Loss vs loop count" in out
    doc = json.loads((tmp_path / "s" / "fits.json").read_text())
    assert doc["x"] == "depth" and doc["x_label"] == LOOPS_LABEL
    assert load_dashboard(tmp_path / "s").fits is not None
    assert scaling(load_dashboard(tmp_path / "s"))["layout"]["xaxis"]["title"]["text"].lower().startswith("loop count t")


def test_a_loop_count_store_of_version_1_reads_its_loop_count(tmp_path):
    """Store version 1 kept a loop-count sweep's T in `depth` (and had no `loops` column): its rows read as
    version 2 writes them, T in `loops` and the number of blocks unknown; the dashboards still put T on x."""
    import pyarrow.parquet as pq

    from dashboards.data import load_sweep as load_dashboard
    from sweeper.sim.synthetic import SyntheticSpec, SyntheticSweep
    from sweeper.records.durable import write_json_atomic, write_parquet_atomic
    from sweeper.records.store import MANIFEST, load_cells, load_points, read_manifest

    root = tmp_path / "s"
    sweep = SyntheticSweep(root, SyntheticSpec(methods=("pre",), depths=(1, 2, 4, 8), loop_blocks=4, lrs_per_cell=5))
    sweep.finish()
    for chunk in [*root.glob("store/points/*.parquet"), root / "store" / "cells.parquet"]:  # as version 1 wrote them
        table = pq.read_table(chunk)
        table = table.set_column(table.schema.get_field_index("depth"), "depth", table["loops"]).drop(["loops"])
        write_parquet_atomic(table, chunk)
    write_json_atomic(root / MANIFEST, {**read_manifest(root).to_json(), "store_version": 1})
    points, cells = load_points(root), load_cells(root)
    assert set(points["loops"]) == {1, 2, 4, 8} and points["depth"].null_count() == points.height
    assert set(cells["loops"]) == {1, 2, 4, 8}
    data = load_dashboard(root)
    assert data.sizes == ("T1", "T2", "T4", "T8")
    assert {v["loops"] for v in data.size_values().values()} == {1.0, 2.0, 4.0, 8.0}
