"""The interface every normalization scheme implements (one file per scheme in `models.schemes`).

A network (the LLaMA decoder here; the looped LM and the ViT reuse the same interface) is a stack
of blocks; each block makes two *residual steps*, one around attention and one around the MLP.
A scheme decides, and only decides:

- the wiring of one residual step (`step`): where the norms sit, residual scaling, gains;
- which learnable gain vectors each block owns (`block_sites`) and which per-layer gains come from
  a model-level module instead (`external_sites` + `make_site_gains`, used by LayerRoPE);
- per-layer constants (`constants`), stored as tensors on the block so that one compiled block
  serves every layer (regional `torch.compile` would otherwise recompile per distinct float);
- whether the embeddings and the last block's output are normalised (`embed_norm`, `final_norm`);
- multipliers of the standard N(0, std) init per weight (`init_scale`), applied after the base init;
- optimizer multipliers per parameter kind (`multipliers`), read by the trainer via `param_specs()`.

Gain sites are named `<sublayer>_<where>` with sublayer `attn` or `mlp` and `where`:
`in` — the gain of the norm that reads the residual stream into the branch (Pre-LN, Peri-LN input,
LNS, LayerRoPE read); `out` — the gain at the branch's output side (Peri-LN's output norm, LayerRoPE's
write gain, and for Post-LN / DeepNet the norm applied after the residual add).

Inside `step`, a scheme sees the sublayer through a `StepOps` object (the family provides it):
`s.branch(x)` runs the sublayer B; `s.residual(h, x, skip=1, scale=1, gain=None)` is
`skip*h + scale*(g * B(x))` (g the gain of site `gain`, or 1), computed with the residual add fused
into the branch's output projection; `s.norm(x, site)` normalises (RMSNorm for the decoder, no
affine) and multiplies by the site's gain (`site=None`: no gain); `s.gain(x, site)` multiplies by a
gain without normalising; `s.const(name)` is a per-layer constant. `site` is the short name (`"in"`,
`"out"`); the sublayer prefix is added by `StepOps`. Prefer `s.residual(h, x)` to `h + s.branch(x)`:
same value, one kernel less per step (these narrow deep networks are bound by kernel count).

This module imports no torch, so that scheme names, options and parameter counts are available to
fast command-line validation; scheme modules import torch only inside `make_site_gains`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import Tensor, nn

    from models.config import ModelConfig

SUBLAYERS = ("attn", "mlp")
#: Names of the linear weights a scheme may rescale at init. `q`, `k`, `v` are column blocks of
#: the fused `qkv` weight, `gate` and `up` of the fused `gate_up` weight.
BLOCK_WEIGHTS = ("q", "k", "v", "o", "gate", "up", "down")
ParamKind = Literal["embedding", "head", "hidden", "gain", "scalar"]


class StepOps(Protocol):
    """What a scheme may do with one sublayer inside `Scheme.step`."""

    def branch(self, x: Tensor) -> Tensor: ...
    def residual(self, h: Tensor, x: Tensor, *, skip: float = 1.0, scale: float = 1.0, gain: str | None = None) -> Tensor: ...
    def norm(self, x: Tensor, site: str | None = None) -> Tensor: ...
    def gain(self, x: Tensor, site: str) -> Tensor: ...
    def const(self, name: str) -> Tensor: ...


StepFn = Callable[["Tensor", StepOps], "Tensor"]


class Scheme:
    """Base class: Pre-Norm wiring and neutral defaults. Subclasses override what differs.

    `options` are the scheme's own settings (`ModelConfig.scheme_options`); a subclass lists the
    allowed keys and their defaults in `defaults`. Unknown keys are an error.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: sites whose per-layer gains are produced by `make_site_gains` (one [K, L, d] tensor each)
    external_sites: ClassVar[tuple[str, ...]] = ()

    def __init__(self, depth: int, options: Mapping[str, Any] | None = None) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "none"
            raise ValueError(f"scheme_options for '{self.name}': unknown key(s) {', '.join(unknown)} (allowed: {allowed})")
        self.depth = depth
        self.options: dict[str, Any] = {**self.defaults, **options}

    # ---- structure -------------------------------------------------------------------------
    @property
    def embed_norm(self) -> bool:
        """Normalise the token embeddings before the first block (with its own gain)."""
        return False

    @property
    def final_norm(self) -> bool:
        """Normalise the last block's output before the head (with its own gain)."""
        return True

    def block_sites(self, layer: int) -> tuple[str, ...]:
        """Learnable gain vectors (init ones) owned by block `layer` (1-based), full site names."""
        return ("attn_in", "mlp_in")

    def constants(self, layer: int) -> dict[str, float]:
        """Fixed per-layer scalars of block `layer`, read in `step` with `s.const(name)`."""
        return {}

    def extra_param_count(self, width: int) -> int:
        """Parameters of the module built by `make_site_gains` (per stack member)."""
        return 0

    def make_site_gains(self, cfg: ModelConfig, stack: int) -> nn.Module | None:
        """A module whose `forward()` returns {site: Tensor[K, L, d]} for `external_sites`."""
        return None

    # ---- forward -----------------------------------------------------------------------------
    def step_for(self, layer: int) -> StepFn:
        """The residual-step function used by block `layer`; most schemes use one for all layers."""
        return self.step

    def step(self, h: Tensor, s: StepOps) -> Tensor:
        """One residual step: Pre-Norm `h + B(N(h))`."""
        return s.residual(h, s.norm(h, "in"))

    # ---- init ----------------------------------------------------------------------------------
    def init_scale(self, weight: str, layer: int) -> float:
        """Multiplier applied to `weight` (one of BLOCK_WEIGHTS) of block `layer` after the N(0, std) init."""
        return 1.0

    # ---- what the rest of the tool reads --------------------------------------------------------
    def effective_gain(self, site: str, layer: int, gain: Tensor) -> Tensor:
        """The gain actually multiplying the normalised activation at `site` of block `layer`."""
        return gain

    def multipliers(self, kind: ParamKind) -> tuple[float, float]:
        """(LR multiplier, Adam-eps multiplier) for parameters of `kind`."""
        return 1.0, 1.0

    def describe(self) -> str:
        """One line for listings: the first line of the class docstring."""
        return (type(self).__doc__ or self.name).strip().splitlines()[0]


def option_float(scheme: Scheme, key: str, *, positive: bool = False) -> float:
    """Read a numeric scheme option with a clear error."""
    value = scheme.options[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"scheme_options.{key} for '{scheme.name}' must be a number, got {value!r}")  # noqa: TRY004
    if positive and not value > 0:
        raise ValueError(f"scheme_options.{key} for '{scheme.name}' must be > 0, got {value!r}")
    return float(value)


def option_bool(scheme: Scheme, key: str) -> bool:
    value = scheme.options[key]
    if not isinstance(value, bool):
        raise ValueError(f"scheme_options.{key} for '{scheme.name}' must be true or false, got {value!r}")  # noqa: TRY004
    return value
