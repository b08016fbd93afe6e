"""The Vision Transformer family (`family: vit`, DeiT shapes; the network is `models.vit`): its settings,
exact parameter counts and training FLOPs per token (no torch), and its entry.

Settings (`model.extra` keys and defaults, `ViTSettings`):

    image_size: 32, patch_size: 4, channels: 3   N = (image_size / patch_size)^2 patches + 1 class token
    drop_path: 0.0                                stochastic depth: rate of the last block (linear from 0);
                                                  0.1 under the `deit` training recipe unless given
    init: trunc_normal                            weights drawn from N(0, init_std) truncated to
    init_trunc: 2.0                               [-init_trunc, init_trunc] (absolute, as timm's
                                                  trunc_normal_(std=.02) in DeiT: at std 0.02 a cut at 100
                                                  sigma); `init: normal` for the untruncated N(0, init_std)

Counting (L blocks, width d, MLP hidden h, classes C, p x p patches of c channels, N patches, T = N + 1
tokens), with the decoder's conventions (`models.families.llama`):

- parameters: patch embedding (p^2 c d + d), class token (d), position embeddings (T d), per block
  qkv (3 d^2 + 3 d), o (d^2 + d), fc1 (d h + h), fc2 (h d + d), a gain (d) per gain site and a bias (d)
  per normalised site of the scheme, the embedding / final LayerNorms (2 d each when present), any
  LayerRoPE sites, and the head (d C + C). `nonembed` excludes the patch embedding, class token,
  position embeddings and the head (the ViT's input and output embeddings).
- training FLOPs per token (per patch token and class token, T per image):

      6 [L (4 d^2 + 2 d h) + (N / T) p^2 c d + d C / T] + 12 L T d

  The patch embedding acts on N of the T tokens and the head on one per image.

A scheme's normalised sites (each with a LayerNorm bias here) are found by running its residual step
once on a probe (`normalised_sites`), without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from models.config import ModelConfig
from models.family import FamilyOptions, FamilySpec, check_keys, read_choice, read_float, read_int, register_family
from models.registry import make_scheme

if TYPE_CHECKING:  # pragma: no cover - typing only
    from models.scheme import StepFn


@dataclass(frozen=True)
class ViTSettings(FamilyOptions):
    family: ClassVar[str] = "vit"

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

    @classmethod
    def read(cls, extra: Mapping[str, Any], depth: int | None = None) -> ViTSettings:
        """The settings in `extra` (the depth does not enter them)."""
        family = cls.family
        check_keys(family, extra, cls.keys())
        d = cls()
        image = read_int(family, extra, "image_size", d.image_size, 1)
        patch = read_int(family, extra, "patch_size", d.patch_size, 1)
        if image % patch:
            raise ValueError(f"model.extra: image_size {image} is not a multiple of patch_size {patch}")
        return cls(
            image_size=image, patch_size=patch,
            channels=read_int(family, extra, "channels", d.channels, 1),
            drop_path=read_float(family, extra, "drop_path", d.drop_path, lo_open=False, hi=0.99),
            init=read_choice(family, extra, "init", d.init, ("trunc_normal", "normal")),
            init_trunc=read_float(family, extra, "init_trunc", d.init_trunc),
        )


def vit_settings(cfg: ModelConfig) -> ViTSettings:
    """The ViT's settings from `cfg.extra` (ValueError naming the key when one is wrong)."""
    return ViTSettings.read(cfg.extra, cfg.depth)


def vit_hidden(cfg: ModelConfig) -> int:
    """The ViT MLP's hidden size: `mlp_hidden`, else 4 x width (ViT / DeiT convention)."""
    return cfg.mlp_hidden if cfg.mlp_hidden is not None else 4 * cfg.width


def vit_tokens(cfg: ModelConfig) -> int:
    """Tokens per image: the patches and the class token."""
    return vit_settings(cfg).tokens


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


# ---- counting -------------------------------------------------------------------------------------------


def count_vit(cfg: ModelConfig) -> dict[str, int]:
    image = vit_settings(cfg)
    scheme = make_scheme(cfg.scheme, cfg.depth, VIT.scheme_options(cfg))
    d, h, depth, classes = cfg.width, vit_hidden(cfg), cfg.depth, cfg.vocab
    block_matrices = depth * (4 * d * d + 2 * d * h)
    block_biases = depth * (3 * d + d + h + d)
    norm_params = 0
    for layer in range(1, depth + 1):
        norm_params += d * len(scheme.block_sites(layer)) + d * len(normalised_sites(scheme.step_for(layer)))
    model_norms = 2 * d * (int(scheme.embed_norm) + int(scheme.final_norm)) + scheme.extra_param_count(d)
    embedding = image.patch_dim * d + d + d + image.tokens * d
    head = d * classes + classes
    nonembed = block_matrices + block_biases + norm_params + model_norms
    return {
        "total": nonembed + embedding + head,
        "nonembed": nonembed,
        "embedding": embedding,
        "head": head,
        "matmul": block_matrices + image.patch_dim * d + d * classes,
        "hidden": block_matrices,
    }


def flops_vit(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """Training FLOPs per token; `seq_len` is ignored: the image fixes the tokens per sample."""
    image = vit_settings(cfg)
    d, h, depth, tokens = cfg.width, vit_hidden(cfg), cfg.depth, image.tokens
    per_token = depth * (4 * d * d + 2 * d * h) + image.patches * image.patch_dim * d / tokens + d * cfg.vocab / tokens
    return float(6.0 * per_token + 12.0 * depth * tokens * d)


VIT = register_family(FamilySpec(
    name="vit",
    summary="Vision Transformer (ViT / DeiT): patch embedding, class token, LayerNorm, GELU MLP",
    network="models.vit:ViT",
    options=ViTSettings,
    count_params=count_vit,
    flops_per_token=flops_vit,
    data_kind="images",
    # LayerRoPE's magnitude slopes start at 0, and it conditions the pre-norm LayerNorms' gains only (read
    # sites), not the branch outputs (schemes.md)
    scheme_defaults={"mag_slope_init": 0.0, "write_gains": False},
    tokens_per_sample=vit_tokens,
    mlp_hidden=vit_hidden,
    classifies_sequences=True,
    rotary=False,
    micro_batch=False,  # drop-path masks are drawn per batch
))
