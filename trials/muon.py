"""Muon for the hidden matrices and AdamW for the rest, for a stack of K models (`train.optimizer.kind: muon`).

Which parameter gets which update: the `hidden` parameters of `param_specs()` that are matrices (`[K, fan_in,
fan_out]`: attention and MLP projections, the looped model's re-injection) get Muon; everything else
(embeddings, the output head, norms and gains, biases, LayerRoPE's scalars, a ViT's patch embedding and
position embeddings) gets AdamW with `train.optimizer`'s betas, eps and weight decay (`trials.optim.StackedAdamW`,
unchanged). This is Parcae's official split.

The Muon update of member k is torch.optim.Muon's (torch 2.13), element for element:
`buf = lerp(buf, g, 1 - momentum)`; with Nesterov `u = lerp(g, buf, momentum)`, else `u = buf`; `O =
NS(u)`, five quintic Newton-Schulz iterations in bfloat16 on the wide orientation of the matrix after
dividing by its Frobenius norm (clamped at eps 1e-7); `p *= 1 - lr * wd`; `p -= lr * s * O`, where `s` is
torch's shape adjustment computed on the matrix as `nn.Linear` holds it (`[fan_out, fan_in]`; the models here
store `x @ W` weights as `[fan_in, fan_out]`): `original` sqrt(max(1, fan_out / fan_in)), `match_rms_adamw`
0.2 sqrt(max(fan_out, fan_in)), or none. Newton-Schulz runs batched over the K members (`baddbmm`; each
member's slice is computed exactly as torch computes a single matrix), so K members with K learning rates
match K separate torch.optim.Muon + torch.optim.AdamW runs (tests/trials/test_muon.py). Two additions torch
does not have, both from Parcae's recipe:

- `cautious` weight decay: `p -= lr * wd * p * [O * p >= 0]` (decay only the entries where the update and the
  parameter agree in sign, i.e. where the update also moves the entry towards 0), with the unadjusted LR
  as torch's decoupled decay uses;
- `weight_decay_schedule: linear`: wd x (1 - t / steps) at the t-th update (0-based) of a trial of `steps`
  steps (the LR schedule's step count), reaching 0 at the end of training.

Per-iteration Newton-Schulz coefficients (`ns_coefficients`: a list of `[a, b, c]`, one per iteration) are
possible here, not in torch.optim.Muon (one triple for every iteration): Parcae's Polar-Express coefficients
can be given that way; the named default `torch` is torch's (3.4445, -4.775, 2.0315).

Two learning rates, one swept value. A sweep point has one LR (`TrialSpec.lrs[k]`), and the bracketing of
the LR search (`sweeper.search`) is one-dimensional: the valley of loss against one LR. With `swept: muon`
(default) the point's LR is Muon's and AdamW's is tied to it, `adamw_lr = adamw_lr_ratio x lr` (Parcae uses
8e-3 for both at 140M and 370M: ratio 1.0); `swept: adamw` makes the point's LR AdamW's and Muon's
`lr / adamw_lr_ratio`. Tying keeps one LR per point and moves both LRs together, which is what bracketing a
valley needs; sweeping both independently would be a two-dimensional search. To search one LR alone, hold the
other fixed with `other_lr`. Per-parameter `lr_mult` (CompleteP) scales either LR, as a torch param group's
LR would.

Clipping (`grad_clip`) is per member over all of its gradients, Muon's and AdamW's together (torch's
`clip_grad_norm_` over the whole model); masked members (diverged) keep parameters, momentum and moments
exactly. Checkpoint tensors: `lrs` (the swept values), AdamW's `exp_avg/NAME`, `exp_avg_sq/NAME`, Muon's
`momentum/NAME`; `trials.flat_muon.FlatStackedMuon` (compiled / deferred paths) writes and reads the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trials.config import MuonConfig, NSTriple
from trials.optim import SpecLike, StackedAdamW, clip_and_mask

#: torch.optim.Muon's quintic Newton-Schulz coefficients (torch.optim._muon DEFAULT_A, _B, _C)
TORCH_NS_COEFFICIENTS: NSTriple = (3.4445, -4.7750, 2.0315)
#: torch.optim.Muon's eps: the floor of the Frobenius norm the update is divided by before Newton-Schulz
NS_EPS = 1e-7


@dataclass(frozen=True)
class MuonRule:
    """Muon's resolved settings for one trial (from `MuonConfig` and the trial's step count)."""

    momentum: float = 0.95
    nesterov: bool = True
    coefficients: tuple[NSTriple, ...] = (TORCH_NS_COEFFICIENTS,) * 5  # one per iteration
    weight_decay: float = 0.2
    cautious: bool = True
    decay_steps: int | None = None  # linear weight-decay schedule over this many steps; None: constant
    adjust_lr: str = "original"
    # per-member LRs from the swept values: muon = lr * muon_scale + muon_offset, likewise AdamW's
    muon_scale: float = 1.0
    muon_offset: float = 0.0
    adamw_scale: float = 1.0
    adamw_offset: float = 0.0

    @classmethod
    def from_config(cls, cfg: MuonConfig, steps: int) -> "MuonRule":
        triples = [TORCH_NS_COEFFICIENTS] if cfg.ns_coefficients == "torch" else list(cfg.ns_coefficients)
        coefficients = tuple(tuple(float(c) for c in t) for t in (triples * cfg.ns_steps if len(triples) == 1 else triples))
        ratio, other = float(cfg.adamw_lr_ratio), cfg.other_lr
        if cfg.swept == "muon":
            muon = (1.0, 0.0)
            adamw = (ratio, 0.0) if other is None else (0.0, float(other))
        else:
            adamw = (1.0, 0.0)
            muon = (1.0 / ratio, 0.0) if other is None else (0.0, float(other))
        return cls(
            momentum=float(cfg.momentum), nesterov=bool(cfg.nesterov), coefficients=coefficients,  # type: ignore[arg-type]
            weight_decay=float(cfg.weight_decay), cautious=bool(cfg.cautious),
            decay_steps=max(1, int(steps)) if cfg.weight_decay_schedule == "linear" else None, adjust_lr=cfg.adjust_lr,
            muon_scale=muon[0], muon_offset=muon[1], adamw_scale=adamw[0], adamw_offset=adamw[1],
        )

    def muon_lrs(self, lrs: Tensor) -> Tensor:
        return lrs * self.muon_scale + self.muon_offset

    def adamw_lrs(self, lrs: Tensor) -> Tensor:
        return lrs * self.adamw_scale + self.adamw_offset

    def wd_factor(self, updates_done: int) -> float:
        """The weight decay's multiplier at the update after `updates_done` updates (1 when constant)."""
        if self.decay_steps is None:
            return 1.0
        return max(0.0, 1.0 - updates_done / self.decay_steps)


def is_muon_param(spec: SpecLike) -> bool:
    """Muon's parameters: the hidden matrices (`[K, fan_in, fan_out]`); AdamW takes the rest."""
    return getattr(spec, "kind", None) == "hidden" and spec.param.ndim == 3


def lr_adjustment(shape: Sequence[int], rule: str) -> float:
    """torch.optim.Muon's shape-based LR factor for a matrix stored `[..., fan_in, fan_out]` (torch computes it on
    `nn.Linear`'s `[fan_out, fan_in]`)."""
    fan_out, fan_in = int(shape[-1]), int(shape[-2])
    if rule == "original":
        return math.sqrt(max(1.0, fan_out / fan_in))
    if rule == "match_rms_adamw":
        return 0.2 * math.sqrt(max(fan_out, fan_in))
    return 1.0


def newton_schulz(update: Tensor, coefficients: Sequence[NSTriple], eps: float = NS_EPS) -> Tensor:
    """Approximate orthogonalisation of every matrix of `update` (`[B, rows, cols]`), in bfloat16 as torch.optim.Muon:
    the wide orientation, divided by its Frobenius norm, then one quintic iteration per coefficient triple.
    Returns bfloat16 `[B, rows, cols]`. Batched with `baddbmm`; no host reads (compiles, graph-captures)."""
    x = update.bfloat16()
    tall = update.shape[-2] > update.shape[-1]
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for a, b, c in coefficients:
        gram = x @ x.mT
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, poly, x, beta=a)
    return x.mT if tall else x


def muon_matrix_update(
    p: Tensor, g: Tensor, buf: Tensor, lr: Tensor, active: Tensor, rule: MuonRule, wd_factor: Tensor | float,
    adjust: float, decay: bool,
) -> None:
    """One Muon update of the stacked matrices `p` (`[..., K, rows, cols]`, member dimension third from the end)
    with gradients `g` (clipped, masked) and momentum `buf`, at per-member `lr` (`[K]`, 0 for masked members)."""
    k = lr.shape[0]
    view = (k, 1, 1)
    keep = active.view(view)
    buf_new = torch.lerp(buf, g, 1.0 - rule.momentum)
    u = torch.lerp(g, buf_new, rule.momentum) if rule.nesterov else buf_new
    u = torch.where(keep, u, torch.zeros((), dtype=u.dtype, device=u.device))  # masked: no update, even from NaN
    # Newton-Schulz on the matrix as nn.Linear holds it ([fan_out, fan_in]), as torch.optim.Muon sees it: for a
    # square matrix the orientation changes the bfloat16 rounding, which the iteration amplifies.
    fan_in, fan_out = p.shape[-2:]
    linear = u.reshape(-1, fan_in, fan_out).mT
    ortho = newton_schulz(linear, rule.coefficients).mT.reshape(p.shape).to(p.dtype)
    lr_v = lr.view(view)
    if decay and rule.weight_decay > 0:
        decay_lr = lr_v * (rule.weight_decay * wd_factor)
        if rule.cautious:
            p.sub_(decay_lr * p * (ortho * p >= 0))
        else:
            p.mul_(1.0 - decay_lr)
    p.sub_(ortho * (lr_v * adjust))
    buf.copy_(torch.where(keep, buf_new, buf))


class StackedMuon:
    """Muon (hidden matrices) + AdamW (the rest) for a stack of K members; StackedAdamW's interface.

    `lrs` are the swept values; `rule` maps them to each member's Muon and AdamW LRs (module docstring).
    """

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
        self.momentum: dict[str, Tensor] = {}
        self.adamw: StackedAdamW | None = None
        self._bind(specs)

    def _bind(self, specs: Sequence[SpecLike]) -> None:
        self.specs = list(specs)
        for spec in self.specs:
            p = spec.param
            if p.ndim < 1 or p.shape[0] != self.k:
                raise ValueError(f"{spec.name}: shape {tuple(p.shape)} has no leading member dimension of {self.k}")
        self.matrices = [s for s in self.specs if is_muon_param(s)]
        for spec in self.matrices:
            if spec.name not in self.momentum:
                self.momentum[spec.name] = torch.zeros_like(spec.param, memory_format=torch.preserve_format)
        others = [s for s in self.specs if not is_muon_param(s)]
        if self.adamw is None and others:
            # Clipping is done here over all parameters; the AdamW part only updates.
            self.adamw = StackedAdamW(others, self.rule.adamw_lrs(self.lrs), betas=self.betas, eps=self.eps,
                                      weight_decay=self.weight_decay, grad_clip=0.0)

    @torch.no_grad()
    def step(self, lr_scale: float = 1.0, active: Tensor | None = None) -> Tensor:
        """One update at `lr_scale` x each member's LRs; masked members (active False) stay unchanged.

        Returns each member's gradient norm before clipping (over all of its parameters)."""
        grads = [s.param.grad for s in self.specs if s.param.grad is not None]
        norms = clip_and_mask(grads, self.k, active, self.grad_clip, self.lrs.device)
        wd_factor = self.rule.wd_factor(self.step_count)
        self.step_count += 1
        if self.adamw is not None:
            self.adamw.step(lr_scale, active)
        on = torch.ones(self.k, dtype=torch.bool, device=self.lrs.device) if active is None else active
        lr = torch.where(on, self.rule.muon_lrs(self.lrs) * float(lr_scale), torch.zeros_like(self.lrs))
        for spec in self.matrices:
            if spec.param.grad is None:
                continue
            muon_matrix_update(spec.param.data, spec.param.grad, self.momentum[spec.name], lr * float(spec.lr_mult), on,
                               self.rule, wd_factor, lr_adjustment(spec.param.shape, self.rule.adjust_lr),
                               bool(spec.weight_decay))
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
        self.momentum = {n: t.index_select(0, index.to(t.device)) for n, t in self.momentum.items()}
        if self.adamw is not None:
            self.adamw.compact(keep, [s for s in specs if not is_muon_param(s)])
        self._bind(specs)

    def state_tensors(self) -> dict[str, Tensor]:
        out = {"lrs": self.lrs}
        if self.adamw is not None:
            out.update({n: t for n, t in self.adamw.state_tensors().items() if n != "lrs"})
        out.update({f"momentum/{n}": t for n, t in self.momentum.items()})
        return out

    def load_state_tensors(self, tensors: dict[str, Tensor], step_count: int) -> None:
        self.lrs.copy_(tensors["lrs"])
        if self.adamw is not None:
            self.adamw.load_state_tensors({**tensors, "lrs": self.rule.adamw_lrs(self.lrs)}, step_count)
        for n, t in self.momentum.items():
            t.copy_(tensors[f"momentum/{n}"])
        self.step_count = int(step_count)
