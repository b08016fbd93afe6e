"""StackedMuon on flat buffers: the Muon + AdamW step of the compiled, deferred-sync and CUDA-graph paths.

`trials.muon.StackedMuon`'s update (same rule, same names in checkpoints), laid out as
`trials.flat_optim.FlatStackedAdamW` lays out AdamW: parameters of one shape and one setting share a buffer
`[n, K, ...]` (the model's parameters become views), so the update is a few ops per *group* whatever the
depth. For Muon's matrices that also means one batched Newton-Schulz per group: the `n x K` matrices of a
group (every block's `qkv`, say) go through `baddbmm` together.

Every per-step value is a device tensor (`lrs[K]`, `active[K]`, `scalars` = schedule factor, AdamW's two bias
corrections, the weight decay's schedule factor), so the update compiles once into one graph (`compile=True`,
`trials.compiled.compile_private`, as FlatStackedAdamW's), never recompiles as the schedule moves, and can be
captured in a CUDA graph. Newton-Schulz's five bfloat16 `baddbmm` pairs per group are part of that graph,
compiled with eager's bfloat16 roundings (`COMPILE_OPTIONS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trials.compiled import OPTIMIZER_RECOMPILE_LIMIT, compile_private
from trials.flat_optim import FlatStackedAdamW, adamw_groups, flatten_params, mask_and_norms
from trials.muon import MuonRule, is_muon_param, lr_adjustment, muon_matrix_update
from trials.optim import SpecLike


#: Inductor fuses bfloat16 ops and rounds only at a fused kernel's end; eager (and torch.optim.Muon) rounds after
#: every op, and Newton-Schulz amplifies the difference (compiled vs eager on one input: entries up to 4% apart).
#: With eager's roundings emulated, compiled Newton-Schulz equals eager's bit for bit on the same input; a whole
#: compiled step still differs from the eager one by fp32 rounding elsewhere (its lerp, sums), which Newton-Schulz
#: amplifies too: 6 steps on the same gradients end 0.017 x lr apart (0.13 x lr without emulation; measured, CPU).
COMPILE_OPTIONS = {"emulate_precision_casts": True}


@dataclass
class MuonGroup:
    """Muon matrices of one shape and one setting of (lr_mult, decay), as one buffer."""

    names: list[str]
    lr_mult: float
    decay: bool
    adjust: float
    params: Tensor  # [n, K, rows, cols]; the model's parameters are views params[i]
    grads: Tensor
    momentum: Tensor


def _update(
    adam: list[tuple[Tensor, Tensor, Tensor, Tensor]],
    adam_settings: tuple[tuple[float, float, bool], ...],
    muon: list[tuple[Tensor, Tensor, Tensor]],
    muon_settings: tuple[tuple[float, float, bool], ...],
    lrs: Tensor,
    scalars: Tensor,
    active: Tensor,
    rule: MuonRule,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    grad_clip: float,
) -> Tensor:
    """One Muon + AdamW step; returns the `[K]` gradient norms (over every parameter) before clipping.

    `adam`: (params, grads, exp_avg, exp_avg_sq) buffers with `adam_settings` (lr_mult, eps_mult, decay);
    `muon`: (params, grads, momentum) buffers with `muon_settings` (lr_mult, adjust, decay). Plain tensor ops,
    no host reads: runs eagerly, compiles to one graph, captures in a CUDA graph."""
    norms, coef = mask_and_norms([g for _, g, _, _ in adam] + [g for _, g, _ in muon], active, grad_clip)
    zero = torch.zeros((), dtype=lrs.dtype, device=lrs.device)
    adam_lr = torch.where(active, rule.adamw_lrs(lrs) * scalars[0], zero)
    adamw_groups(adam, adam_settings, adam_lr, coef, active, scalars[1], scalars[2], beta1, beta2, eps, weight_decay)
    muon_lr = torch.where(active, rule.muon_lrs(lrs) * scalars[0], zero)
    k = lrs.shape[0]
    for (p, g, buf), (lr_mult, adjust, decay) in zip(muon, muon_settings):
        if coef is not None:
            g.mul_(coef.to(g.dtype).view(1, k, 1, 1))
        muon_matrix_update(p, g, buf, muon_lr * lr_mult, active, rule, scalars[3], adjust, decay)
    return norms


class FlatStackedMuon:
    """StackedMuon with flat per-group buffers and tensor-valued per-step settings (FlatStackedAdamW's interface).

    The AdamW part's layout is a FlatStackedAdamW over the non-matrix parameters (its buffers only; the step is
    this module's `_update`)."""

    def __init__(
        self,
        specs: Sequence[SpecLike],
        lrs: Sequence[float] | Tensor,
        *,
        rule: MuonRule,
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
        self.rule = rule
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.grad_clip = float(grad_clip)
        self.step_count = 0
        # schedule factor, AdamW's bias1 and bias2_sqrt, the weight decay's schedule factor
        self.scalars = torch.ones(4, dtype=torch.float32, device=device)
        self.active = torch.ones(self.k, dtype=torch.bool, device=device)
        self.compiled = compile
        self._fn: Callable[..., Tensor] = _update
        self._bind(specs, state=None)

    # ---- layout ---------------------------------------------------------------------------------

    def _bind(self, specs: Sequence[SpecLike], state: dict[str, Tensor] | None) -> None:
        self.specs = list(specs)
        for spec in self.specs:
            p = spec.param
            if p.ndim < 1 or p.shape[0] != self.k:
                raise ValueError(f"{spec.name}: shape {tuple(p.shape)} has no leading member dimension of {self.k}")
        others = [s for s in self.specs if not is_muon_param(s)]
        self.adamw: FlatStackedAdamW | None = None
        if others:
            self.adamw = FlatStackedAdamW(others, self.rule.adamw_lrs(self.lrs), betas=self.betas, eps=self.eps,
                                          weight_decay=self.weight_decay, grad_clip=0.0)
            if state is not None:
                self.adamw.load_state_tensors({**state, "lrs": self.adamw.lrs}, 0)
        by_key: dict[tuple, list[SpecLike]] = {}
        for spec in self.specs:
            if is_muon_param(spec):
                decay = bool(spec.weight_decay) and self.rule.weight_decay > 0
                by_key.setdefault((tuple(spec.param.shape), spec.param.dtype, float(spec.lr_mult), decay), []).append(spec)
        self.muon_groups: list[MuonGroup] = []
        for (shape, _, lr_mult, decay), members in by_key.items():
            params, grads = flatten_params(members)
            if state is None:
                momentum = torch.zeros_like(params)
            else:
                momentum = torch.stack([state[f"momentum/{s.name}"] for s in members]).to(params.device)
            adjust = lr_adjustment(shape, self.rule.adjust_lr)
            self.muon_groups.append(MuonGroup([s.name for s in members], lr_mult, decay, adjust, params, grads, momentum))
        self._muon_settings = tuple((g.lr_mult, g.adjust, g.decay) for g in self.muon_groups)
        if self.compiled:  # one compiled update per layout, with its own cache (trials.compiled)
            self._fn = compile_private(_update, fullgraph=True, recompile_limit=OPTIMIZER_RECOMPILE_LIMIT,
                                       options=COMPILE_OPTIONS)

    def _adam(self) -> tuple[list[tuple[Tensor, Tensor, Tensor, Tensor]], tuple[tuple[float, float, bool], ...]]:
        if self.adamw is None:
            return [], ()
        return self.adamw._tensors(), self.adamw._settings

    # ---- stepping -------------------------------------------------------------------------------

    def set_scalars(self, lr_scale: float) -> None:
        """Advance the step count and write this step's schedule factors and bias corrections in place."""
        wd_factor = self.rule.wd_factor(self.step_count)
        self.step_count += 1
        beta1, beta2 = self.betas
        values = [float(lr_scale), 1.0 - beta1**self.step_count, math.sqrt(1.0 - beta2**self.step_count), wd_factor]
        if self.scalars.device.type == "cpu":
            self.scalars.copy_(torch.tensor(values, dtype=torch.float32))
        else:  # fills with host scalars: kernel launches, no synchronisation
            for i, value in enumerate(values):
                self.scalars[i].fill_(value)

    @torch.no_grad()
    def step_tensors(self) -> Tensor:
        """The update with this step's `scalars` and `active` as they are on the device (no host read)."""
        adam, adam_settings = self._adam()
        muon = [(g.params, g.grads, g.momentum) for g in self.muon_groups]
        return self._fn(adam, adam_settings, muon, self._muon_settings, self.lrs, self.scalars, self.active, self.rule,
                        self.betas[0], self.betas[1], self.eps, self.weight_decay, self.grad_clip)

    @torch.no_grad()
    def step(self, lr_scale: float = 1.0, active: Tensor | None = None) -> Tensor:
        """StackedMuon.step's signature: one update at `lr_scale`; members with `active` False are left unchanged."""
        if active is not None:
            self.active.copy_(active)
        else:
            self.active.fill_(True)
        self.set_scalars(lr_scale)
        return self.step_tensors()

    def zero_grad(self) -> None:
        """Zero the gradient buffers in place (the parameters' `.grad` stay views of them)."""
        if self.adamw is not None:
            self.adamw.zero_grad()
        for g in self.muon_groups:
            g.grads.zero_()

    # ---- membership changes and checkpoints (StackedMuon's names) --------------------------------

    def compact(self, keep: Sequence[int], specs: Sequence[SpecLike]) -> None:
        """Keep members `keep` (in that order) and rebind to the new model's parameters `specs`."""
        index = torch.as_tensor(list(keep), dtype=torch.long, device=self.lrs.device)
        state = {n: t.index_select(0, index.to(t.device)) for n, t in self.state_tensors().items()}
        self.lrs = state["lrs"].clone()
        self.active = self.active.index_select(0, index)
        self.k = len(keep)
        self._bind(specs, state)

    def state_tensors(self) -> dict[str, Tensor]:
        out = {"lrs": self.lrs}
        if self.adamw is not None:
            out.update({n: t for n, t in self.adamw.state_tensors().items() if n != "lrs"})
        for g in self.muon_groups:
            out.update({f"momentum/{n}": g.momentum[i] for i, n in enumerate(g.names)})
        return out

    def load_state_tensors(self, tensors: dict[str, Tensor], step_count: int) -> None:
        self.lrs.copy_(tensors["lrs"])
        if self.adamw is not None:
            self.adamw.load_state_tensors({**tensors, "lrs": self.rule.adamw_lrs(self.lrs)}, step_count)
        for g in self.muon_groups:
            for i, n in enumerate(g.names):
                g.momentum[i].copy_(tensors[f"momentum/{n}"])
        self.step_count = int(step_count)
