"""Peri-LN (Kim et al. 2025, arXiv 2502.02732): `h = h + N_out(B(N_in(h)))`.

The output norm acts on the branch output before the residual add; the residual stream itself is
never normalised inside the blocks. Both norms have learnable gains. The token embeddings are
normalised too (`embed_norm`, default true); the final norm before the head is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from models.registry import register_scheme
from models.scheme import Scheme, StepOps, option_bool

if TYPE_CHECKING:
    from torch import Tensor


@register_scheme("peri")
class PeriNorm(Scheme):
    """Peri-LN: h = h + N_out(B(N_in(h))), embedding norm (default on), final norm."""

    defaults: ClassVar[Mapping[str, Any]] = {"embed_norm": True}

    @property
    def embed_norm(self) -> bool:
        return option_bool(self, "embed_norm")

    def block_sites(self, layer: int) -> tuple[str, ...]:
        return ("attn_in", "attn_out", "mlp_in", "mlp_out")

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        return h + s.norm(s.branch(s.norm(h, "in")), "out")
