"""AdamW for a stack of K models whose parameters all carry a leading member dimension.

Each member k has its own peak learning rate (`lrs[k]`), its own gradient clipping (the norm
over all of member k's gradients, like `torch.nn.utils.clip_grad_norm_` on a separate model)
and can be masked (no update at all: parameters and moments stay as they are). The update
is element-for-element torch.optim.AdamW's (decoupled weight decay `p *= 1 - lr * wd`, bias
corrections, eps added after the square root), so K members match K separately trained
`torch.optim.AdamW` models to float rounding. Per-parameter multipliers come from the
model's `param_specs()`: `lr_mult` scales the LR (and so the weight decay, as in a torch
param group), `eps_mult` scales eps, `weight_decay` switches decay on or off.

Why not stock torch.optim: it cannot take a vector of per-member LRs (a tensor `lr` must
have one element in torch 2.13). The updates run through `torch._foreach_*` over groups of
parameters of equal rank, with the per-member LR as a `[K, 1, ...]` view.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


class SpecLike(Protocol):
    name: str
    param: torch.nn.Parameter
    lr_mult: float
    eps_mult: float
    weight_decay: bool


@dataclass
class _Group:
    names: list[str]
    params: list[torch.Tensor]
    ndim: int
    lr_mult: float
    eps_mult: float
    decay: bool


def member_view(t: torch.Tensor, k: int, ndim: int) -> torch.Tensor:
    """A `[K]` tensor as `[K, 1, ...]` for broadcasting against `ndim`-dimensional stacked tensors."""
    return t.view(k, *([1] * (ndim - 1)))


@torch.no_grad()
def clip_and_mask(
    grads: Sequence[torch.Tensor], k: int, active: torch.Tensor | None, grad_clip: float, device: torch.device
) -> torch.Tensor:
    """Zero the gradients of masked members (`active` False), then clip each member's gradient norm over all of
    `grads` (`[K, ...]` each) to `grad_clip` (0: no clipping); return the `[K]` norms before clipping."""
    if active is not None and not bool(active.all()):
        for g in grads:
            # masked_fill, not a multiply: a diverged member's gradient may hold NaN/Inf.
            g.masked_fill_(~member_view(active, k, g.ndim), 0.0)
    sq = torch.zeros(k, dtype=torch.float32, device=device)
    for g in grads:
        sq += g.detach().float().pow(2).reshape(k, -1).sum(dim=1)
    norms = sq.sqrt()
    if grad_clip > 0:
        coef = (grad_clip / (norms + 1e-6)).clamp(max=1.0)
        by_ndim: dict[int, list[torch.Tensor]] = {}
        for g in grads:
            by_ndim.setdefault(g.ndim, []).append(g)
        for ndim, gs in by_ndim.items():
            view = member_view(coef.to(gs[0].dtype), k, ndim)
            torch._foreach_mul_(gs, [view] * len(gs))
    return norms


class StackedAdamW:
    def __init__(
        self,
        specs: Sequence[SpecLike],
        lrs: Sequence[float] | torch.Tensor,
        *,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        grad_clip: float = 0.0,
    ) -> None:
        if not specs:
            raise ValueError("no parameters to optimize")
        device = specs[0].param.device
        self.lrs = torch.as_tensor(lrs, dtype=torch.float32, device=device).clone()
        self.k = int(self.lrs.numel())
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.grad_clip = float(grad_clip)
        self.step_count = 0  # updates so far (every unmasked member has taken exactly this many)
        self.exp_avg: dict[str, torch.Tensor] = {}
        self.exp_avg_sq: dict[str, torch.Tensor] = {}
        self._bind(specs)

    def _bind(self, specs: Sequence[SpecLike]) -> None:
        self.specs = list(specs)
        groups: dict[tuple[int, float, float, bool], _Group] = {}
        for spec in self.specs:
            p = spec.param
            if p.ndim < 1 or p.shape[0] != self.k:
                raise ValueError(f"{spec.name}: shape {tuple(p.shape)} has no leading member dimension of {self.k}")
            decay = bool(spec.weight_decay) and self.weight_decay > 0
            key = (p.ndim, float(spec.lr_mult), float(spec.eps_mult), decay)
            group = groups.setdefault(key, _Group([], [], p.ndim, key[1], key[2], decay))
            group.names.append(spec.name)
            group.params.append(p)
            if spec.name not in self.exp_avg:
                self.exp_avg[spec.name] = torch.zeros_like(p, memory_format=torch.preserve_format)
                self.exp_avg_sq[spec.name] = torch.zeros_like(p, memory_format=torch.preserve_format)
        self.groups = list(groups.values())

    def _view(self, t: torch.Tensor, ndim: int) -> torch.Tensor:
        return t.view(self.k, *([1] * (ndim - 1)))

    @torch.no_grad()
    def clip_and_mask(self, active: torch.Tensor | None) -> torch.Tensor:
        """Zero the gradients of masked members, clip each member's gradient norm; return the [K] norms before clipping."""
        grads = [s.param.grad for s in self.specs if s.param.grad is not None]
        return clip_and_mask(grads, self.k, active, self.grad_clip, self.lrs.device)

    @torch.no_grad()
    def step(self, lr_scale: float = 1.0, active: torch.Tensor | None = None) -> torch.Tensor:
        """One AdamW update at `lr_scale` x each member's LR; masked members (active False) stay unchanged.

        Returns each member's gradient norm before clipping.
        """
        norms = self.clip_and_mask(active)
        self.step_count += 1
        beta1, beta2 = self.betas
        bias1 = 1.0 - beta1**self.step_count
        bias2_sqrt = math.sqrt(1.0 - beta2**self.step_count)
        lr = self.lrs * float(lr_scale)
        if active is not None:
            lr = torch.where(active, lr, torch.zeros_like(lr))
        for group in self.groups:
            params = [p for p in group.params if p.grad is not None]
            if not params:
                continue
            names = [n for n, p in zip(group.names, group.params) if p.grad is not None]
            grads = [p.grad for p in params if p.grad is not None]
            m = [self.exp_avg[n] for n in names]
            v = [self.exp_avg_sq[n] for n in names]
            group_lr = lr * group.lr_mult
            if active is not None and not bool(active.all()):
                # Masked members: keep their moments exactly (their gradient is zero, so only the decay would change them).
                keep_m = [t.clone() for t in m]
                keep_v = [t.clone() for t in v]
            if group.decay:
                decay = self._view(1.0 - group_lr * self.weight_decay, group.ndim)
                torch._foreach_mul_(params, [decay] * len(params))
            torch._foreach_lerp_(m, grads, 1.0 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, 1.0 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, bias2_sqrt)
            torch._foreach_add_(denom, self.eps * group.eps_mult)
            update = torch._foreach_div(m, denom)
            step_size = self._view(-(group_lr / bias1), group.ndim)
            torch._foreach_mul_(update, [step_size] * len(update))
            torch._foreach_add_(params, update)
            if active is not None and not bool(active.all()):
                mask = [~self._view(active, group.ndim)] * len(m)
                for t, old, msk in zip(m + v, keep_m + keep_v, mask + mask):
                    t.copy_(torch.where(msk, old, t))
        return norms

    def zero_grad(self) -> None:
        for spec in self.specs:
            spec.param.grad = None

    # ---- membership changes and checkpoints -------------------------------------------------

    def compact(self, keep: Sequence[int], specs: Sequence[SpecLike]) -> None:
        """Keep members `keep` (in that order) and rebind to the new model's parameters `specs`."""
        index = torch.as_tensor(list(keep), dtype=torch.long, device=self.lrs.device)
        self.lrs = self.lrs.index_select(0, index)
        self.k = len(keep)
        self.exp_avg = {n: t.index_select(0, index.to(t.device)) for n, t in self.exp_avg.items()}
        self.exp_avg_sq = {n: t.index_select(0, index.to(t.device)) for n, t in self.exp_avg_sq.items()}
        self._bind(specs)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        out = {"lrs": self.lrs}
        out.update({f"exp_avg/{n}": t for n, t in self.exp_avg.items()})
        out.update({f"exp_avg_sq/{n}": t for n, t in self.exp_avg_sq.items()})
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], step_count: int) -> None:
        self.lrs.copy_(tensors["lrs"])
        for n in self.exp_avg:
            self.exp_avg[n].copy_(tensors[f"exp_avg/{n}"])
            self.exp_avg_sq[n].copy_(tensors[f"exp_avg_sq/{n}"])
        self.step_count = int(step_count)
