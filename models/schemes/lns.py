"""LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth", arXiv 2502.05795).

Pre-Norm where the input norm's output, after its learnable gain, is multiplied by the fixed
factor `1/sqrt(l)` at both norms of block `l` (1-based, so block 1 is unscaled). The factor is a
separate constant, not folded into the gain: AdamW's update is scale-free, so a gain initialised at
`1/sqrt(l)` would move `sqrt(l)` times faster relative to its size and is not equivalent.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from models.registry import register_scheme
from models.scheme import Scheme, StepOps

if TYPE_CHECKING:
    from torch import Tensor


@register_scheme("lns")
class LayerNormScaling(Scheme):
    """LNS: Pre-Norm with the normed input times 1/sqrt(l) in block l."""

    def constants(self, layer: int) -> dict[str, float]:
        return {"in_scale": 1.0 / math.sqrt(layer)}

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        return s.residual(h, s.norm(h, "in") * s.const("in_scale"))  # h + B(N(h) / sqrt(l))

    def effective_gain(self, site: str, layer: int, gain: Tensor) -> Tensor:
        return gain / math.sqrt(layer) if site.endswith("_in") else gain
