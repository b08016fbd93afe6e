"""Initialisation: one seed gives the same base weights for every scheme and every K; the schemes'
init multipliers land on exactly the right weights (DeepNet's beta, scaled init)."""

from __future__ import annotations

import math

import pytest
import torch

from models import build_model
from models.registry import scheme_names

WEIGHT_SLICES = {  # weight -> (parameter suffix, column slice as fractions of the fused width)
    "q": ("attn.qkv", 0), "k": ("attn.qkv", 1), "v": ("attn.qkv", 2), "o": ("attn.o", None),
    "gate": ("mlp.gate_up", 0), "up": ("mlp.gate_up", 1), "down": ("mlp.down", None),
}


def weight(sd, block, name, width, hidden):
    suffix, part = WEIGHT_SLICES[name]
    tensor = sd[f"blocks.{block}.{suffix}"]
    if part is None:
        return tensor
    size = width if suffix == "attn.qkv" else hidden
    return tensor[:, part * size : (part + 1) * size]


def expected_factor(scheme: str, name: str, depth: int) -> float:
    """Written from schemes.md, independently of models/schemes."""
    if scheme == "deepnet" and name in ("v", "o", "gate", "up", "down"):
        return (8 * depth) ** -0.25
    if scheme == "scaled_init" and name in ("o", "down"):
        return 1 / math.sqrt(2 * depth)
    return 1.0


@pytest.mark.parametrize("scheme", scheme_names())
def test_same_seed_same_base_weights_for_every_scheme(scheme, tiny):
    cfg_pre, cfg = tiny("pre", depth=5), tiny(scheme, depth=5)
    base = build_model(cfg_pre, seed=11).member_state_dict(0)
    other = build_model(cfg, seed=11).member_state_dict(0)
    assert torch.equal(base["tok_emb"], other["tok_emb"]) and torch.equal(base["head"], other["head"])
    for block in range(cfg.depth):
        for name in WEIGHT_SLICES:
            got = weight(other, block, name, cfg.width, cfg.hidden)
            want = weight(base, block, name, cfg.width, cfg.hidden) * expected_factor(scheme, name, cfg.depth)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


def test_seed_changes_weights_and_init_is_normal_with_config_std(tiny):
    cfg = tiny("pre", width=64, n_heads=4, depth=2, vocab=300, init_std=0.05)
    a, b = build_model(cfg, seed=0).member_state_dict(0), build_model(cfg, seed=1).member_state_dict(0)
    assert not torch.equal(a["blocks.0.attn.qkv"], b["blocks.0.attn.qkv"])
    for name in ("tok_emb", "head", "blocks.1.attn.qkv", "blocks.1.mlp.gate_up"):
        assert abs(a[name].std().item() - 0.05) < 0.05 * 0.05
        assert abs(a[name].mean().item()) < 0.05 * 0.05
    assert torch.equal(a["blocks.0.gains.attn_in"], torch.ones(64))


def test_stack_members_start_identical_to_the_single_model(tiny):
    cfg = tiny("deepnet", depth=3)
    single = build_model(cfg, stack=1, seed=5)
    stacked = build_model(cfg, stack=3, seed=5)
    for k in range(3):
        for name, value in stacked.member_state_dict(k).items():
            assert torch.equal(value, single.member_state_dict(0)[name]), name


@pytest.mark.parametrize("depth", [48, 512])
def test_deepnet_alpha_beta_on_exactly_v_o_gate_up_down(depth, tiny):
    """DeepNet constants at two depths (schemes.md: L=48 alpha 3.130 beta 0.2259; L=512 alpha 5.657 beta 0.1250)."""
    table = {48: (3.130, 0.2259), 512: (5.657, 0.1250)}
    cfg_pre, cfg = tiny("pre", width=8, n_heads=2, depth=depth, vocab=4), tiny("deepnet", width=8, n_heads=2, depth=depth, vocab=4)
    pre, deep = build_model(cfg_pre, seed=2), build_model(cfg, seed=2)
    beta = (8 * depth) ** -0.25
    alpha = (2 * depth) ** 0.25
    assert round(alpha, 3) == table[depth][0] and round(beta, 4) == table[depth][1]
    assert deep.scheme.alpha == pytest.approx(alpha, rel=1e-12)
    sd_pre, sd_deep = pre.member_state_dict(0), deep.member_state_dict(0)
    for block in (0, depth // 2, depth - 1):
        for name in WEIGHT_SLICES:
            ratio = weight(sd_deep, block, name, 8, cfg.hidden) / weight(sd_pre, block, name, 8, cfg.hidden)
            want = beta if name in ("v", "o", "gate", "up", "down") else 1.0
            torch.testing.assert_close(ratio, torch.full_like(ratio, want), rtol=1e-6, atol=0)
    assert torch.equal(sd_pre["tok_emb"], sd_deep["tok_emb"]) and torch.equal(sd_pre["head"], sd_deep["head"])


@pytest.mark.parametrize("depth", [4, 64])
def test_scaled_init_output_projections_std(depth, tiny):
    cfg = tiny("scaled_init", width=64, n_heads=4, depth=depth, vocab=4)
    sd = build_model(cfg, seed=0).member_state_dict(0)
    target = 0.02 / math.sqrt(2 * depth)
    o = torch.cat([sd[f"blocks.{i}.attn.o"].flatten() for i in range(depth)])
    down = torch.cat([sd[f"blocks.{i}.mlp.down"].flatten() for i in range(depth)])
    qkv = torch.cat([sd[f"blocks.{i}.attn.qkv"].flatten() for i in range(depth)])
    assert o.std().item() == pytest.approx(target, rel=0.03)
    assert down.std().item() == pytest.approx(target, rel=0.03)
    assert qkv.std().item() == pytest.approx(0.02, rel=0.03)
