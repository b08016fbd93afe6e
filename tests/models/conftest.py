"""An independent reference decoder for the model tests.

Written from the formulas in schemes.md with plain tensor maths: an explicit softmax attention with a
causal mask (no scaled_dot_product_attention), RoPE on even/odd pairs with real cos/sin, RMSNorm by
hand, LayerRoPE gains with complex numbers. It reads one member's state dict (the documented weight
layout: qkv columns q | k | v, gate_up columns gate | up, weights stored [in, out]) and takes the
scheme's residual step as a function written in the test, so a wrong wiring in `models` cannot be
reproduced by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from models.config import ModelConfig

# step(h, branch, norm, gains, layer, depth) -> h ; norm(x) has no gain; gains: {"in": g, "out": g}
RefStep = Callable[..., Tensor]


def ref_norm(x: Tensor, eps: float) -> Tensor:
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def ref_rope(x: Tensor, base: float) -> Tensor:
    """x [B, T, H, hd]: pair (2j, 2j+1) at position t turns by t * base^(-2j/hd)."""
    _, seq, _, hd = x.shape
    angle = torch.tensor([[t * base ** (-2.0 * j / hd) for j in range(hd // 2)] for t in range(seq)], dtype=torch.float64)
    c, s = angle.cos().to(x.dtype)[None, :, None, :], angle.sin().to(x.dtype)[None, :, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = even * s + odd * c
    return out


def ref_attention(x: Tensor, wqkv: Tensor, wo: Tensor, n_heads: int, base: float) -> Tensor:
    batch, seq, d = x.shape
    hd = d // n_heads
    qkv = x @ wqkv
    q = ref_rope(qkv[..., :d].reshape(batch, seq, n_heads, hd), base)
    k = ref_rope(qkv[..., d : 2 * d].reshape(batch, seq, n_heads, hd), base)
    v = qkv[..., 2 * d :].reshape(batch, seq, n_heads, hd)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    future = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return torch.einsum("bhts,bshd->bthd", weights, v).reshape(batch, seq, d) @ wo


def ref_mlp(x: Tensor, wgu: Tensor, wdown: Tensor) -> Tensor:
    hidden = wgu.shape[1] // 2
    gate, up = x @ wgu[:, :hidden], x @ wgu[:, hidden:]
    return (gate * torch.sigmoid(gate) * up) @ wdown


def ref_layerrope_gains(site: dict[str, Tensor], depth: int, base: float) -> Tensor:
    """[L, d] from one site's parameters, with complex arithmetic."""
    gamma = site["gamma"]
    d = gamma.shape[-1]
    pairs = torch.complex(gamma[0::2], gamma[1::2])
    freq = torch.tensor([base ** (-2.0 * j / d) for j in range(d // 2)], dtype=gamma.dtype)
    rows = []
    for layer in range(1, depth + 1):
        log_l = math.log(layer)
        magnitude = torch.exp(site["a_mag"] + site["b_mag"] * log_l)
        theta = torch.exp(site["a_rot"] + site["b_rot"] * log_l)
        z = pairs * magnitude * torch.exp(1j * theta * freq)
        rows.append(torch.stack([z.real, z.imag], dim=-1).reshape(d))
    return torch.stack(rows)


def ref_forward(sd: dict[str, Tensor], cfg: ModelConfig, step: RefStep, idx: Tensor, *,
                embed_norm: bool = False, final_norm: bool = True, layerrope_base: float | None = None) -> Tensor:
    """Logits [B, T, V] of one member given its state dict and the scheme's step written in the test."""
    eps = cfg.norm_eps
    h = sd["tok_emb"][idx]
    if embed_norm:
        h = ref_norm(h, eps) * sd["embed_gain"]
    external: dict[str, Tensor] = {}
    if layerrope_base is not None:
        for site in ("attn_in", "attn_out", "mlp_in", "mlp_out"):
            params = {p: sd[f"site_gains.sites.{site}.{p}"] for p in ("gamma", "a_mag", "b_mag", "a_rot", "b_rot")}
            external[site] = ref_layerrope_gains(params, cfg.depth, layerrope_base)
    for i in range(cfg.depth):
        layer = i + 1
        prefix = f"blocks.{i}."

        # The helpers below are called within this iteration only (bound through defaults for clarity).
        def gains(sub: str, prefix: str = prefix, i: int = i) -> dict[str, Tensor]:
            found = {}
            for where in ("in", "out"):
                key = f"{prefix}gains.{sub}_{where}"
                if key in sd:
                    found[where] = sd[key]
                elif f"{sub}_{where}" in external:
                    found[where] = external[f"{sub}_{where}"][i]
            return found

        def attn(x: Tensor, prefix: str = prefix) -> Tensor:
            return ref_attention(x, sd[prefix + "attn.qkv"], sd[prefix + "attn.o"], cfg.n_heads, cfg.rope_base)

        def mlp(x: Tensor, prefix: str = prefix) -> Tensor:
            return ref_mlp(x, sd[prefix + "mlp.gate_up"], sd[prefix + "mlp.down"])

        def norm(x: Tensor) -> Tensor:
            return ref_norm(x, eps)

        h = step(h, attn, norm, gains("attn"), layer, cfg.depth)
        h = step(h, mlp, norm, gains("mlp"), layer, cfg.depth)
    if final_norm:
        h = ref_norm(h, eps) * sd["final_gain"]
    return h @ sd["head"]


@pytest.fixture(autouse=True)
def one_thread(one_torch_thread: None) -> None:
    """One intra-op thread for every model test (`one_torch_thread` in tests/conftest.py)."""


@pytest.fixture
def reference_forward() -> Callable[..., Tensor]:
    return ref_forward


@pytest.fixture
def reference_layerrope() -> Callable[..., Tensor]:
    return ref_layerrope_gains


def tiny_config(scheme: str = "pre", **overrides) -> ModelConfig:
    base = {"width": 16, "n_heads": 2, "depth": 4, "vocab": 37, "seq_len": 8, "scheme": scheme}
    base.update(overrides)
    return ModelConfig(**base)


@pytest.fixture
def tiny() -> Callable[..., ModelConfig]:
    return tiny_config
