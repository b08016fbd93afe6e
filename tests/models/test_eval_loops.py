"""A trial of a looped model evaluated at several loop counts (Parcae's 1, 2, 4 and 8): a loss per count per
member, each equal to the model's own loss at that count on the same held-out batches, the headline loss the
largest count's and exactly what a single-count evaluation gives; kept across a checkpoint."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from models import ModelConfig
from trials.config import DataConfig, DivergenceConfig, EvalConfig, LambadaConfig, TrainConfig
from trials.spec import TrialSpec
from trials.train import Trial

EXTRA = {"prelude": 1, "core": 2, "coda": 1, "mean_loops": 3, "max_loops": 8, "backprop_loops": 2,
         "loop_sampling": "per_sequence", "state_init": "like_weights", "prelude_norm": True, "qk_norm": True,
         "value_embeddings": True, "eval_loops": [1, 2, 4, 8]}
MODEL = ModelConfig(family="looped", width=32, depth=4, n_heads=2, vocab=256, seq_len=24, extra=EXTRA)
TRAIN = TrainConfig(steps=4, batch_size=4, micro_batch=2, eval_every=2, eval_batches=3)
NO_STALL = DivergenceConfig(stall_margin=None)


def spec_of(model: ModelConfig, **kw: object) -> TrialSpec:
    return TrialSpec(model=model, train=TRAIN, data=DataConfig(source="builtin"), lrs=[2e-3, 8e-3], seed=1,
                     divergence=NO_STALL, **kw)  # type: ignore[arg-type]


def test_a_loss_per_loop_count_equal_to_the_models_own() -> None:
    trial = Trial(spec_of(MODEL))
    results = trial.run()
    trial.model.eval()
    for slot, result in enumerate(results):
        assert result.outcome == "ok" and set(result.loop_losses or {}) == {"1", "2", "4", "8"}
        assert result.loop_losses["8"] == result.loss  # the headline is the largest count's, the same number
        for count, loss in result.loop_losses.items():
            with torch.no_grad():  # every batch at this count, its mean weighted by counted tokens (all equal here)
                means = [trial.model.member_losses(b[:, :-1], b[:, 1:], loops=int(count))[slot].item()
                         for b in trial.eval_data]
            assert loss == pytest.approx(sum(means) / len(means), rel=1e-6)
    losses = [results[0].loop_losses[c] for c in ("1", "2", "4", "8")]
    assert len(set(losses)) == 4  # the counts differ: a real loss per count, not one copied


def test_the_headline_loss_is_what_a_single_count_evaluation_gives() -> None:
    several = Trial(spec_of(MODEL)).run()
    single = Trial(spec_of(replace(MODEL, extra={**EXTRA, "eval_loops": 8}))).run()
    assert [r.loss for r in several] == [r.loss for r in single]
    assert [r.loss_batches for r in several] == [r.loss_batches for r in single]
    assert all(r.loop_losses is None for r in single)  # one count: no map


def test_a_finished_trial_resumed_from_its_checkpoint_reports_the_same(tmp_path: Path) -> None:
    texts = ["the cat sat on the mat and looked at the dog", "she opened the door and saw her old friend john"]
    path = tmp_path / "lambada.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    spec = spec_of(MODEL, eval=EvalConfig(tasks=("lambada",), lambada=LambadaConfig(source="jsonl", path=str(path))))
    first = Trial(spec).run(checkpoint_dir=tmp_path / "ckpt")
    again = Trial(spec).run(checkpoint_dir=tmp_path / "ckpt")  # restores the last checkpoint, trains nothing
    assert [r.to_dict() for r in again] == [r.to_dict() for r in first]
    assert all(r.lambada_ppl is not None and r.loop_losses for r in again)
