"""Trials with Muon + AdamW and a WSD schedule: tiny looped and LLaMA stacks learn, a checkpoint resumes exactly
(Muon's momentum included), and the eager and flat optimizers train the same trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from models import ModelConfig
from trials.checkpoint import list_checkpoints
from trials.config import DataConfig, DivergenceConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from trials.flat_muon import FlatStackedMuon
from trials.muon import StackedMuon
from trials.run import run_trial
from trials.spec import StepReport, TrialSpec
from trials.train import Trial

N = 8
# Parcae's recipe, at a tiny scale: Muon 2e-2 tied 1:1 to AdamW, AdamW betas (0.8, 0.95), eps 1e-10, no AdamW
# weight decay; Muon's cautious 0.2 decayed linearly; no warmup, constant, linear cooldown over the last half to 0.
MUON = OptimizerConfig(kind="muon", betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0, grad_clip=1.0)
WSD = ScheduleConfig(warmup=0, decay="linear", cooldown=0.5, final_fraction=0.0)


def model(family: str) -> ModelConfig:
    base = dict(scheme="layerrope", width=32, n_heads=2, vocab=48, seq_len=16)
    if family == "looped":
        return ModelConfig(family="looped", depth=3, extra={"prelude": 1, "core": 1, "coda": 1, "mean_loops": 2},  # type: ignore[arg-type]
                           **base)
    return ModelConfig(depth=2, **base)  # type: ignore[arg-type]


def make_spec(family: str, lrs: list[float], **train: object) -> TrialSpec:
    recipe = dict(steps=2 * N, batch_size=4, eval_every=N, eval_batches=2, checkpoint_every=N, report_every=1,
                  optimizer=MUON, schedule=WSD)
    recipe.update(train)
    return TrialSpec(
        model=model(family), train=TrainConfig(**recipe),  # type: ignore[arg-type]
        data=DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192), lrs=lrs, seed=1,
        point_ids=[f"p{i}" for i in range(len(lrs))],
        divergence=DivergenceConfig(stall_margin=None),  # 16 steps learn little: the stall rule is tested elsewhere
    )


@pytest.mark.parametrize("family", ["looped", "llama"])
def test_muon_with_wsd_learns(family: str) -> None:
    spec = make_spec(family, [5e-3, 2e-2])
    again = TrialSpec.from_dict(json.loads(json.dumps(spec.to_dict())))  # as Ray ships it to a worker
    assert again.train == spec.train and again.resume_key() == spec.resume_key()
    trial = Trial(spec)
    assert isinstance(trial.opt, StackedMuon) and trial.opt.matrices and trial.opt.adamw is not None
    assert [trial.schedule.factor(s) for s in (0, N - 1, N, 2 * N - 1)] == [1.0, 1.0, 1.0, 0.0]
    reports: list[StepReport] = []
    results = trial.run(report=reports.append)
    assert [r.outcome for r in results] == ["ok", "ok"]
    for k, r in enumerate(results):
        first = reports[0].members[k].train_loss
        assert r.init_loss is not None and r.loss is not None and first is not None
        assert r.loss < r.init_loss - 0.3, (k, r.init_loss, r.loss)
        assert reports[-1].members[k].train_loss < first - 0.3


@pytest.mark.parametrize(("family", "lrs"), [("looped", [5e-3, 2e-2]), ("llama", [5e-3, 2e-2]), ("llama", [5e-3, 80.0])],
                         ids=["looped", "llama", "llama-one-dropped"])
def test_muon_checkpoint_resumes_exactly(tmp_path: Path, family: str, lrs: list[float]) -> None:
    """2N steps straight == N steps, a checkpoint, N more (also after a member diverged and was dropped:
    the resumed trial rebuilds the smaller stack and its optimizer before loading)."""
    spec = make_spec(family, lrs)
    straight = run_trial(spec, checkpoint_dir=tmp_path / "a", export_dir=tmp_path / "a-w")

    reports: list[StepReport] = []
    run_trial(spec, report=reports.append, checkpoint_dir=tmp_path / "b",
              should_stop=lambda: bool(reports) and reports[-1].step >= N)
    [ckpt] = list_checkpoints(tmp_path / "b")
    saved = load_file(str(ckpt / "optimizer.safetensors"))
    momentum = [n for n in saved if n.startswith("momentum/")]
    kept = [lr for lr, r in zip(lrs, straight) if r.outcome == "ok"]
    assert momentum and any(n.startswith("exp_avg/") for n in saved) and saved["lrs"].tolist() == pytest.approx(kept)
    assert all(float(saved[n].abs().sum()) > 0 for n in momentum)
    resumed = run_trial(spec, checkpoint_dir=tmp_path / "b", export_dir=tmp_path / "b-w")
    for a, b in zip(straight, resumed):
        assert a.outcome == b.outcome and a.diverged_step == b.diverged_step
        if a.outcome == "ok":
            assert b.loss == pytest.approx(a.loss, abs=1e-6, rel=0)
    assert [r.outcome for r in straight] == ["ok", "ok" if len(kept) == 2 else "diverged"]
    for i in range(2):
        wa = load_file(str(tmp_path / "a-w" / str(i) / "model.safetensors"))
        wb = load_file(str(tmp_path / "b-w" / str(i) / "model.safetensors"))
        for name in wa:
            torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=0)


def test_flat_muon_trains_the_same_trial_and_drops_a_diverged_member() -> None:
    """The flat optimizer (what `compile: true` and deferred reads use, here eagerly with reads every 4 steps)
    against the eager one, with a member that diverges and is dropped (the flat buffers are rebuilt)."""
    lrs = [5e-3, 80.0, 2e-2]
    eager = Trial(make_spec("llama", lrs))
    eager_results = eager.run()
    flat = Trial(make_spec("llama", lrs, sync_every=4))
    assert isinstance(flat.opt, FlatStackedMuon)
    flat_results = flat.run()
    assert [r.outcome for r in flat_results] == [r.outcome for r in eager_results] == ["ok", "diverged", "ok"]
    assert len(flat.slots) == 2
    for a, b in zip(eager_results, flat_results):
        if a.loss is not None:
            assert b.loss == pytest.approx(a.loss, abs=2e-4)  # measured 1.8e-5 (clipping sums in another order)
