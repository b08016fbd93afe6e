"""LayerRoPE: every layer's norm gain is one shared gain vector, scaled by a depth-conditioned
magnitude and rotated pairwise with RoPE's fixed spectrum.

One site owns `gamma` (d, init ones) and four scalars: `a_mag` (0), `b_mag` (`beta_init`, or
`mag_slope_init` when given), `a_rot` (0), `b_rot` (`beta_init`). For depth index l (1-based):

    r_l     = a_mag + b_mag * log l              (gain magnitude exp(r_l) = e^a_mag * l^b_mag)
    theta_l = exp(a_rot + b_rot * log l)         (base angle; pair j turns by theta_l * freq_j)
    freq_j  = base^(-2j/d),  j = 0 .. d/2-1
    g_j     = gamma[2j] + i*gamma[2j+1]
    out[l, 2j] + i*out[l, 2j+1] = g_j * exp(r_l) * exp(i * theta_l * freq_j)

`forward()` returns all layers at once, `[n_layers, d]` (or `[K, n_layers, d]` with `stack=K`), so a
network computes its gains once per forward pass. The depth indices default to 1..n_layers; the
looped model passes its own (a layer's position in the network, independent of the loop iteration)
either at construction (`depths=`) or per call (`forward(depths)`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class LayerRoPE(nn.Module):
    """One LayerRoPE site producing `(n_layers, d)` gains (see the module docstring for the formula)."""

    def __init__(
        self,
        d: int,
        n_layers: int,
        base: float = 100.0,
        beta_init: float = -0.5,
        *,
        stack: int | None = None,
        mag_slope_init: float | None = None,
        depths: Sequence[float] | Tensor | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if d <= 0 or d % 2:
            raise ValueError(f"LayerRoPE width d must be a positive even number, got {d}")
        if n_layers < 1:
            raise ValueError(f"LayerRoPE n_layers must be >= 1, got {n_layers}")
        if base <= 0:
            raise ValueError(f"LayerRoPE base must be > 0, got {base}")
        self.d, self.n_layers, self.base, self.stack = d, n_layers, float(base), stack
        shape: tuple[int, ...] = () if stack is None else (stack,)
        factory = {"device": device, "dtype": dtype}
        slope = beta_init if mag_slope_init is None else mag_slope_init
        self.gamma = nn.Parameter(torch.ones(*shape, d, **factory))
        self.a_mag = nn.Parameter(torch.zeros(shape, **factory))
        self.b_mag = nn.Parameter(torch.full(shape, float(slope), **factory))
        self.a_rot = nn.Parameter(torch.zeros(shape, **factory))
        self.b_rot = nn.Parameter(torch.full(shape, float(beta_init), **factory))
        j = torch.arange(d // 2, dtype=torch.float64)
        # Constants kept in fp64 and cast to the parameters' dtype in forward: exact in any precision.
        self.register_buffer("freq", (base ** (-2.0 * j / d)).to(device=device), persistent=False)
        if depths is None:
            depths = range(1, n_layers + 1)
        if not isinstance(depths, Tensor):
            if len(depths) != n_layers or min(depths) <= 0:
                raise ValueError(f"LayerRoPE depths must be {n_layers} positive numbers, got {list(depths)}")
            depths = torch.tensor([float(v) for v in depths], dtype=torch.float64)
        elif depths.shape != (n_layers,) or (depths.device.type != "meta" and not bool((depths > 0).all())):
            raise ValueError(f"LayerRoPE depths must be {n_layers} positive numbers, got shape {tuple(depths.shape)}")
        depths = depths.to(torch.float64)
        self.register_buffer("log_depth", depths.log().to(device=device), persistent=False)

    def forward(self, depths: Tensor | None = None) -> Tensor:
        """Gains for every depth index: `[n_layers, d]`, or `[K, n_layers, d]` when stacked.

        `depths` (1-D, positive) overrides the depth indices for this call.
        """
        dtype = self.gamma.dtype
        log_l = (self.log_depth if depths is None else depths.to(self.log_depth).log()).to(dtype)
        magnitude = torch.exp(self.a_mag[..., None] + self.b_mag[..., None] * log_l)  # [*S, L]
        theta = torch.exp(self.a_rot[..., None] + self.b_rot[..., None] * log_l)  # [*S, L]
        angle = theta[..., None] * self.freq.to(dtype)  # [*S, L, d/2]
        cos, sin = torch.cos(angle), torch.sin(angle)
        pairs = self.gamma.unflatten(-1, (self.d // 2, 2))  # [*S, d/2, 2]
        g_re, g_im = pairs[..., 0].unsqueeze(-2), pairs[..., 1].unsqueeze(-2)  # [*S, 1, d/2]
        scale = magnitude[..., None]
        real = scale * (g_re * cos - g_im * sin)
        imag = scale * (g_re * sin + g_im * cos)
        return torch.stack((real, imag), dim=-1).flatten(-2)

    def extra_repr(self) -> str:
        stack = "" if self.stack is None else f", stack={self.stack}"
        return f"d={self.d}, n_layers={self.n_layers}, base={self.base}{stack}"


class LayerRoPESites(nn.Module):
    """The named LayerRoPE sites of one network; `forward()` -> {site: Tensor[K, L, d]}."""

    def __init__(
        self,
        d: int,
        n_layers: int,
        sites: Sequence[str],
        *,
        stack: int,
        base: float = 100.0,
        beta_init: float = -0.5,
        mag_slope_init: float | None = None,
        depths: Sequence[float] | Tensor | None = None,
    ) -> None:
        super().__init__()
        self.sites = nn.ModuleDict(
            {
                site: LayerRoPE(d, n_layers, base, beta_init, stack=stack, mag_slope_init=mag_slope_init, depths=depths)
                for site in sites
            }
        )

    def forward(self) -> dict[str, Tensor]:
        return {name: site() for name, site in self.sites.items()}

