"""Stacked K-LR training equals K separately trained models (torch.optim.AdamW, K = 1 each),
and a diverged member neither disturbs the others nor costs compute."""

from __future__ import annotations

import math

import pytest
import torch

from models import ModelConfig, build_model
from trials.config import DataConfig, DivergenceConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from trials.optim import StackedAdamW
from trials.run import run_trial
from trials.spec import TrialSpec

SYNTH = DataConfig(source="synthetic", synthetic_vocab=48, synthetic_tokens=8192)
# A few steps learn little beyond frequencies: the stall rule (tests/trials/test_stall_and_noise.py) is off here.
NO_STALL = DivergenceConfig(stall_margin=None)


def tiny(scheme: str = "layerrope", **kw: object) -> ModelConfig:
    base = dict(scheme=scheme, width=32, depth=2, n_heads=2, vocab=48, seq_len=16)
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cfg",
    [tiny("layerrope"), tiny("completep", scheme_options={"alpha": 0.5, "base_depth": 8}), tiny("deepnet")],
    ids=["layerrope", "completep-multipliers", "deepnet"],
)
def test_stacked_adamw_matches_separate_torch_adamw(cfg: ModelConfig) -> None:
    torch.manual_seed(0)
    lrs = [1e-3, 5e-3, 2e-2]
    betas, eps, wd, clip = (0.9, 0.95), 1e-8, 0.1, 0.5  # clip low enough to be active
    factors = [0.25, 0.5, 0.75, 1.0, 0.8, 0.6]  # a schedule, applied the same way to both
    batches = [torch.randint(0, cfg.vocab, (4, cfg.seq_len + 1)) for _ in factors]

    stacked = build_model(cfg, stack=len(lrs), seed=7)
    specs = stacked.param_specs()
    if cfg.scheme == "completep":
        assert {(s.lr_mult, s.eps_mult) for s in specs if s.kind == "hidden"} == {(2.0, 2.0)}
    opt = StackedAdamW(specs, lrs, betas=betas, eps=eps, weight_decay=wd, grad_clip=clip)
    stacked_losses = []
    for f, b in zip(factors, batches):
        losses = stacked.member_losses(b[:, :-1], b[:, 1:])
        stacked_losses.append(losses.detach())
        losses.sum().backward()
        opt.step(f)
        opt.zero_grad()
    check = batches[0]
    with torch.no_grad():
        stacked_after = stacked.member_losses(check[:, :-1], check[:, 1:])

    for k, lr in enumerate(lrs):
        single = build_model(cfg, stack=1, seed=7)
        groups = [
            {"params": [s.param], "lr": lr * s.lr_mult, "base": lr * s.lr_mult, "eps": eps * s.eps_mult,
             "weight_decay": wd if s.weight_decay else 0.0}
            for s in single.param_specs()
        ]
        ref = torch.optim.AdamW(groups, betas=betas)
        for step, (f, b) in enumerate(zip(factors, batches)):
            for g in ref.param_groups:
                g["lr"] = g["base"] * f
            loss = single.member_losses(b[:, :-1], b[:, 1:])[0]
            assert abs(loss.item() - stacked_losses[step][k].item()) < 1e-5, (k, step)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(single.parameters(), clip)
            ref.step()
            ref.zero_grad()
        with torch.no_grad():
            after = single.member_losses(check[:, :-1], check[:, 1:])[0]
        assert abs(after.item() - stacked_after[k].item()) < 1e-5
        # Weights agree to float rounding; Adam's m / sqrt(v) magnifies rounding in near-zero
        # gradient entries, in proportion to the LR (here up to 0.04 with CompleteP's multiplier).
        mine = stacked.member_state_dict(k)
        for name, value in single.member_state_dict(0).items():
            where = f"member {k} {name}"
            torch.testing.assert_close(mine[name], value, atol=5e-5, rtol=1e-4, msg=lambda m, where=where: f"{where}: {m}")


def spec(lrs: list[float], **train: object) -> TrialSpec:
    recipe = dict(steps=12, batch_size=4, eval_every=6, eval_batches=2, schedule=ScheduleConfig(warmup=3),
                  optimizer=OptimizerConfig(grad_clip=1.0))
    recipe.update(train)
    return TrialSpec(model=tiny(), train=TrainConfig(**recipe), data=SYNTH, lrs=lrs, seed=3,  # type: ignore[arg-type]
                     divergence=NO_STALL)


def test_trial_stack_equals_separate_trials() -> None:
    lrs = [2e-3, 2e-2]
    together = run_trial(spec(lrs))
    for lr, result in zip(lrs, together):
        alone = run_trial(spec([lr]))[0]
        assert result.outcome == alone.outcome == "ok"
        assert result.loss == pytest.approx(alone.loss, abs=1e-5)
        assert result.init_loss == pytest.approx(alone.init_loss, abs=1e-6)
    # The loss falls from ~ln(vocab) and the results carry what the store needs.
    r = together[1]
    assert r.init_loss == pytest.approx(math.log(48), abs=0.2) and r.loss < r.init_loss - 0.3
    assert r.steps == 12 and r.tokens == 12 * 4 * 16 and r.corpus.startswith("synthetic:")
    assert r.params > r.params_nonembed > 0 and r.flops_per_token > 0 and r.objective == r.loss


@pytest.mark.parametrize("drop", [True, False], ids=["dropped", "masked"])
def test_diverged_member_is_stopped_without_touching_the_others(drop: bool) -> None:
    reports = []
    results = run_trial(spec([2e-3, 50.0, 2e-2], drop_diverged=drop, report_every=1), report=reports.append)
    alone = [run_trial(spec([lr]))[0] for lr in (2e-3, 2e-2)]
    assert [r.outcome for r in results] == ["ok", "diverged", "ok"]
    bad = results[1]
    assert bad.diverged_step is not None and bad.diverged_step <= 3 and bad.loss is None and bad.objective is None
    assert bad.reason.split(":")[0] in {"non-finite", "exploded"}
    assert bad.steps == bad.diverged_step
    for got, ref in zip((results[0], results[2]), alone):
        assert got.loss == pytest.approx(ref.loss, abs=1e-5)
    # Reports show the member diverged from its step on, never NaN losses.
    after = [r.members[1] for r in reports if r.step > bad.diverged_step]
    assert after and all(m.state == "diverged" and m.eval_loss is None for m in after)
    assert all(m.train_loss is None or math.isfinite(m.train_loss) for r in reports for m in r.members)
    assert reports[-1].done and [m.state for m in reports[-1].members] == ["ok", "diverged", "ok"]


def test_all_diverged_stops_the_trial_at_once() -> None:
    reports = []
    results = run_trial(spec([40.0, 80.0], steps=500, report_every=100), report=reports.append)
    assert [r.outcome for r in results] == ["diverged", "diverged"]
    assert reports[-1].done and reports[-1].step <= 5  # not 500


def test_error_objective_is_one_minus_top1_accuracy() -> None:
    loss_run = run_trial(spec([2e-2]))[0]
    error_run = run_trial(spec([2e-2], objective="error"))[0]
    assert error_run.loss == loss_run.loss  # the same training; only the objective differs
    assert error_run.accuracy is not None and 1 / 48 < error_run.accuracy < 1
    assert error_run.objective == pytest.approx(1 - error_run.accuracy)
    assert loss_run.accuracy is None and loss_run.objective == loss_run.loss
