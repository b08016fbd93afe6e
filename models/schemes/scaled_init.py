"""Pre-Norm with GPT-2 / Megatron scaled init: the output projections (attention `o`, MLP `down`)
start with std `init_std/sqrt(2L)` instead of `init_std`."""

from __future__ import annotations

import math

from models.registry import register_scheme
from models.scheme import Scheme


@register_scheme("scaled_init")
class ScaledInit(Scheme):
    """Pre-Norm with o and down initialised at std/sqrt(2L)."""

    def init_scale(self, weight: str, layer: int) -> float:
        return 1.0 / math.sqrt(2.0 * self.depth) if weight in ("o", "down") else 1.0
