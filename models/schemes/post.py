"""Post-Norm (original Transformer): `h = N(h + A(h))`; `h = N(h + F(h))`.

Final norm: none by default (`final_norm: false`). The last block already ends with a norm, so an
extra one would only re-normalise an RMS-normalised vector (a second gain in series). The original
Transformer has none, and fairseq / torchscale (DeepNet's reference code) add a final norm only in
their pre-norm configurations. `scheme_options: {final_norm: true}` adds one for comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from models.registry import register_scheme
from models.scheme import Scheme, StepOps, option_bool

if TYPE_CHECKING:
    from torch import Tensor


@register_scheme("post")
class PostNorm(Scheme):
    """Post-Norm: h = N(h + B(h)); no final norm unless final_norm: true."""

    defaults: ClassVar[Mapping[str, Any]] = {"final_norm": False}

    @property
    def final_norm(self) -> bool:
        return option_bool(self, "final_norm")

    def block_sites(self, layer: int) -> tuple[str, ...]:
        return ("attn_out", "mlp_out")

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        return s.norm(s.residual(h, h), "out")  # N(h + B(h))
