"""Stalled runs and evaluation noise.

- `trials.noise.mean_and_se` against `statistics` and a per-item computation;
- `trials.divergence.stall_reason` and the `stall_margin` field;
- a trial's evaluation standard error against one computed here from the model's own logits;
- a deep, narrow Post-Norm run that learns only byte frequencies ends `stalled` (the issue's
  `sweeper trial --method post --depth 32 --width 32 ...` in miniature), a healthy one `ok`.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from models import ModelConfig
from trials.config import DataConfig, DivergenceConfig, TrainConfig
from trials.divergence import stall_reason
from trials.noise import mean_and_se
from trials.spec import PointResult, TrialSpec
from trials.train import Trial

# ---- pure -------------------------------------------------------------------------------------------


def test_se_of_equal_batches_is_stdev_over_root_n() -> None:
    means = [3.1, 2.9, 3.3, 3.0, 2.7]
    mean, se = mean_and_se(means)
    assert mean == pytest.approx(statistics.fmean(means))
    assert se == pytest.approx(statistics.stdev(means) / math.sqrt(len(means)))
    assert mean_and_se([2.5]) == (2.5, None)  # one batch: no spread to measure
    assert mean_and_se([2.0, 2.0, 2.0])[1] == 0.0
    with pytest.raises(ValueError):
        mean_and_se([])
    with pytest.raises(ValueError):
        mean_and_se([1.0, 2.0], [3])


def test_weighted_batches_give_the_item_mean() -> None:
    items = [[1.0, 2.0, 3.0, 4.0], [2.0, 2.5, 3.5, 1.0], [5.0, 1.0]]  # a short last batch
    mean, se = mean_and_se([statistics.fmean(b) for b in items], [len(b) for b in items])
    flat = [x for b in items for x in b]
    assert mean == pytest.approx(statistics.fmean(flat))
    # The ratio-estimator SE: n/(n-1) sum (n_b/N)^2 (m_b - m)^2, written out here by hand.
    n, total = len(items), len(flat)
    by_hand = n / (n - 1) * sum((len(b) / total) ** 2 * (statistics.fmean(b) - mean) ** 2 for b in items)
    assert se == pytest.approx(math.sqrt(by_hand))


def test_stall_rule() -> None:
    # The numbers: Post-Norm at depth 32 ended at 3.2457 where byte frequencies alone give 3.2449.
    assert stall_reason(3.2457, 3.2449, 0.05, entropy=3.2509) == (
        "stalled: final eval loss 3.2457 is within 0.05 nats of the unigram loss 3.2449 on the same eval batches "
        "(the data's unigram entropy: 3.2509): learned nothing beyond token frequencies"
    )
    assert stall_reason(4.9, 3.2449, 0.05).startswith("stalled: final eval loss 4.9000 is above the unigram loss 3.2449")
    assert stall_reason(3.19, 3.2449, 0.05) is None  # 0.0549 below: learned something
    assert stall_reason(3.2457, 3.2449, None) is None  # rule off
    assert stall_reason(3.2449, 3.2449, 0.0) is None and stall_reason(3.2450, 3.2449, 0.0) is not None
    chance = stall_reason(2.30, math.log(10), 0.05, entropy=math.log(10), kind="classes")
    assert chance == ("stalled: final eval loss 2.3000 is within 0.05 nats of the chance loss 2.3026 on the same eval "
                      "images (the data's class-frequency entropy: 2.3026): learned nothing beyond class frequencies")


def test_stall_margin_is_validated() -> None:
    assert DivergenceConfig().stall_margin is not None and DivergenceConfig(stall_margin=None).stall_margin is None
    for bad in (-0.1, math.inf, math.nan, "x"):
        with pytest.raises(ValidationError, match="stall_margin"):
            DivergenceConfig(stall_margin=bad)


def test_point_results_of_older_trials_still_load() -> None:
    old = {"point_id": "lr=0.001", "lr": 1e-3, "outcome": "ok", "loss": 2.0, "objective": 2.0, "accuracy": None,
           "init_loss": 5.5, "diverged_step": None, "reason": None, "steps": 10, "tokens": 100, "train_seconds": 1.0,
           "corpus": "c", "params": 1, "params_nonembed": 1, "flops_per_token": 6.0}
    r = PointResult.from_dict(old)
    assert r.loss_se is None and r.unigram_entropy is None


# ---- trials -----------------------------------------------------------------------------------------

SYNTH = DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192)


def lm_spec(lrs: list[float], **train: object) -> TrialSpec:
    recipe: dict[str, object] = dict(steps=20, batch_size=4, eval_every=10, eval_batches=5, report_every=10)
    recipe.update(train)
    model = ModelConfig(scheme="pre", width=32, depth=2, n_heads=2, vocab=48, seq_len=16)
    return TrialSpec(model=model, train=TrainConfig(**recipe), data=SYNTH, lrs=lrs, seed=1)  # type: ignore[arg-type]


def test_eval_se_matches_an_independent_computation() -> None:
    trial = Trial(lm_spec([3e-3, 3e-2]))
    reports = []
    results = trial.run(report=reports.append)
    with torch.no_grad():
        per_batch = []  # [batch][member]: mean cross-entropy from the model's own logits
        for batch in trial.eval_data:
            logits = trial.model(batch[:, :-1])  # [K, B, T, V]
            per_batch.append([F.cross_entropy(logits[k].reshape(-1, 48), batch[:, 1:].reshape(-1)).item()
                              for k in range(logits.shape[0])])
    final = reports[-1].members
    for k, r in enumerate(results):
        column = [row[k] for row in per_batch]
        assert r.loss == pytest.approx(statistics.fmean(column), abs=1e-5)
        assert r.loss_se == pytest.approx(statistics.stdev(column) / math.sqrt(5), rel=1e-4)
        assert 0 < r.loss_se < 0.5
        assert final[k].eval_loss_se == r.loss_se and final[k].eval_loss == r.loss
    # Every evaluation carries its SE (step 10 as well), reports between evaluations none.
    at_10 = [rep for rep in reports if rep.step == 10][0]
    assert all(m.eval_loss_se is not None for m in at_10.members)
    assert all(m.eval_loss_se is None for rep in reports if rep.step % 10 for m in rep.members)


def test_vit_eval_se_over_unequal_batches() -> None:
    data = DataConfig(source="builtin_images", builtin_classes=3, builtin_per_class=40, val_fraction=0.25)  # 30 val images
    model = ModelConfig(family="vit", scheme="pre", width=32, depth=1, n_heads=2, vocab=3, seq_len=17,
                        extra={"image_size": 8, "patch_size": 2})
    train = TrainConfig(steps=6, batch_size=8, eval_every=6, eval_batches=4)  # 8 + 8 + 8 + 6 images
    near_chance = DivergenceConfig(init_loss_margin=1.0)  # 6 steps: the loss wanders around ln 3
    trial = Trial(TrialSpec(model=model, train=train, data=data, divergence=near_chance, lrs=[1e-3], seed=0))
    result = trial.run()[0]
    assert result.outcome in ("ok", "stalled")
    with torch.no_grad():
        losses = [F.cross_entropy(trial.model(x)[0], y, reduction="none") for x, y in trial.eval_data]
    sizes = [len(t) for t in losses]
    assert sizes == [8, 8, 8, 6]
    flat = torch.cat(losses).double()
    assert result.loss == pytest.approx(flat.mean().item(), abs=1e-6)
    means, total = [t.double().mean().item() for t in losses], len(flat)
    mean = flat.mean().item()
    by_hand = 4 / 3 * sum((n / total) ** 2 * (m - mean) ** 2 for n, m in zip(sizes, means))
    assert result.loss_se == pytest.approx(math.sqrt(by_hand), rel=1e-6)
    assert result.unigram_entropy == pytest.approx(math.log(3), abs=0.01)


# ---- stalled runs -----------------------------------------------------------------------------------
# The issue's `sweeper trial --method post --depth 32 --width 32 --lr 8e-3 --lr 3e-2 --steps 300` in
# miniature: Post-Norm 16 blocks deep, 60 steps of 256 bytes at a high LR settles on byte frequencies
# (3.30 against their 3.29 on the eval batches of the by-unit split), while a
# 2-block Pre-Norm model on the same data and LR reaches 2.96 (see /work/drafts/i14t-data).

STALL_ARGS = ["--depth", "16", "--width", "32", "--seq-len", "32", "--batch", "8", "--steps", "60", "--lr", "3e-2",
              "--train", "eval_every=60", "--train", "eval_batches=2", "--train", "schedule.warmup=0.1", "--seed", "0"]


def test_a_deep_post_norm_run_that_learned_only_byte_frequencies_is_stalled(capsys: pytest.CaptureFixture[str]) -> None:
    from sweeper.cli import main

    assert main(["trial", "--method", "post", *STALL_ARGS, "--threads", "1", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "unigram entropy 3.2067 nats (exact" in out  # the built-in corpus of this interpreter
    row = next(line for line in out.splitlines() if line.startswith("│ 0.03 "))  # --wide: the framed table
    assert "│ stalled │" in row and "stalled: final eval" in row and "unigram loss" in out


def test_stalled_and_healthy_members_in_a_trial() -> None:
    def run(method: str, depth: int, lrs: list[float]) -> tuple[Trial, list[PointResult], list]:
        model = ModelConfig(scheme=method, width=32, depth=depth, n_heads=1, vocab=256, seq_len=32)
        train = TrainConfig(steps=60, batch_size=8, eval_every=30, eval_batches=2, report_every=30,
                            schedule={"warmup": 0.1})  # type: ignore[arg-type]
        trial = Trial(TrialSpec(model=model, train=train, data=DataConfig(), lrs=lrs, seed=0))
        reports: list = []
        return trial, trial.run(report=reports.append), reports

    trial, (stalled,), reports = run("post", 16, [3e-2])
    assert stalled.outcome == "stalled" and stalled.objective is None
    assert stalled.loss is not None and stalled.loss > trial.unigram_loss - 0.05
    assert stalled.unigram_loss == trial.unigram_loss and stalled.unigram_entropy == pytest.approx(3.2067, abs=1e-4)
    assert stalled.reason.startswith(f"stalled: final eval loss {stalled.loss:.4f} is ")
    # Only the final evaluation judges: at step 30 the run was just as stuck, and still `running`.
    assert [(r.step, r.members[0].state) for r in reports] == [(30, "running"), (60, "stalled")]
    assert reports[-1].members[0].reason == stalled.reason
    _, (healthy,), _ = run("pre", 2, [1e-2])
    assert healthy.outcome == "ok" and healthy.loss < healthy.unigram_loss - 0.2 and healthy.reason is None
