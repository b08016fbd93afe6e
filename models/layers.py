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

    Pairs are interleaved: dims 2j, 2j+1 of each head turn together by angle t * base^(-2j/hd) at
    position t. The tables act on the fused `[.., T, 3, H, hd]` q|k|v tensor at once: slot 2 (v) has
    angle 0, so rotating all of qkv rotates q and k and leaves v as it is (one kernel, and no
    zero-filled slice gradients in the backward pass).
    `cos`, `sin`: `[T, 3, 1, hd/2]`; `cis` = cos + i sin (complex), None under torch.compile.
    """

    cos: Tensor
    sin: Tensor
    cis: Tensor | None


def rotary_tables(
    seq_len: int, head_dim: int, base: float, device: torch.device, dtype: torch.dtype = torch.float32
) -> Rotary:
    """Tables in `dtype` (fp32, or fp64 for an fp64 model; never 16-bit, angles need the precision)."""
    inv_freq = base ** (-2.0 * torch.arange(head_dim // 2, device=device, dtype=torch.float64) / head_dim)
    positions = torch.arange(seq_len, device=device, dtype=torch.float64)
    slot_rotates = (torch.arange(3, device=device) < 2).to(torch.float64)  # q, k turn; v does not
    angle = (positions[:, None, None, None] * slot_rotates[None, :, None, None] * inv_freq).to(dtype)
    cos, sin = angle.cos(), angle.sin()
    cis = None if torch.compiler.is_compiling() else torch.complex(cos, sin)
    return Rotary(cos, sin, cis)


def apply_rotary(qkv: Tensor, rope: Rotary) -> Tensor:
    """Rotate q and k of the fused `qkv` `[N, T, 3, H, hd]` by their positions (v unchanged).

    Eagerly, one complex multiply (one kernel, the fastest form on CPU; computed in fp32 for
    16-bit inputs). Under torch.compile the real form, which the compiler fuses into one kernel.
    """
    if rope.cis is None or torch.compiler.is_compiling():
        x0, x1 = qkv.unflatten(-1, (-1, 2)).unbind(-1)
        cos, sin = rope.cos.to(qkv.dtype), rope.sin.to(qkv.dtype)
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
    wide = qkv if qkv.dtype in (torch.float32, torch.float64) else qkv.float()
    z = torch.view_as_complex(wide.unflatten(-1, (-1, 2))) * rope.cis
    return torch.view_as_real(z).flatten(-2).to(qkv.dtype)


# ---- sublayers ---------------------------------------------------------------------------------------


def project_out(
    y: Tensor, weight: Tensor, residual: Tensor | None = None, skip: float = 1.0, scale: float = 1.0
) -> Tensor:
    """`skip * residual + scale * (y @ weight)`: the output projection of a branch and the residual add
    in one matmul-accumulate kernel (`baddbmm`). Under autocast the add stays separate, so that the
    residual stream keeps its own (fp32) precision instead of being rounded to the matmul's dtype.
    """
    if residual is not None and residual.dtype == y.dtype and not torch.is_autocast_enabled(y.device.type):
        return torch.baddbmm(residual, y, weight, beta=skip, alpha=scale)
    out = torch.bmm(y, weight)
    if scale != 1.0:
        out = out * scale
    if residual is None:
        return out
    return (residual if skip == 1.0 else residual * skip) + out


class Attention(nn.Module):
    """Multi-head attention with RoPE: fused `qkv` `[K, d, 3d]` (columns q | k | v, heads contiguous
    within each), output projection `o` `[K, d, d]`. No biases.

    `qk_norm_eps`: RMSNorm (no gain) of every head's query and key over the head dimension, before RoPE
    (QK-norm); None: off. `forward(..., ve=)`: a value embedding `[K, B*seq_len, d]` added to the values
    after the v projection (Parcae / nanochat's value embeddings)."""

    def __init__(self, width: int, n_heads: int, *, stack: int, causal: bool = True,
                 qk_norm_eps: float | None = None) -> None:
        super().__init__()
        self.width, self.n_heads, self.head_dim, self.causal = width, n_heads, width // n_heads, causal
        self.qk_norm_eps = qk_norm_eps
        self.qkv = nn.Parameter(torch.empty(stack, width, 3 * width))
        self.o = nn.Parameter(torch.empty(stack, width, width))

    def forward(
        self, x: Tensor, seq_len: int, rope: Rotary | None = None, *, ve: Tensor | None = None,
        residual: Tensor | None = None, skip: float = 1.0, scale: float = 1.0,
    ) -> Tensor:
        """`x` `[K, B*seq_len, d]` -> `[K, B*seq_len, d]`; RoPE on q and k when `rope` is given.
        With `residual`: `skip * residual + scale * attention(x)` (see `project_out`)."""
        k_models, n_tokens, _ = x.shape
        batch = k_models * (n_tokens // seq_len)
        qkv = torch.bmm(x, self.qkv).view(batch, seq_len, 3, self.n_heads, self.head_dim)
        if self.qk_norm_eps is not None:  # q and k normalised per head, v as it is
            qkv = torch.cat((rms_norm(qkv[:, :, :2], self.qk_norm_eps), qkv[:, :, 2:]), dim=2)
        if rope is not None:
            qkv = apply_rotary(qkv, rope)
        q, k, v = qkv.unbind(2)  # [K*B, T, H, hd] each
        if ve is not None:
            v = v + ve.reshape(batch, seq_len, self.n_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [K*B, H, T, hd] each
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # [K*B, H, T, hd]
        y = y.transpose(1, 2).reshape(k_models, n_tokens, self.width)
        return project_out(y, self.o, residual, skip, scale)


class SwiGLU(nn.Module):
    """SwiGLU MLP: fused `gate_up` `[K, d, 2h]` (columns gate | up), `down` `[K, h, d]`. No biases."""

    def __init__(self, width: int, hidden: int, *, stack: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.gate_up = nn.Parameter(torch.empty(stack, width, 2 * hidden))
        self.down = nn.Parameter(torch.empty(stack, hidden, width))

    def forward(self, x: Tensor, *, residual: Tensor | None = None, skip: float = 1.0, scale: float = 1.0) -> Tensor:
        """With `residual`: `skip * residual + scale * mlp(x)` (see `project_out`)."""
        gate, up = torch.bmm(x, self.gate_up).chunk(2, dim=-1)
        return project_out(F.silu(gate) * up, self.down, residual, skip, scale)


class ReLU2MLP(nn.Module):
    """ReLU^2 MLP (Parcae, nanochat): `up` `[K, d, h]`, `down` `[K, h, d]`, relu(x up)^2 between them. No
    gate, no biases."""

    def __init__(self, width: int, hidden: int, *, stack: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.up = nn.Parameter(torch.empty(stack, width, hidden))
        self.down = nn.Parameter(torch.empty(stack, hidden, width))

    def forward(self, x: Tensor, *, residual: Tensor | None = None, skip: float = 1.0, scale: float = 1.0) -> Tensor:
        """With `residual`: `skip * residual + scale * mlp(x)` (see `project_out`)."""
        return project_out(F.relu(torch.bmm(x, self.up)).square(), self.down, residual, skip, scale)


# ---- what a scheme sees of one sublayer ------------------------------------------------------------


class ResidualStep:
    """`models.scheme.StepOps` for one sublayer of one block during one forward pass.

    `fn(x, residual=None, skip=1.0, scale=1.0)` is the sublayer (see `Attention` and `SwiGLU`).
    `gains`: the block's own gain parameters `[K, d]` by full site name; `external`: this layer's
    rows of model-level gains (LayerRoPE) `[K, d]` by site; `consts`: the block (per-layer constant
    buffers are its attributes `c_<name>`).
    """

    __slots__ = ("_consts", "_eps", "_external", "_fn", "_gains", "_prefix")

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

    def residual(self, h: Tensor, x: Tensor, *, skip: float = 1.0, scale: float = 1.0, gain: str | None = None) -> Tensor:
        if gain is None:  # fused into the branch's output projection
            return self._fn(x, residual=h, skip=skip, scale=scale)
        base = h if skip == 1.0 else h * skip
        return torch.addcmul(base, self._site_gain(gain).unsqueeze(-2), self._fn(x), value=scale)

    def norm(self, x: Tensor, site: str | None = None) -> Tensor:
        if site is None:
            return rms_norm(x, self._eps)
        g = self._site_gain(site)
        if g.shape[0] == 1:  # one member: the gain fits rms_norm's weight (a fused kernel on GPUs)
            return F.rms_norm(x, (x.shape[-1],), g.view(-1), eps=self._eps)  # a view: no backward op
        return rms_norm(x, self._eps) * g.unsqueeze(-2)

    def gain(self, x: Tensor, site: str) -> Tensor:
        return x * self._site_gain(site).unsqueeze(-2)

    def _site_gain(self, site: str) -> Tensor:
        key = self._prefix + site
        return self._gains[key] if key in self._gains else self._external[key]

    def const(self, name: str) -> Tensor:
        return getattr(self._consts, "c_" + name)
