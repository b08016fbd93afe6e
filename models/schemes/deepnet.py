"""DeepNet / DeepNorm (Wang et al. 2022, arXiv 2203.00555), decoder-only constants.

Post-Norm with an up-weighted skip, `h = N(alpha*h + B(h))`, alpha = (2L)^(1/4) on the skip (not on
the branch), and after the normal init the weights of `v`, `o`, `gate`, `up`, `down` multiplied by
beta = (8L)^(-1/4); `q` and `k` keep the plain init. L is the number of blocks. As for Post-Norm,
no final norm by default (`final_norm: true` adds one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from models.registry import register_scheme
from models.scheme import StepOps
from models.schemes.post import PostNorm

if TYPE_CHECKING:
    from torch import Tensor

BETA_SCALED = frozenset({"v", "o", "gate", "up", "down"})


@register_scheme("deepnet")
class DeepNet(PostNorm):
    """DeepNet: h = N(alpha*h + B(h)), alpha=(2L)^1/4, beta=(8L)^-1/4 on v,o,gate,up,down."""

    def __init__(self, depth: int, options=None) -> None:
        super().__init__(depth, options)
        self.alpha = (2.0 * depth) ** 0.25
        self.beta = (8.0 * depth) ** -0.25

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        return s.norm(s.residual(h, h, skip=self.alpha), "out")  # N(alpha*h + B(h))

    def init_scale(self, weight: str, layer: int) -> float:
        return self.beta if weight in BETA_SCALED else 1.0
