"""CompleteP (Dey et al. 2025, arXiv 2505.01618; Depth-muP is its alpha = 0.5 case).

Pre-Norm with every residual branch multiplied by `(L/L0)^(-alpha)`; the trainer scales the Adam LR
of hidden weights (the block matrices q, k, v, o, gate, up, down) by `(L/L0)^(alpha-1)` and their Adam
eps by `(L/L0)^(-alpha)` (exposed through `model.param_specs()`). Embeddings, head and gains keep
multiplier 1. Options: `alpha` (default 1) and the base depth `base_depth` L0 (default 48, the first
rung of the study's depth ladder, so that CompleteP equals Pre-Norm there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from models.registry import register_scheme
from models.scheme import ParamKind, Scheme, StepOps, option_float

if TYPE_CHECKING:
    from torch import Tensor


@register_scheme("completep")
class CompleteP(Scheme):
    """CompleteP: Pre-Norm, branches times (L/L0)^-alpha, hidden LR x(L/L0)^(alpha-1), eps x(L/L0)^-alpha."""

    defaults: ClassVar[Mapping[str, Any]] = {"alpha": 1.0, "base_depth": 48}

    def __init__(self, depth: int, options=None) -> None:
        super().__init__(depth, options)
        self.alpha = option_float(self, "alpha")
        self.base_depth = option_float(self, "base_depth", positive=True)
        ratio = depth / self.base_depth
        self.branch_scale = ratio ** (-self.alpha)
        self.hidden_lr_mult = ratio ** (self.alpha - 1.0)
        self.hidden_eps_mult = ratio ** (-self.alpha)

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        return s.residual(h, s.norm(h, "in"), scale=self.branch_scale)  # h + (L/L0)^-alpha B(N(h))

    def multipliers(self, kind: ParamKind) -> tuple[float, float]:
        if kind == "hidden":
            return self.hidden_lr_mult, self.hidden_eps_mult
        return 1.0, 1.0
