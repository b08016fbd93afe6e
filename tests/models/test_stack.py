"""The stack dimension: K members behave exactly like K separate models; per-member state dicts;
parameter specs for the optimizer (CompleteP's multipliers); effective per-layer gains."""

from __future__ import annotations

import math

import pytest
import torch

from models import build_model
from models.registry import scheme_names
from tests.helpers import perturb


@pytest.mark.parametrize("scheme", scheme_names())
def test_stacked_members_equal_separate_models_in_output_and_gradient(scheme, tiny):
    cfg = tiny(scheme, depth=3)
    singles = [perturb(build_model(cfg, stack=1, seed=k), seed=10 + k) for k in range(3)]
    stacked = build_model(cfg, stack=3, seed=0)
    for k, single in enumerate(singles):
        stacked.load_member_state_dict(k, single.member_state_dict(0))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab, (2, cfg.seq_len + 1), generator=gen)
    x, y = tokens[:, :-1], tokens[:, 1:]
    losses = stacked.member_losses(x, y)
    losses.sum().backward()
    for k, single in enumerate(singles):
        loss = single.member_losses(x, y)
        loss.sum().backward()
        torch.testing.assert_close(losses[k], loss[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(stacked(x)[k], single(x)[0], rtol=1e-5, atol=1e-5)
        grads = {name: p.grad[0] for name, p in single.named_parameters()}
        for name, param in stacked.named_parameters():
            torch.testing.assert_close(param.grad[k], grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_member_losses_is_mean_cross_entropy_per_member_with_ignore_index(tiny):
    cfg = tiny("pre")
    model = perturb(build_model(cfg, stack=2), seed=1)
    x = torch.randint(0, cfg.vocab, (3, cfg.seq_len), generator=torch.Generator().manual_seed(1))
    y = x.roll(-1, dims=1)
    y[0, :3] = -100
    logits = model(x)
    assert logits.shape == (2, 3, cfg.seq_len, cfg.vocab)
    for k in range(2):
        logp = torch.log_softmax(logits[k].double(), dim=-1)
        keep = y != -100
        want = -logp[keep, y[keep]].mean()
        assert model.member_losses(x, y)[k].item() == pytest.approx(want.item(), rel=1e-5)


def test_member_state_dict_round_trip_and_errors(tiny):
    cfg = tiny("layerrope")
    source = perturb(build_model(cfg, stack=2, seed=1), seed=3)
    target = build_model(cfg, stack=3, seed=2)
    state = source.member_state_dict(1)
    assert all(t.shape == p.shape[1:] for (n, p), t in zip(source.named_parameters(), state.values()))
    target.load_member_state_dict(2, state)
    for name, value in target.member_state_dict(2).items():
        assert torch.equal(value, state[name])
    assert not torch.equal(target.member_state_dict(0)["head"], state["head"])
    with pytest.raises(ValueError, match="missing"):
        target.load_member_state_dict(0, {k: v for k, v in state.items() if k != "head"})
    with pytest.raises(ValueError, match="shape"):
        target.load_member_state_dict(0, {**state, "head": state["head"][:, :3]})
    with pytest.raises(IndexError):
        target.member_state_dict(3)


@pytest.mark.parametrize("scheme", scheme_names())
def test_param_specs_cover_every_parameter_once(scheme, tiny):
    model = build_model(tiny(scheme), stack=2)
    specs = model.param_specs()
    assert [s.name for s in specs] == [n for n, _ in model.named_parameters()]
    kinds = {s.name: s.kind for s in specs}
    assert kinds["tok_emb"] == "embedding" and kinds["head"] == "head"
    assert kinds["blocks.0.attn.qkv"] == kinds["blocks.0.mlp.down"] == "hidden"
    for spec in specs:
        assert spec.weight_decay == (spec.kind in ("embedding", "head", "hidden"))
        assert spec.param.shape[0] == 2
        if scheme != "completep":
            assert (spec.lr_mult, spec.eps_mult) == (1.0, 1.0)
    if scheme == "layerrope":
        assert kinds["site_gains.sites.attn_in.gamma"] == "gain"
        assert kinds["site_gains.sites.mlp_out.b_rot"] == "scalar"


@pytest.mark.parametrize(("depth", "options", "lr", "eps"), [
    (96, {}, 1.0, 0.5),  # alpha 1, L0 48: LR x(2)^0, eps x(2)^-1
    (8, {"alpha": 0.5, "base_depth": 2}, 0.5, 0.5),  # (4)^-0.5 both
    (6, {"alpha": 1.0, "base_depth": 2}, 1.0, 1 / 3),
])
def test_completep_multipliers(depth, options, lr, eps, tiny):
    model = build_model(tiny("completep", depth=depth, scheme_options=options))
    for spec in model.param_specs():
        want = (lr, eps) if spec.kind == "hidden" else (1.0, 1.0)
        assert (spec.lr_mult, spec.eps_mult) == pytest.approx(want, rel=1e-12), spec.name


def test_layer_gains_effective_values(tiny):
    lns = build_model(tiny("lns", depth=5), stack=2)
    gains = lns.layer_gains()
    assert set(gains) == {"attn_in", "mlp_in"} and gains["attn_in"].shape == (2, 5, 16)
    factors = torch.tensor([1 / math.sqrt(l) for l in range(1, 6)])
    torch.testing.assert_close(gains["mlp_in"][1, :, 0], factors)
    peri = build_model(tiny("peri"), stack=1).layer_gains()
    assert set(peri) == {"attn_in", "attn_out", "mlp_in", "mlp_out"}
    mix = build_model(tiny("mixln", depth=8), stack=1).layer_gains()  # 2 Post blocks, 6 Pre blocks
    assert torch.isnan(mix["attn_in"][0, :2]).all() and not torch.isnan(mix["attn_in"][0, 2:]).any()
    assert torch.isnan(mix["attn_out"][0, 2:]).all() and torch.equal(mix["attn_out"][0, :2], torch.ones(2, 16))
