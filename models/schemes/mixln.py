"""Mix-LN (Li et al., arXiv 2412.13795): the first round(0.25*L) blocks Post-Norm, the rest Pre-Norm.

`post_fraction` (default 0.25) sets the share; round is half-up (`floor(f*L + 0.5)`), so L = 2
gives one Post-Norm block and L = 10 gives three. The Pre-Norm part needs the final norm, which is kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from models.registry import register_scheme
from models.scheme import Scheme, StepFn, StepOps, option_float

if TYPE_CHECKING:
    from torch import Tensor


@register_scheme("mixln")
class MixLN(Scheme):
    """Mix-LN: Post-Norm in the first round(0.25 L) blocks, Pre-Norm after."""

    defaults: ClassVar[Mapping[str, Any]] = {"post_fraction": 0.25}

    def __init__(self, depth: int, options=None) -> None:
        super().__init__(depth, options)
        fraction = option_float(self, "post_fraction")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"scheme_options.post_fraction for 'mixln' must be in [0, 1], got {fraction}")
        self.n_post = math.floor(fraction * depth + 0.5)

    def is_post(self, layer: int) -> bool:
        return layer <= self.n_post

    def block_sites(self, layer: int) -> tuple[str, ...]:
        return ("attn_out", "mlp_out") if self.is_post(layer) else ("attn_in", "mlp_in")

    def step_for(self, layer: int) -> StepFn:
        return self.post_step if self.is_post(layer) else self.step

    def post_step(self, h: Tensor, s: StepOps) -> Tensor:
        return s.norm(s.residual(h, h), "out")  # N(h + B(h))
