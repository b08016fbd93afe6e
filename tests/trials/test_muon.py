"""Muon + AdamW for a stack of K models (`trials.muon`, `trials.flat_muon`) against torch.optim.Muon and
torch.optim.AdamW, cautious weight decay against its formula, the LR tie, and masking.

Tolerances. torch.optim.Muon runs Newton-Schulz in bfloat16, and its quintic iteration amplifies a one-ulp
change of its input (slope 3.4 per iteration at small singular values). So the exact comparison feeds both
sides the *same* gradients (the stacked model's, at every step of a real trajectory): the stacked update then
equals K separate torch runs to fp32 rounding (measured: weights within 2.4e-5 x lr, momentum bit for bit).
When each side computes its own gradients, fp32-rounding differences of the two models' gradients reach
Newton-Schulz's bfloat16 input, and the runs agree to bfloat16-amplified rounding instead (checked in
`test_stacked_training_tracks_separate_torch_runs`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.optim._muon import _zeropower_via_newtonschulz

from models import ModelConfig, build_model
from trials.config import MuonConfig, OptimizerConfig
from trials.flat_muon import FlatStackedMuon
from trials.muon import TORCH_NS_COEFFICIENTS, MuonRule, StackedMuon, is_muon_param, lr_adjustment

LRS = [1e-3, 5e-3, 2e-2]
BETAS, EPS, ADAM_WD, MUON_WD, RATIO = (0.8, 0.95), 1e-10, 0.1, 0.2, 0.5
FACTORS = [1.0, 1.0, 0.8, 0.6, 0.4, 0.2]  # a schedule, applied the same way to both sides


def configs() -> dict[str, ModelConfig]:
    base = dict(width=32, n_heads=2, seq_len=16)
    return {
        "llama-layerrope": ModelConfig(scheme="layerrope", depth=2, vocab=48, **base),  # type: ignore[arg-type]
        "llama-completep": ModelConfig(scheme="completep", depth=2, vocab=48,  # type: ignore[arg-type]
                                       scheme_options={"alpha": 0.5, "base_depth": 8}, **base),
        "looped": ModelConfig(family="looped", scheme="layerrope", depth=3, vocab=48,  # type: ignore[arg-type]
                              extra={"prelude": 1, "core": 1, "coda": 1}, **base),
        "vit": ModelConfig(family="vit", scheme="layerrope", depth=2, vocab=5, seq_len=17, width=32, n_heads=2,
                           extra={"image_size": 16, "patch_size": 4}),
    }


def batch_inputs(cfg: ModelConfig, step: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    g = torch.Generator().manual_seed(100 + step)
    if cfg.family == "vit":
        return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, cfg.vocab, (4,), generator=g), {}
    tokens = torch.randint(0, cfg.vocab, (4, cfg.seq_len + 1), generator=g)
    extra = {"loops": 2} if cfg.family == "looped" else {}
    return tokens[:, :-1], tokens[:, 1:], extra


class TorchReference:
    """One member trained alone: torch.optim.Muon on its matrices (as nn.Linear holds them: [fan_out, fan_in],
    views of the model's weights), torch.optim.AdamW on the rest, one param group per parameter."""

    def __init__(self, cfg: ModelConfig, lr: float, *, muon_wd: float = MUON_WD) -> None:
        self.model = build_model(cfg, stack=1, seed=7)
        specs = self.model.param_specs()
        self.mats = [(s, torch.nn.Parameter(s.param.detach()[0].T)) for s in specs if is_muon_param(s)]
        assert self.mats, "no matrix for Muon"
        self.muon = torch.optim.Muon(
            [{"params": [w], "lr": lr * s.lr_mult, "base": lr * s.lr_mult} for s, w in self.mats],
            weight_decay=muon_wd, momentum=0.95, nesterov=True,
        )
        self.adamw = torch.optim.AdamW(
            [{"params": [s.param], "lr": RATIO * lr * s.lr_mult, "base": RATIO * lr * s.lr_mult, "eps": EPS * s.eps_mult,
              "weight_decay": ADAM_WD if s.weight_decay else 0.0} for s in specs if not is_muon_param(s)],
            betas=BETAS,
        )

    def step(self, factor: float, clip: float) -> None:
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        for s, w in self.mats:
            w.grad = s.param.grad[0].T
        for opt in (self.muon, self.adamw):
            for group in opt.param_groups:
                group["lr"] = group["base"] * factor
        self.muon.step()
        self.adamw.step()
        self.model.zero_grad()
        self.muon.zero_grad()


def stacked_optimizer(flat: bool, model: Any, rule: MuonRule, clip: float) -> StackedMuon | FlatStackedMuon:
    kind = FlatStackedMuon if flat else StackedMuon
    return kind(model.param_specs(), LRS, rule=rule, betas=BETAS, eps=EPS, weight_decay=ADAM_WD, grad_clip=clip)


TORCH_RULE = MuonRule(weight_decay=MUON_WD, cautious=False, decay_steps=None, adamw_scale=RATIO)


@pytest.mark.parametrize("flat", [False, True], ids=["eager", "flat"])
@pytest.mark.parametrize("name", list(configs()))
def test_stacked_update_equals_separate_torch_muon_and_adamw(name: str, flat: bool) -> None:
    cfg = configs()[name]
    stacked = build_model(cfg, stack=len(LRS), seed=7)
    if name == "llama-completep":
        assert {s.lr_mult for s in stacked.param_specs() if is_muon_param(s)} == {2.0}
    opt = stacked_optimizer(flat, stacked, TORCH_RULE, clip=1e6)  # clipping inactive: coefficient exactly 1
    refs = [TorchReference(cfg, lr) for lr in LRS]
    for step, factor in enumerate(FACTORS):
        inputs, targets, extra = batch_inputs(cfg, step)
        stacked.member_losses(inputs, targets, **extra).sum().backward()
        grads = {n: p.grad.detach().clone() for n, p in stacked.named_parameters()}
        opt.step(factor)
        opt.zero_grad()
        for k, ref in enumerate(refs):  # the same gradients, member k's
            for n, p in ref.model.named_parameters():
                p.grad = grads[n][k:k + 1].clone()
            ref.step(factor, clip=1e6)
    state = opt.state_tensors()
    for k, (lr, ref) in enumerate(zip(LRS, refs)):
        mine = stacked.member_state_dict(k)
        for n, value in ref.model.member_state_dict(0).items():
            # Plus two float32 ulps of the weight: a gain near 1.0 rounds its update to the float32 grid (1.2e-7 apart),
            # which an AdamW step's different reduction order can cross on another CPU (seen on an AMD EPYC).
            torch.testing.assert_close(mine[n], value, atol=5e-5 * lr, rtol=2 * torch.finfo(torch.float32).eps,
                                       msg=lambda m, n=n: f"member {k} {n}: {m}")
        for s, w in ref.mats:
            buf = ref.muon.state[w]["momentum_buffer"]
            torch.testing.assert_close(state[f"momentum/{s.name}"][k], buf.T, atol=0, rtol=0)


def test_stacked_training_tracks_separate_torch_runs() -> None:
    """Each side computes its own gradients, clipping active: agreement to bfloat16-amplified rounding (see the
    module docstring). Measured: losses within 7e-6, weights within 0.03 x lr after 6 steps (asserted: 5e-4 and
    0.2 x lr); a wrong LR, ratio, momentum or shape adjustment moves weights by whole updates (~1 x lr)."""
    cfg, clip = configs()["llama-layerrope"], 0.5
    stacked = build_model(cfg, stack=len(LRS), seed=7)
    opt = stacked_optimizer(False, stacked, TORCH_RULE, clip)
    refs = [TorchReference(cfg, lr) for lr in LRS]
    for step, factor in enumerate(FACTORS):
        inputs, targets, _ = batch_inputs(cfg, step)
        losses = stacked.member_losses(inputs, targets)
        losses.sum().backward()
        opt.step(factor)
        opt.zero_grad()
        for k, ref in enumerate(refs):
            loss = ref.model.member_losses(inputs, targets)[0]
            assert loss.item() == pytest.approx(losses[k].item(), abs=5e-4), (k, step)
            loss.backward()
            ref.step(factor, clip)
    for k, (lr, ref) in enumerate(zip(LRS, refs)):
        mine = stacked.member_state_dict(k)
        for n, value in ref.model.member_state_dict(0).items():
            torch.testing.assert_close(mine[n], value, atol=0.2 * lr, rtol=0, msg=lambda m, n=n: f"member {k} {n}: {m}")


@pytest.mark.parametrize("flat", [False, True], ids=["eager", "flat"])
def test_cautious_decay_and_its_linear_schedule_follow_the_formula(flat: bool) -> None:
    """Muon with cautious weight decay, decayed linearly over `steps`, against a few lines per member and matrix:
    buf = lerp(buf, g, 0.05); u = lerp(g, buf, 0.95); O = torch's Newton-Schulz of u (nn.Linear's orientation);
    p -= lr wd (1 - t/T) p [O p >= 0]; p -= lr sqrt(max(1, fan_out/fan_in)) O."""
    cfg, steps = configs()["llama-layerrope"], 4
    rule = MuonRule(weight_decay=0.3, cautious=True, decay_steps=steps)
    stacked = build_model(cfg, stack=2, seed=7)
    lrs = [4e-2, 1e-1]
    kind = FlatStackedMuon if flat else StackedMuon
    opt = kind(stacked.param_specs(), lrs, rule=rule, grad_clip=0.0)
    matrices = [s.name for s in stacked.param_specs() if is_muon_param(s)]
    ref = {n: p.detach().clone() for n, p in stacked.named_parameters() if n in matrices}
    buf = {n: torch.zeros_like(t) for n, t in ref.items()}
    decayed = kept = 0
    for t in range(steps):
        inputs, targets, _ = batch_inputs(cfg, t)
        stacked.member_losses(inputs, targets).sum().backward()
        grads = {n: p.grad.detach().clone() for n, p in stacked.named_parameters() if n in matrices}
        opt.step(1.0)
        opt.zero_grad()
        for n, p in ref.items():
            for k, lr in enumerate(lrs):
                # torch.optim.Muon's momentum, as lerps (checked bit for bit against torch above): Newton-Schulz
                # amplifies any rounding difference of its input
                buf[n][k] = torch.lerp(buf[n][k], grads[n][k], 0.05)
                u = torch.lerp(grads[n][k], buf[n][k], 0.95)
                o = _zeropower_via_newtonschulz(u.T, TORCH_NS_COEFFICIENTS, 5, 1e-7).T.float()
                agree = (o * p[k]) >= 0
                decayed, kept = decayed + int(agree.sum()), kept + int((~agree).sum())
                fan_in, fan_out = p.shape[-2:]
                p[k] = p[k] - lr * 0.3 * (1 - t / steps) * p[k] * agree - lr * max(1.0, fan_out / fan_in) ** 0.5 * o
    now = dict(stacked.named_parameters())
    for n, p in ref.items():
        torch.testing.assert_close(now[n].detach(), p, atol=2e-6, rtol=1e-5, msg=lambda m, n=n: f"{n}: {m}")
    assert 0.3 < decayed / (decayed + kept) < 0.7  # the mask is a real selection, not all or nothing


def test_lr_tie_and_other_lr() -> None:
    lrs = torch.tensor([1e-3, 4e-3])

    def pair(**kw: Any) -> tuple[list[float], list[float]]:
        rule = MuonRule.from_config(MuonConfig(**kw), steps=10)
        return rule.muon_lrs(lrs).tolist(), rule.adamw_lrs(lrs).tolist()

    assert pair() == (lrs.tolist(), lrs.tolist())  # Parcae: ratio 1
    muon, adamw = pair(adamw_lr_ratio=0.5)
    assert muon == lrs.tolist() and adamw == pytest.approx([5e-4, 2e-3])
    muon, adamw = pair(swept="adamw", adamw_lr_ratio=0.5)
    assert adamw == lrs.tolist() and muon == pytest.approx([2e-3, 8e-3])
    muon, adamw = pair(other_lr=6e-3)
    assert muon == lrs.tolist() and adamw == pytest.approx([6e-3, 6e-3])
    muon, adamw = pair(swept="adamw", other_lr=8e-3)
    assert adamw == lrs.tolist() and muon == pytest.approx([8e-3, 8e-3])
    rule = MuonRule.from_config(MuonConfig(), steps=10)
    assert rule.coefficients == (TORCH_NS_COEFFICIENTS,) * 5 and rule.decay_steps == 10
    assert [rule.wd_factor(t) for t in (0, 5, 9)] == pytest.approx([1.0, 0.5, 0.1])
    assert MuonRule.from_config(MuonConfig(weight_decay_schedule="constant"), steps=10).wd_factor(9) == 1.0
    per_step = [(1.0, -1.0, 0.5), (2.0, -1.5, 0.5)]
    assert MuonRule.from_config(MuonConfig(ns_steps=2, ns_coefficients=per_step), 10).coefficients == tuple(per_step)
    assert lr_adjustment((4, 32, 96), "original") == pytest.approx(3**0.5)  # qkv: fan_out 96 > fan_in 32
    assert lr_adjustment((4, 96, 32), "original") == 1.0
    assert lr_adjustment((4, 96, 32), "match_rms_adamw") == pytest.approx(0.2 * 96**0.5)
    assert lr_adjustment((4, 96, 32), "none") == 1.0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kind": "sgd"}, "kind"),
        ({"kind": "muon", "muon": {"swept": "both"}}, "muon.swept"),
        ({"kind": "muon", "muon": {"ns_coefficients": "polar"}}, "ns_coefficients"),
        ({"kind": "muon", "muon": {"ns_coefficients": [[1, 2, 3], [1, 2, 3]]}}, "one per iteration (ns_steps = 5)"),
        ({"kind": "muon", "muon": {"other_lr": 1e-3, "adamw_lr_ratio": 2.0}}, "give one of them"),
        ({"kind": "muon", "muon": {"momentum": 1.0}}, "muon.momentum"),
        ({"kind": "muon", "muon": {"nesterov": True, "lr": 1e-3}}, "muon.lr"),
    ],
)
def test_bad_optimizer_settings_are_refused_naming_the_key(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OptimizerConfig.model_validate(settings)


def test_masked_member_keeps_everything_and_the_others_are_unaffected() -> None:
    cfg = configs()["llama-layerrope"]
    runs = []
    for masked in (False, True):
        model = build_model(cfg, stack=3, seed=7)
        opt = StackedMuon(model.param_specs(), LRS, rule=MuonRule(), grad_clip=0.5)
        for step in range(3):
            inputs, targets, _ = batch_inputs(cfg, step)
            model.member_losses(inputs, targets).sum().backward()
            if masked and step == 2:
                before = {n: t.clone() for n, t in opt.state_tensors().items()}
                weights = model.member_state_dict(1)
                for p in model.parameters():  # a diverged member's gradient may be NaN
                    p.grad[1] = float("nan")
            opt.step(1.0, active=torch.tensor([True, not (masked and step == 2), True]))
            opt.zero_grad()
        runs.append((model, opt))
    (plain, _), (model, opt) = runs
    for n, t in model.member_state_dict(1).items():
        assert torch.equal(t, weights[n]), n
    for n, t in opt.state_tensors().items():
        if n != "lrs":
            assert torch.equal(t[1], before[n][1]), n
    for k in (0, 2):
        for n, t in model.member_state_dict(k).items():
            assert torch.equal(t, plain.member_state_dict(k)[n]), (k, n)
