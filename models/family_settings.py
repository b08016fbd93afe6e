"""The settings of the looped LM and the ViT, read from `ModelConfig.extra` (no torch).

`ModelConfig` is shared by every family; what only one family needs lives in its `extra` mapping
and is read here, with defaults and one-line errors naming the key, so that counting, planning and
validation (which must not import torch) and the networks agree on one reading.

Looped LM (`family: looped`), `extra` keys and defaults:

    prelude: 2, core: 2, coda: 2   distinct blocks (their sum must equal `depth`)
    mean_loops: 8                  Poisson mean of the training loop count T
    max_loops: 32                  T is clipped to [1, max_loops]
    backprop_loops: 4              k: gradients flow through the last k iterations only (1..4)
    eval_loops: 8                  T at evaluation (and whenever the model is in eval mode)
    loop_sampling: per_batch       per_batch: one T for the whole batch; per_sequence: one T per sequence
    inject_dt: 1.0, inject_a: 1.0  initial step size dt and decay rate A of the re-injection

ViT (`family: vit`), `extra` keys and defaults:

    image_size: 32, patch_size: 4, channels: 3   N = (image_size / patch_size)^2 patches + 1 class token
    drop_path: 0.0                                stochastic depth: rate of the last block (linear from 0);
                                                  0.1 under the `deit` training recipe unless given
    init: trunc_normal                            weights drawn from N(0, init_std) truncated to
    init_trunc: 2.0                               [-init_trunc, init_trunc] (absolute, as timm's
                                                  trunc_normal_(std=.02) in DeiT: at std 0.02 a cut at 100
                                                  sigma); `init: normal` for the untruncated N(0, init_std)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from models.config import ModelConfig

if TYPE_CHECKING:  # pragma: no cover - typing only
    from models.scheme import StepFn

LoopSampling = Literal["per_batch", "per_sequence"]
MAX_BACKPROP_LOOPS = 4


def _check_keys(family: str, extra: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(extra) - set(allowed))
    if unknown:
        raise ValueError(f"model.extra for the {family} family: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})")


def _int(family: str, extra: Mapping[str, Any], key: str, default: int, lo: int) -> int:
    value = extra.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"model.extra.{key} for the {family} family must be an integer >= {lo}, got {value!r}")
    return value


def _float(family: str, extra: Mapping[str, Any], key: str, default: float, *, lo: float = 0.0, lo_open: bool = True,
           hi: float | None = None) -> float:
    value = extra.get(key, default)
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > lo if lo_open else value >= lo) and (hi is None or value <= hi)
    if not ok:
        bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi is not None else "")
        raise ValueError(f"model.extra.{key} for the {family} family must be a number {bound}, got {value!r}")
    return float(value)


def _choice(family: str, extra: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = extra.get(key, default)
    if value not in allowed:
        raise ValueError(f"model.extra.{key} for the {family} family must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


# ---- looped LM ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopSettings:
    prelude: int = 2
    core: int = 2
    coda: int = 2
    mean_loops: float = 8.0
    max_loops: int = 32
    backprop_loops: int = 4
    eval_loops: int = 8
    loop_sampling: LoopSampling = "per_batch"
    inject_dt: float = 1.0
    inject_a: float = 1.0

    @property
    def blocks(self) -> int:
        return self.prelude + self.core + self.coda

    def section(self, layer: int) -> str:
        """'prelude', 'core' or 'coda' for block `layer` (1-based position in the network)."""
        if layer <= self.prelude:
            return "prelude"
        return "core" if layer <= self.prelude + self.core else "coda"

    def loop_pmf(self) -> list[float]:
        """P(T = t) for t = 0..max_loops of the clipped Poisson (index 0 is always 0)."""
        lam = self.mean_loops
        pmf = [math.exp(-lam + t * math.log(lam) - math.lgamma(t + 1)) for t in range(self.max_loops + 1)]
        below = pmf[0]  # T = 0 is clipped up to 1
        above = max(0.0, 1.0 - sum(pmf))  # the tail beyond max_loops is clipped down to it
        pmf[0] = 0.0
        pmf[1] += below
        pmf[self.max_loops] += above
        return pmf

    def expected_loops(self) -> tuple[float, float]:
        """(E[T], E[min(T, k)]) of the training loop count: forward and backward core passes per step."""
        pmf = self.loop_pmf()
        mean = sum(t * p for t, p in enumerate(pmf))
        with_grad = sum(min(t, self.backprop_loops) * p for t, p in enumerate(pmf))
        return mean, with_grad


LOOP_KEYS = tuple(f.name for f in fields(LoopSettings))


def looped_depth(extra: Mapping[str, Any]) -> int:
    """prelude + core + coda of a looped model's `extra` (the number of distinct blocks)."""
    d = LoopSettings()
    return (_int("looped", extra, "prelude", d.prelude, 0) + _int("looped", extra, "core", d.core, 1)
            + _int("looped", extra, "coda", d.coda, 0))


def loop_settings(cfg: ModelConfig) -> LoopSettings:
    """The looped family's settings from `cfg.extra` (ValueError naming the key when one is wrong)."""
    family, extra = "looped", cfg.extra
    _check_keys(family, extra, LOOP_KEYS)
    d = LoopSettings()
    prelude = _int(family, extra, "prelude", d.prelude, 0)
    core = _int(family, extra, "core", d.core, 1)
    coda = _int(family, extra, "coda", d.coda, 0)
    if prelude + core + coda != cfg.depth:
        raise ValueError(
            f"model.extra: prelude + core + coda = {prelude}+{core}+{coda} = {prelude + core + coda} blocks, "
            f"but depth is {cfg.depth} (depth counts the distinct blocks of the looped model)"
        )
    max_loops = _int(family, extra, "max_loops", d.max_loops, 1)
    sampling = extra.get("loop_sampling", d.loop_sampling)
    if sampling not in ("per_batch", "per_sequence"):
        raise ValueError(f"model.extra.loop_sampling must be 'per_batch' or 'per_sequence', got {sampling!r}")
    settings = LoopSettings(
        prelude=prelude, core=core, coda=coda,
        mean_loops=_float(family, extra, "mean_loops", d.mean_loops, hi=float(max_loops)),
        max_loops=max_loops,
        backprop_loops=_int(family, extra, "backprop_loops", d.backprop_loops, 1),
        eval_loops=_int(family, extra, "eval_loops", d.eval_loops, 1),
        loop_sampling=sampling,
        inject_dt=_float(family, extra, "inject_dt", d.inject_dt),
        inject_a=_float(family, extra, "inject_a", d.inject_a),
    )
    if settings.backprop_loops > MAX_BACKPROP_LOOPS:
        raise ValueError(f"model.extra.backprop_loops must be between 1 and {MAX_BACKPROP_LOOPS}, got {settings.backprop_loops}")
    return settings


# ---- ViT ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViTSettings:
    image_size: int = 32
    patch_size: int = 4
    channels: int = 3
    drop_path: float = 0.0
    init: str = "trunc_normal"
    init_trunc: float = 2.0

    @property
    def patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens(self) -> int:
        """Tokens per image: the patches and the class token."""
        return self.patches + 1

    @property
    def patch_dim(self) -> int:
        return self.patch_size * self.patch_size * self.channels


VIT_KEYS = tuple(f.name for f in fields(ViTSettings))


def vit_settings(cfg: ModelConfig) -> ViTSettings:
    """The ViT's settings from `cfg.extra` (ValueError naming the key when one is wrong)."""
    family, extra = "vit", cfg.extra
    _check_keys(family, extra, VIT_KEYS)
    d = ViTSettings()
    image = _int(family, extra, "image_size", d.image_size, 1)
    patch = _int(family, extra, "patch_size", d.patch_size, 1)
    if image % patch:
        raise ValueError(f"model.extra: image_size {image} is not a multiple of patch_size {patch}")
    return ViTSettings(
        image_size=image, patch_size=patch,
        channels=_int(family, extra, "channels", d.channels, 1),
        drop_path=_float(family, extra, "drop_path", d.drop_path, lo_open=False, hi=0.99),
        init=_choice(family, extra, "init", d.init, ("trunc_normal", "normal")),
        init_trunc=_float(family, extra, "init_trunc", d.init_trunc),
    )


def vit_hidden(cfg: ModelConfig) -> int:
    """The ViT MLP's hidden size: `mlp_hidden`, else 4 x width (ViT / DeiT convention)."""
    return cfg.mlp_hidden if cfg.mlp_hidden is not None else 4 * cfg.width


# ---- scheme defaults of the families ----------------------------------------------------------------

#: Scheme options a family sets unless the method gives them (only for schemes that have the option).
#: Looped LM and ViT: LayerRoPE's magnitude slopes start at 0 (schemes.md); ViT: LayerRoPE conditions
#: the pre-norm LayerNorms' gains only (read sites), not the branch outputs.
FAMILY_SCHEME_DEFAULTS: dict[str, dict[str, Any]] = {
    "looped": {"mag_slope_init": 0.0},
    "vit": {"mag_slope_init": 0.0, "write_gains": False},
}


def family_scheme_options(cfg: ModelConfig) -> dict[str, Any]:
    """`cfg.scheme_options` with the family's defaults for the options the scheme has."""
    from models.registry import get_scheme

    allowed = get_scheme(cfg.scheme).defaults
    defaults = {k: v for k, v in FAMILY_SCHEME_DEFAULTS.get(cfg.family, {}).items() if k in allowed}
    return {**defaults, **cfg.scheme_options}


# ---- which sites a scheme normalises (torch-free) -----------------------------------------------------


class _SiteProbe:
    """A `StepOps` over plain floats that records the sites passed to `norm`: a scheme's step is pure
    wiring (adds, products, norms, gains), so running it once on the number 1 reveals its norm sites."""

    def __init__(self) -> None:
        self.norm_sites: set[str] = set()

    def branch(self, x: Any) -> Any:
        return x

    def residual(self, h: Any, x: Any, *, skip: float = 1.0, scale: float = 1.0, gain: str | None = None) -> Any:
        return skip * h + scale * x

    def norm(self, x: Any, site: str | None = None) -> Any:
        if site is not None:
            self.norm_sites.add(site)
        return x

    def gain(self, x: Any, site: str) -> Any:
        return x

    def const(self, name: str) -> float:
        return 1.0


def normalised_sites(step: StepFn) -> tuple[str, ...]:
    """Full site names (`attn_in`, `mlp_out`, ...) that a residual-step function normalises, both sublayers.

    The ViT gives each of them a LayerNorm bias."""
    probe = _SiteProbe()
    step(1.0, probe)  # type: ignore[arg-type]
    return tuple(f"{sub}_{site}" for sub in ("attn", "mlp") for site in sorted(probe.norm_sites))
