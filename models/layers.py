"""Stacked building blocks: every weight has a leading stack dimension K (K models side by side).

Activations of the residual stream are `[K, N, d]` with N = batch * sequence tokens; linear layers
are batched matmuls (`torch.bmm(x, W)` with W `[K, in, out]`), attention folds K into the batch
dimension of `scaled_dot_product_attention`. With K = 1 this is a plain model at plain-model speed.
Shared by every family that uses these sublayers (the LLaMA decoder, the looped LM, the ViT).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def rms_norm(x: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dimension without a gain: x / sqrt(mean(x^2) + eps)."""
    return F.rms_norm(x, (x.shape[-1],), eps=eps)


# ---- rotary position embedding ---------------------------------------------------------------------


class Rotary(NamedTuple):
    """RoPE tables for one sequence length, computed once per forward and shared by all layers.

    Pairs are interleaved (dims 2j, 2j+1 of each head rotate together by angle t * base^(-2j/hd)).
    `cos`, `sin`: `[T, 1, 1, hd/2]`; `cis` = cos + i sin (complex), or None when not needed.
    """

    cos: Tensor
    sin: Tensor
    cis: Tensor | None


def rope_inv_freq(head_dim: int, base: float) -> Tensor:
    j = torch.arange(head_dim // 2, dtype=torch.float64)
    return (base ** (-2.0 * j / head_dim)).float()


def rotary_tables(seq_len: int, inv_freq: Tensor) -> Rotary:
    positions = torch.arange(seq_len, device=inv_freq.device, dtype=torch.float32)
    angle = torch.outer(positions, inv_freq.float())[:, None, None, :]
    cos, sin = angle.cos(), angle.sin()
    cis = None if torch.compiler.is_compiling() else torch.complex(cos, sin)
    return Rotary(cos, sin, cis)


def apply_rotary(x: Tensor, rope: Rotary) -> Tensor:
    """Rotate interleaved pairs of the last dim of `x` `[N, T, ..., hd]` by the position angles.

    Eagerly, one complex multiply (one kernel, the fastest form on CPU; computed in fp32 for
    16-bit inputs). Under torch.compile the real form, which the compiler fuses into one kernel.
    """
    if rope.cis is None:
        x0, x1 = x.unflatten(-1, (-1, 2)).unbind(-1)
        cos, sin = rope.cos.to(x.dtype), rope.sin.to(x.dtype)
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    z = torch.view_as_complex(wide.unflatten(-1, (-1, 2))) * rope.cis
    return torch.view_as_real(z).flatten(-2).to(x.dtype)


# ---- sublayers ---------------------------------------------------------------------------------------


class Attention(nn.Module):
    """Multi-head attention with RoPE: fused `qkv` `[K, d, 3d]` (columns q | k | v, heads contiguous
    within each), output projection `o` `[K, d, d]`. No biases."""

    def __init__(self, width: int, n_heads: int, *, stack: int, causal: bool = True) -> None:
        super().__init__()
        self.width, self.n_heads, self.head_dim, self.causal = width, n_heads, width // n_heads, causal
        self.qkv = nn.Parameter(torch.empty(stack, width, 3 * width))
        self.o = nn.Parameter(torch.empty(stack, width, width))

    def forward(self, x: Tensor, seq_len: int, rope: Rotary | None = None) -> Tensor:
        """`x` `[K, B*seq_len, d]` -> `[K, B*seq_len, d]`; RoPE on q and k when `rope` is given."""
        k_models, n_tokens, _ = x.shape
        seq = seq_len
        batch = k_models * (n_tokens // seq)
        qkv = torch.bmm(x, self.qkv).view(batch, seq, 3, self.n_heads, self.head_dim)
        qk = qkv[:, :, :2] if rope is None else apply_rotary(qkv[:, :, :2], rope)
        q, k, v = qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2), qkv[:, :, 2].transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # [K*B, H, T, hd]
        y = y.transpose(1, 2).reshape(k_models, n_tokens, self.width)
        return torch.bmm(y, self.o)


class SwiGLU(nn.Module):
    """SwiGLU MLP: fused `gate_up` `[K, d, 2h]` (columns gate | up), `down` `[K, h, d]`. No biases."""

    def __init__(self, width: int, hidden: int, *, stack: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.gate_up = nn.Parameter(torch.empty(stack, width, 2 * hidden))
        self.down = nn.Parameter(torch.empty(stack, hidden, width))

    def forward(self, x: Tensor) -> Tensor:
        gate, up = torch.bmm(x, self.gate_up).chunk(2, dim=-1)
        return torch.bmm(F.silu(gate) * up, self.down)


# ---- what a scheme sees of one sublayer ------------------------------------------------------------


class ResidualStep:
    """`models.scheme.StepOps` for one sublayer of one block during one forward pass.

    `gains`: the block's own gain parameters `[K, d]` by full site name; `external`: this layer's
    rows of model-level gains (LayerRoPE) `[K, d]` by site; `consts`: the block (per-layer constant
    buffers are its attributes `c_<name>`).
    """

    __slots__ = ("_fn", "_prefix", "_gains", "_external", "_consts", "_eps")

    def __init__(
        self,
        fn: Callable[[Tensor], Tensor],
        prefix: str,
        gains: Mapping[str, Tensor],
        external: Mapping[str, Tensor],
        consts: nn.Module,
        eps: float,
    ) -> None:
        self._fn, self._prefix, self._gains, self._external = fn, prefix, gains, external
        self._consts, self._eps = consts, eps

    def branch(self, x: Tensor) -> Tensor:
        return self._fn(x)

    def norm(self, x: Tensor, site: str | None = None) -> Tensor:
        y = rms_norm(x, self._eps)
        return y if site is None else self.gain(y, site)

    def gain(self, x: Tensor, site: str) -> Tensor:
        key = self._prefix + site
        g = self._gains[key] if key in self._gains else self._external[key]
        return x * g.unsqueeze(-2)

    def const(self, name: str) -> Tensor:
        return getattr(self._consts, "c_" + name)
