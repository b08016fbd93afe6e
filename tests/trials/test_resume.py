"""Checkpoints: atomic folders, and exact resume (2N steps == N steps + resume + N steps),
also across a member that diverged and was dropped from the stack before the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from models import ModelConfig
from trials.checkpoint import latest_checkpoint, list_checkpoints
from trials.config import DataConfig, DivergenceConfig, ScheduleConfig, TrainConfig
from trials.errors import TrialInputError
from trials.run import run_trial
from trials.spec import PointResult, StepReport, TrialSpec

N = 8


def make_spec(lrs: list[float], **train: object) -> TrialSpec:
    recipe = dict(steps=2 * N, batch_size=4, eval_every=5, eval_batches=2, checkpoint_every=N, report_every=1,
                  schedule=ScheduleConfig(warmup=3))
    recipe.update(train)
    return TrialSpec(
        model=ModelConfig(scheme="layerrope", width=32, depth=2, n_heads=2, vocab=48, seq_len=16),
        train=TrainConfig(**recipe),  # type: ignore[arg-type]
        data=DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192),
        lrs=lrs,
        seed=1,
        point_ids=[f"p{i}" for i in range(len(lrs))],
        divergence=DivergenceConfig(stall_margin=None),  # 16 steps learn little: the stall rule is tested elsewhere
    )


def stop_after(n: int, reports: list[StepReport]):
    return lambda: bool(reports) and reports[-1].step >= n


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("lrs", [[3e-3, 3e-2], [3e-3, 60.0]], ids=["two-ok", "one-dropped"])
def test_resume_is_exact(tmp_path: Path, lrs: list[float]) -> None:
    spec = make_spec(lrs)
    straight = run_trial(spec, checkpoint_dir=tmp_path / "a", export_dir=tmp_path / "a-w")

    reports: list[StepReport] = []
    first = run_trial(spec, report=reports.append, checkpoint_dir=tmp_path / "b", export_dir=tmp_path / "b-w",
                      should_stop=stop_after(N, reports))
    assert reports[-1].step == N and not reports[-1].done
    assert {r.outcome for r in first if r.outcome != "diverged"} == {"failed"}
    assert all(r.reason == f"stopped at step {N} of {2 * N}" for r in first if r.outcome == "failed")
    assert not (tmp_path / "b-w").exists()  # nothing exported before the end
    assert [p.name for p in list_checkpoints(tmp_path / "b")] == [f"step-{N:09d}"]

    more: list[StepReport] = []
    resumed = run_trial(spec, report=more.append, checkpoint_dir=tmp_path / "b", export_dir=tmp_path / "b-w")
    assert more[0].step == N + 1 and more[-1].done and more[-1].step == 2 * N
    for a, b in zip(straight, resumed):
        assert a.outcome == b.outcome and a.diverged_step == b.diverged_step and a.reason == b.reason
        assert a.init_loss == b.init_loss
        if a.outcome == "ok":
            assert b.loss == pytest.approx(a.loss, abs=1e-6, rel=0)
    for i in range(len(lrs)):
        wa, wb = weights(tmp_path / "a-w" / str(i)), weights(tmp_path / "b-w" / str(i))
        assert wa.keys() == wb.keys()
        for name in wa:
            torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=0, equal_nan=True)
    # Training time accumulates over both sessions.
    assert resumed[0].train_seconds >= reports[-1].train_seconds


def test_export_layout(tmp_path: Path) -> None:
    spec = make_spec([3e-3, 60.0], steps=6)
    results = run_trial(spec, export_dir=tmp_path / "w")
    for i, result in enumerate(results):
        config = json.loads((tmp_path / "w" / str(i) / "config.json").read_text())
        assert config["format"] == "layerrope-sweeper"
        assert config["model"] == spec.model.to_dict()
        assert (config["lr"], config["point_id"], config["outcome"]) == (result.lr, result.point_id, result.outcome)
        w = weights(tmp_path / "w" / str(i))
        assert w["head"].shape == (32, 48) and w["tok_emb"].shape == (48, 32)  # the K dimension removed
    assert results[1].outcome == "diverged"


def test_export_of_the_best_member_only(tmp_path: Path) -> None:
    spec = make_spec([3e-3, 1e-2, 60.0], steps=6)
    results = run_trial(spec, export_dir=tmp_path / "w", export_best_only=True)
    ok = [r for r in results if r.outcome == "ok"]
    best = min(ok, key=lambda r: r.objective)
    (folder,) = (tmp_path / "w").iterdir()  # one member written: the lowest objective among the ok ones
    assert folder.name == str(results.index(best))
    assert json.loads((folder / "config.json").read_text())["point_id"] == best.point_id


def test_finished_checkpoint_returns_results_without_training(tmp_path: Path) -> None:
    spec = make_spec([3e-3], steps=4, checkpoint_every=100)
    done = run_trial(spec, checkpoint_dir=tmp_path)
    reports: list[StepReport] = []
    again = run_trial(spec, checkpoint_dir=tmp_path, report=reports.append)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in done]
    assert len(reports) == 1 and reports[0].done and reports[0].step == 4
    assert PointResult.from_dict(json.loads(json.dumps(done[0].to_dict()))) == done[0]


def test_checkpoints_are_atomic_and_pruned(tmp_path: Path) -> None:
    (tmp_path / ".tmp-step-000000099-1").mkdir(parents=True)  # debris of a crash mid-write
    (tmp_path / ".tmp-step-000000099-1" / "state.json").write_text("{")
    run_trial(make_spec([3e-3], steps=10, checkpoint_every=3), checkpoint_dir=tmp_path)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000010"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000000010"]  # the debris is gone too
    found = latest_checkpoint(tmp_path)
    assert found is not None and sorted(f.name for f in found.iterdir()) == [
        "extra.safetensors", "model.safetensors", "optimizer.safetensors", "state.json"]
    state = json.loads((found / "state.json").read_text())
    assert state["step"] == 10 and state["data"] == {"kind": "array", "sequences": 40, "seed": state["data"]["seed"], "window": 17}


def test_resume_refuses_another_spec(tmp_path: Path) -> None:
    run_trial(make_spec([3e-3], steps=3), checkpoint_dir=tmp_path)
    with pytest.raises(TrialInputError, match="belongs to another trial"):
        run_trial(make_spec([1e-2], steps=3), checkpoint_dir=tmp_path)
    # Report and checkpoint cadence do not change the numbers: resuming under them is allowed.
    run_trial(make_spec([3e-3], steps=3, report_every=7, checkpoint_every=2), checkpoint_dir=tmp_path)
