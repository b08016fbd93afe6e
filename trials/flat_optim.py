"""StackedAdamW on flat buffers: the fast optimizer step (eager, compiled, or inside a CUDA graph).

The update is `trials.optim.StackedAdamW`'s, element for element (per-member LRs, per-member
clipping, masking, `lr_mult` / `eps_mult` / weight-decay flags from `param_specs()`), but:

- Parameters of equal shape and equal optimizer settings (every block's `qkv`, every gain, ...)
  are moved into one contiguous buffer `[n, K, *shape]` and the model's parameters become views
  of it (`param.data = buffer[i]`); their gradients are views of a twin buffer, which autograd
  accumulates into in place. The update then runs a dozen ops per *group* (8-12 groups for the
  decoder whatever its depth) instead of a dozen per parameter, and compiling it gives one graph
  whose compile time does not grow with depth.
- Every per-step value is a tensor on the device: the per-member LRs `lrs[K]`, the `active[K]`
  mask and `scalars` = (schedule factor, 1 - beta1^t, sqrt(1 - beta2^t)), refreshed in place
  before each step. Nothing is read back to the host, so the step can be compiled once (no
  recompilation when the schedule moves) and captured in a CUDA graph.

Masked members (active False) keep parameters and moments exactly, as in StackedAdamW. The
per-member gradient norm is summed in another order than StackedAdamW's (per group, then over
groups), so the two agree to float rounding, not bit for bit. Checkpoint tensors use
StackedAdamW's names, so a checkpoint written by one resumes with the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trials.compiled import OPTIMIZER_RECOMPILE_LIMIT, compile_private
from trials.optim import SpecLike


@dataclass
class FlatGroup:
    """Parameters of one shape and one setting of (lr_mult, eps_mult, decay), as one buffer."""

    names: list[str]
    shape: tuple[int, ...]  # per parameter, with the leading K
    lr_mult: float
    eps_mult: float
    decay: bool
    params: Tensor  # [n, K, *shape[1:]]; the model's parameters are views params[i]
    grads: Tensor
    exp_avg: Tensor
    exp_avg_sq: Tensor


def _update(
    groups: list[tuple[Tensor, Tensor, Tensor, Tensor]],
    settings: tuple[tuple[float, float, bool], ...],
    lrs: Tensor,
    scalars: Tensor,
    active: Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    grad_clip: float,
) -> Tensor:
    """One AdamW step over all groups; returns the `[K]` gradient norms before clipping.

    `groups`: (params, grads, exp_avg, exp_avg_sq) buffers `[n, K, ...]`; `settings`: per group
    (lr_mult, eps_mult, decay). Written with plain tensor ops so that it runs eagerly, compiles
    to one graph, and captures in a CUDA graph (no host reads, no data-dependent branches).
    """
    norms, coef = mask_and_norms([g for _, g, _, _ in groups], active, grad_clip)
    lr = torch.where(active, lrs * scalars[0], torch.zeros((), dtype=lrs.dtype, device=lrs.device))
    adamw_groups(groups, settings, lr, coef, active, scalars[1], scalars[2], beta1, beta2, eps, weight_decay)
    return norms


def mask_and_norms(grads: list[Tensor], active: Tensor, grad_clip: float) -> tuple[Tensor, Tensor | None]:
    """Zero the masked members' gradients in the `[n, K, ...]` buffers `grads`; return the `[K]` gradient norms
    over all of them and the clipping coefficients (None without clipping), not yet applied."""
    k = active.shape[0]
    sq = torch.zeros(k, dtype=torch.float32, device=active.device)
    for g in grads:
        # masked members first (their gradient may be NaN/Inf): zeros, as StackedAdamW's masked_fill
        g.masked_fill_(~active.view(1, k, *([1] * (g.ndim - 2))), 0.0)
        sq = sq + g.float().pow(2).sum(dim=[0, *range(2, g.ndim)])
    norms = sq.sqrt()
    coef = (grad_clip / (norms + 1e-6)).clamp(max=1.0) if grad_clip > 0 else None
    return norms, coef


def adamw_groups(
    groups: list[tuple[Tensor, Tensor, Tensor, Tensor]],
    settings: tuple[tuple[float, float, bool], ...],
    lr: Tensor,
    coef: Tensor | None,
    active: Tensor,
    bias1: Tensor,
    bias2_sqrt: Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
) -> None:
    """The AdamW update of `groups` at the per-member `lr` (`[K]`, zero for masked members), after clipping
    the gradients by `coef`; masked members keep their moments."""
    k = lr.shape[0]
    for (p, g, m, v), (lr_mult, eps_mult, decay) in zip(groups, settings):
        view = (1, k, *([1] * (p.ndim - 2)))
        keep = active.view(view)
        if coef is not None:
            g.mul_(coef.to(g.dtype).view(view))
        group_lr = lr * lr_mult
        if decay:
            p.mul_((1.0 - group_lr * weight_decay).view(view))
        m_new = torch.lerp(m, g, 1.0 - beta1)
        v_new = v * beta2
        v_new.addcmul_(g, g, value=1.0 - beta2)
        denom = v_new.sqrt() / bias2_sqrt + eps * eps_mult
        update = (m_new / denom) * (-(group_lr / bias1)).view(view)
        p.add_(update)
        m.copy_(torch.where(keep, m_new, m))
        v.copy_(torch.where(keep, v_new, v))


def flatten_params(members: Sequence[SpecLike]) -> tuple[Tensor, Tensor]:
    """Move parameters of one shape into one buffer `[n, K, ...]` (the parameters become views of it) with a twin
    gradient buffer (their `.grad` are views of it, accumulated into in place); returns (params, grads)."""
    params = torch.stack([s.param.detach() for s in members])
    grads = torch.zeros_like(params)
    for i, s in enumerate(members):
        s.param.data = params[i]
        s.param.grad = grads[i]
    return params, grads


class FlatStackedAdamW:
    """StackedAdamW with flat per-group buffers and tensor-valued per-step settings.

    `compile=True` compiles the update (one graph); `step_tensors` is the no-host-read step used
    inside deferred-sync training and CUDA graphs; `step` mirrors StackedAdamW's signature.
    """

    def __init__(
        self,
        specs: Sequence[SpecLike],
        lrs: Sequence[float] | Tensor,
        *,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        grad_clip: float = 0.0,
        compile: bool = False,
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
        self.step_count = 0
        self.scalars = torch.ones(3, dtype=torch.float32, device=device)  # schedule factor, bias1, bias2_sqrt
        self.active = torch.ones(self.k, dtype=torch.bool, device=device)
        self.compiled = compile
        self._fn: Callable[..., Tensor] = _update
        self._bind(specs, moments=None)

    # ---- layout ---------------------------------------------------------------------------------

    def _bind(self, specs: Sequence[SpecLike], moments: dict[str, tuple[Tensor, Tensor]] | None) -> None:
        """Move the parameters into group buffers (the model's parameters become views)."""
        self.specs = list(specs)
        by_key: dict[tuple, list[SpecLike]] = {}
        for spec in self.specs:
            p = spec.param
            if p.ndim < 1 or p.shape[0] != self.k:
                raise ValueError(f"{spec.name}: shape {tuple(p.shape)} has no leading member dimension of {self.k}")
            decay = bool(spec.weight_decay) and self.weight_decay > 0
            key = (tuple(p.shape), p.dtype, float(spec.lr_mult), float(spec.eps_mult), decay)
            by_key.setdefault(key, []).append(spec)
        self.groups: list[FlatGroup] = []
        for (shape, dtype, lr_mult, eps_mult, decay), members in by_key.items():
            device = members[0].param.device
            params, grads = flatten_params(members)
            if moments is None:
                m, v = torch.zeros_like(params), torch.zeros_like(params)
            else:
                m = torch.stack([moments[s.name][0] for s in members]).to(device)
                v = torch.stack([moments[s.name][1] for s in members]).to(device)
            self.groups.append(FlatGroup([s.name for s in members], shape, lr_mult, eps_mult, decay, params, grads, m, v))
        self._settings = tuple((g.lr_mult, g.eps_mult, g.decay) for g in self.groups)
        if self.compiled:  # one compiled update per layout, with its own cache (trials.compiled)
            self._fn = compile_private(_update, fullgraph=True, recompile_limit=OPTIMIZER_RECOMPILE_LIMIT)

    def _tensors(self) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
        return [(g.params, g.grads, g.exp_avg, g.exp_avg_sq) for g in self.groups]

    # ---- stepping -------------------------------------------------------------------------------

    def set_scalars(self, lr_scale: float) -> None:
        """Advance the step count and write this step's schedule factor and bias corrections in place."""
        self.step_count += 1
        beta1, beta2 = self.betas
        values = [float(lr_scale), 1.0 - beta1**self.step_count, math.sqrt(1.0 - beta2**self.step_count)]
        if self.scalars.device.type == "cpu":
            self.scalars.copy_(torch.tensor(values, dtype=torch.float32))
        else:  # three fills with host scalars: kernel launches, no synchronisation
            for i, value in enumerate(values):
                self.scalars[i].fill_(value)

    @torch.no_grad()
    def step_tensors(self) -> Tensor:
        """The update with this step's `scalars` and `active` as they are on the device (no host read)."""
        return self._fn(self._tensors(), self._settings, self.lrs, self.scalars, self.active, self.betas[0],
                        self.betas[1], self.eps, self.weight_decay, self.grad_clip)

    @torch.no_grad()
    def step(self, lr_scale: float = 1.0, active: Tensor | None = None) -> Tensor:
        """StackedAdamW.step's signature: one update at `lr_scale`; members with `active` False are left unchanged."""
        if active is not None:
            self.active.copy_(active)
        else:
            self.active.fill_(True)
        self.set_scalars(lr_scale)
        return self.step_tensors()

    def zero_grad(self) -> None:
        """Zero the gradient buffers in place (the parameters' `.grad` stay views of them)."""
        for g in self.groups:
            g.grads.zero_()

    # ---- membership changes and checkpoints (StackedAdamW's API and names) ------------------------

    def _moments(self) -> dict[str, tuple[Tensor, Tensor]]:
        return {n: (g.exp_avg[i], g.exp_avg_sq[i]) for g in self.groups for i, n in enumerate(g.names)}

    def compact(self, keep: Sequence[int], specs: Sequence[SpecLike]) -> None:
        """Keep members `keep` (in that order) and rebind to the new model's parameters `specs`."""
        index = torch.as_tensor(list(keep), dtype=torch.long, device=self.lrs.device)
        moments = {n: (m.index_select(0, index), v.index_select(0, index)) for n, (m, v) in self._moments().items()}
        self.lrs = self.lrs.index_select(0, index)
        self.active = self.active.index_select(0, index)
        self.k = len(keep)
        self._bind(specs, moments)

    def state_tensors(self) -> dict[str, Tensor]:
        out = {"lrs": self.lrs}
        for name, (m, v) in self._moments().items():
            out[f"exp_avg/{name}"] = m
            out[f"exp_avg_sq/{name}"] = v
        return out

    def load_state_tensors(self, tensors: dict[str, Tensor], step_count: int) -> None:
        self.lrs.copy_(tensors["lrs"])
        for name, (m, v) in self._moments().items():
            m.copy_(tensors[f"exp_avg/{name}"])
            v.copy_(tensors[f"exp_avg_sq/{name}"])
        self.step_count = int(step_count)
