"""What every stacked network offers the trainer: parameter specs, per-member state dicts.

A stacked network holds K members of identical architecture; every parameter has a leading K
dimension. `param_specs()` tells the trainer, per parameter, its kind and the scheme's LR / Adam-eps
multipliers (CompleteP lives here) and whether weight decay applies; `member_state_dict(k)` and
`load_member_state_dict(k, sd)` move one member in and out (K dimension removed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from models.config import ModelConfig
from models.scheme import ParamKind, Scheme

#: kinds that get weight decay: the matrices. Gains and LayerRoPE scalars do not.
DECAYED_KINDS = frozenset({"embedding", "head", "hidden"})


@dataclass(frozen=True)
class ParamSpec:
    """One parameter as the optimizer should treat it."""

    name: str
    param: nn.Parameter
    kind: ParamKind
    lr_mult: float
    eps_mult: float
    weight_decay: bool


class StackedModel(nn.Module):
    """Base of the stacked networks: subclasses set `cfg`, `stack`, `scheme` and implement `param_kind`."""

    cfg: ModelConfig
    stack: int
    scheme: Scheme

    def param_kind(self, name: str) -> ParamKind:
        raise NotImplementedError

    def param_specs(self) -> list[ParamSpec]:
        specs = []
        for name, param in self.named_parameters():
            kind = self.param_kind(name)
            lr_mult, eps_mult = self.scheme.multipliers(kind)
            specs.append(ParamSpec(name, param, kind, lr_mult, eps_mult, kind in DECAYED_KINDS))
        return specs

    def member_state_dict(self, k: int) -> dict[str, Tensor]:
        """Member `k`'s parameters (detached copies, K dimension removed), by parameter name."""
        self._check_member(k)
        return {name: param.detach()[k].clone() for name, param in self.named_parameters()}

    @torch.no_grad()
    def load_member_state_dict(self, k: int, state: dict[str, Tensor]) -> None:
        """Overwrite member `k` with `state` (as returned by `member_state_dict`); keys and shapes must match."""
        self._check_member(k)
        params = dict(self.named_parameters())
        missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - set(params))
        if missing or unexpected:
            raise ValueError(f"member state dict mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        for name, param in params.items():
            value = state[name]
            if tuple(value.shape) != tuple(param.shape[1:]):
                raise ValueError(f"member state dict: {name} has shape {tuple(value.shape)}, expected {tuple(param.shape[1:])}")
            param[k].copy_(value)

    def num_params(self) -> int:
        """Parameters of one member."""
        return sum(p[0].numel() for p in self.parameters())

    def _check_member(self, k: int) -> None:
        if not 0 <= k < self.stack:
            raise IndexError(f"member {k} out of range for a stack of {self.stack}")
