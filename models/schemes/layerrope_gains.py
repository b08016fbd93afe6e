"""LayerRoPE (this project's method): depth-conditioned norm gains from four model-level sites.

`h = h + w_A[l] * A(norm(h) * r_A[l])`; `h = h + w_F[l] * F(norm(h) * r_F[l])`, where `norm` is RMSNorm
without its own gain and `r` (read) / `w` (write) are rows of the `(L, d)` outputs of four
`models.layerrope.LayerRoPE` sites (attention read/write, MLP read/write), computed once per forward
pass. The final norm before the head keeps an ordinary gain.

Options: `base` (RoPE base of the gain spectrum, 100), `beta_init` (initial log-slopes, -0.5),
`mag_slope_init` (initial magnitude slope; null = `beta_init`, 0 for the looped/ViT variants),
`write_gains` (true: the four sites; false: the two read sites only, `h = h + B(norm(h) * r[l])`,
the ViT variant where LayerRoPE conditions the gains of the pre-norm LayerNorms).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from models.registry import register_scheme
from models.scheme import Scheme, StepOps, option_bool, option_float

if TYPE_CHECKING:
    from torch import Tensor, nn

    from models.config import ModelConfig

SITES = ("attn_in", "attn_out", "mlp_in", "mlp_out")
READ_SITES = ("attn_in", "mlp_in")
SCALARS_PER_SITE = 4  # a_mag, b_mag, a_rot, b_rot


@register_scheme("layerrope")
class LayerRoPEScheme(Scheme):
    """LayerRoPE: h = h + w[l]*B(norm(h)*r[l]), gains from four LayerRoPE sites."""

    defaults: ClassVar[Mapping[str, Any]] = {"base": 100.0, "beta_init": -0.5, "mag_slope_init": None, "write_gains": True}
    external_sites = SITES

    def __init__(self, depth: int, options=None) -> None:
        super().__init__(depth, options)
        self.base = option_float(self, "base", positive=True)
        self.beta_init = option_float(self, "beta_init")
        self.mag_slope_init = None if self.options["mag_slope_init"] is None else option_float(self, "mag_slope_init")
        self.write_gains = option_bool(self, "write_gains")
        self.external_sites = SITES if self.write_gains else READ_SITES  # type: ignore[misc]

    def block_sites(self, layer: int) -> tuple[str, ...]:
        return ()

    def extra_param_count(self, width: int) -> int:
        return len(self.external_sites) * (width + SCALARS_PER_SITE)

    def make_site_gains(self, cfg: ModelConfig, stack: int) -> nn.Module:
        from models.layerrope import LayerRoPESites

        return LayerRoPESites(
            cfg.width, self.depth, self.external_sites, stack=stack, base=self.base,
            beta_init=self.beta_init, mag_slope_init=self.mag_slope_init,
        )

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        if not self.write_gains:
            return s.residual(h, s.norm(h, "in"))  # h + B(norm(h) * r[l])
        return s.residual(h, s.norm(h, "in"), gain="out")  # h + w[l] * B(norm(h) * r[l])
