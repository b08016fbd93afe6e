"""The ViT family through the sweep tool: the YAML, the plan, and a real sweep on Ray that brackets."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.search.planner import build_plan
from sweeper.spec.schema import load_sweep, validate_data
from sweeper.records.store import load_cells, load_points, read_manifest
from trials.config import DataConfig
from trials.run import run_trial
from trials.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_vit_plan():
    cfg = load_sweep(ROOT / "sweeps" / "quickstart-vit.yaml").config
    plan = build_plan(cfg, output="/tmp/unused")
    assert plan.vocab == 10 and len(plan.cells) == 9
    cell = plan.by_id()["layerrope/L4/s0"]
    assert cell.family == "vit" and cell.x == 4 and cell.model.seq_len == 17  # 16 patches + the class token
    assert cell.tokens_per_point == 200 * 64 * 17
    assert cell.params == build_model_params(cell.model)


def build_model_params(cfg) -> int:
    from models import build_model

    return build_model(cfg).num_params()


def test_named_vit_sizes_plan_with_their_image_settings():
    cfg = validate_data({
        "name": "v", "methods": ["pre", "layerrope"], "model": {"family": "vit", "sizes": ["ViT-T", "ViT-S"]},
        "data": {"source": "builtin_images"}, "train": {"steps": 10},
    })
    plan = build_plan(cfg, output="/tmp/unused")
    cell = plan.by_id()["layerrope/ViT-S/s0"]
    assert cell.model.extra == {"image_size": 224, "patch_size": 16} and cell.model.seq_len == 197
    assert cell.model.mlp_hidden == 4 * 384 and cell.x == cell.params and plan.vocab == 10


@pytest.mark.parametrize(("model", "data", "message"), [
    ({"family": "vit", "depths": [2]}, {"source": "builtin"}, "the vit family trains on images"),
    ({"depths": [2]}, {"source": "builtin_images"}, "image data needs model.family: vit"),
    ({"family": "vit", "sizes": ["parcae-140M"]}, {"source": "builtin_images"}, "is a looped size"),
    ({"family": "vit", "depths": [2], "extra": {"image_size": 30}}, {"source": "builtin_images"}, "multiple of patch_size"),
])
def test_bad_vit_sweeps_are_one_line_errors(model, data, message):
    with pytest.raises(UserError) as info:
        validate_data({"name": "v", "methods": ["pre"], "model": model, "data": data, "train": {"steps": 5}})
    assert message in str(info.value) + " ".join(info.value.details or [])


def test_vit_trial_reports_accuracy_and_error_objective_and_resumes_exactly(tmp_path):
    spec = TrialSpec.from_dict({
        "model": {"family": "vit", "scheme": "layerrope", "width": 32, "depth": 2, "n_heads": 2, "vocab": 4, "seq_len": 17,
                  "extra": {"image_size": 16, "patch_size": 4, "drop_path": 0.1}},
        "train": {"steps": 12, "batch_size": 16, "eval_every": 6, "eval_batches": 2, "checkpoint_every": 6,
                  "objective": "error", "vision": {"crop": True, "flip": 0.5, "mixup": 0.8, "cutmix": 1.0,
                                                   "label_smoothing": 0.1}},
        "data": DataConfig(source="builtin_images", builtin_classes=4, builtin_per_class=40).model_dump(),
        "divergence": {"init_loss_margin": 1.0, "stall_margin": None},  # 12 steps: near chance, the stall rule is off
        "lrs": [1e-3, 3e-3],
    })
    full = run_trial(spec)
    assert [r.outcome for r in full] == ["ok", "ok"]
    for r in full:
        assert 0.0 <= r.accuracy <= 1.0 and r.objective == pytest.approx(1.0 - r.accuracy)
        assert r.tokens == 12 * 16 * 17 and r.corpus.startswith("builtin_images:")
    stopped = run_trial(spec, checkpoint_dir=tmp_path, should_stop=iter([False] * 7 + [True]).__next__)
    assert [r.outcome for r in stopped] == ["failed", "failed"]
    resumed = run_trial(spec, checkpoint_dir=tmp_path)
    for a, b in zip(full, resumed):
        assert a.loss == pytest.approx(b.loss, rel=1e-6) and a.accuracy == b.accuracy


@pytest.mark.slow
def test_vit_sweep_brackets_on_ray_and_the_dashboard_data_loads(ray_session, tmp_path, capsys):
    path = tmp_path / "vit.yaml"
    path.write_text(f"""\
name: vit-tiny-sweep
output: {tmp_path / 'out'}
methods: [pre, layerrope]
model: {{family: vit, width: 32, heads: 2, depths: [1], extra: {{image_size: 8, patch_size: 4}}}}
data: {{source: builtin_images, builtin_classes: 3, builtin_per_class: 120, val_fraction: 0.2}}
train: {{steps: 60, batch_size: 32, objective: error, eval_every: 60, eval_batches: 4, report_every: 10,
        checkpoint_every: 60, schedule: {{warmup: 0.1}}}}
divergence: {{init_loss_margin: 0.5, stall_margin: null}}  # seconds of training: the stall rule is tested elsewhere
lr: {{center: 3e-3, points: 3, factor: 8, refine: false, max_points: 6, bounds: [1e-6, 10]}}
resources: {{cpu: 1}}
concurrency: 2
stack: 3
""")
    assert main(["launch", str(path), "--address", ray_session]) == 0
    sweep = tmp_path / "out"
    cells = load_cells(sweep)
    assert set(cells["family"]) == {"vit"} and cells.height == 2
    points = load_points(sweep).filter(pl.col("state") == "ok")
    assert points["accuracy"].is_not_null().all()
    assert (points["objective"] - (1.0 - points["accuracy"])).abs().max() < 1e-9
    assert str(read_manifest(sweep).corpus).startswith("builtin_images:")
    from dashboards.data import load_sweep as load_dashboard

    dashboard = load_dashboard(sweep)
    assert dashboard.is_classification and dashboard.objective_label.startswith("Top-1 error")
