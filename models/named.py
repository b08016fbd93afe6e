"""Named model configurations: the study's two ladders and a few tiny ones for quickstarts and tests.

- depth ladder `w128-L{48..512}`: width 128, 4 heads of 32, SwiGLU hidden 352, vocab 32000, untied;
- width ladder `58M`, `130M`, `350M`, `1.3B` (LLaMA shapes of schemes.md, hidden 8/3 d rounded up to 32);
- `tiny-*`: byte-level vocabulary (256) for the built-in CPU data, seconds per step on a laptop;
- looped LMs (Parcae's shapes, `family: looped`): `parcae-140M` (2/2/2 prelude/core/coda blocks at
  d768), `parcae-370M` (4/4/4 at d1024), `parcae-770M` (6/6/6 at d1280), `parcae-tiny` (1/2/1 at d64,
  byte-level) and each one's non-looped GPT baseline of the same blocks, `<name>-gpt` (`family: llama`,
  depth P + C + Q: the same parameters but the re-injection's d^2 + 2d). LLaMA blocks (SwiGLU 8/3 d),
  context 2048, vocabulary 65536 (a 2^16 tokenizer as in nanochat, on which Parcae's code builds). The
  names are the study's labels: under these conventions the looped models have 144M, 287M and 524M
  parameters (`sweeper models`). Every one of the 65,536 embedding rows counts, in these counts and in
  the 80-tokens-per-parameter budget, as Parcae's code counts its budget; with the GPT-2 tokenizer
  (50,257 ids) of the shipped YAMLs, 15,279 rows are never read (16% / 11% / 7.5% of the counts);
- ViTs (`family: vit`, DeiT shapes, 224 px images in 16 px patches, 1000 classes, MLP 4d): `ViT-T`
  (d192, 12 blocks, 3 heads), `ViT-S` (d384, 12, 6), and `vit-tiny` (d64, 4 blocks, 4 heads, 16 px
  images in 4 px patches, 10 classes) for the built-in image set on a CPU.

Names carry shapes only; the scheme is chosen per sweep method (`named_config(name, scheme=...)`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from models.config import ModelConfig

DEPTH_LADDER = (48, 64, 96, 128, 192, 256, 384, 512)
WIDTH_LADDER = {  # name: (width, heads, depth)
    "58M": (512, 8, 8),
    "130M": (768, 12, 12),
    "350M": (1024, 16, 24),
    "1.3B": (2048, 32, 24),
}


LOOPED = {  # name: (width, heads, (prelude, core, coda), vocab, seq_len, loop settings beyond the defaults)
    "parcae-140M": (768, 12, (2, 2, 2), 65536, 2048, {}),
    "parcae-370M": (1024, 16, (4, 4, 4), 65536, 2048, {}),
    "parcae-770M": (1280, 20, (6, 6, 6), 65536, 2048, {}),
    "parcae-tiny": (64, 4, (1, 2, 1), 256, 128, {"mean_loops": 4, "eval_loops": 4, "backprop_loops": 2, "max_loops": 8}),
}
VIT = {  # name: (width, heads, depth, image size, patch size, classes)
    "ViT-T": (192, 3, 12, 224, 16, 1000),
    "ViT-S": (384, 6, 12, 224, 16, 1000),
    "vit-tiny": (64, 4, 4, 16, 4, 10),
}


def _build() -> dict[str, tuple[str, ModelConfig]]:
    """name: (ladder, configuration); the ladder groups a listing (`sweeper models`)."""
    configs: dict[str, tuple[str, ModelConfig]] = {}
    for depth in DEPTH_LADDER:
        configs[f"w128-L{depth}"] = ("depth", ModelConfig(width=128, n_heads=4, depth=depth, vocab=32000, seq_len=256))
    for name, (width, heads, depth) in WIDTH_LADDER.items():
        configs[name] = ("width", ModelConfig(width=width, n_heads=heads, depth=depth, vocab=32000, seq_len=256))
    configs["tiny"] = ("tiny", ModelConfig(width=64, n_heads=4, depth=4, vocab=256, seq_len=128))
    configs["tiny-deep"] = ("tiny", ModelConfig(width=64, n_heads=4, depth=16, vocab=256, seq_len=128))
    configs["tiny-w128"] = ("tiny", ModelConfig(width=128, n_heads=4, depth=8, vocab=256, seq_len=128))
    configs["micro"] = ("tiny", ModelConfig(width=32, n_heads=2, depth=2, vocab=256, seq_len=32))
    for name, (width, heads, split, vocab, seq_len, loops) in LOOPED.items():
        extra = {"prelude": split[0], "core": split[1], "coda": split[2], **loops}
        looped = ModelConfig(family="looped", width=width, n_heads=heads, depth=sum(split), vocab=vocab, seq_len=seq_len,
                             extra=extra)
        configs[name] = ("looped", looped)
        configs[f"{name}-gpt"] = ("looped", replace(looped, family="llama", extra={}))  # beside its looped model
    for name, (width, heads, depth, image, patch, classes) in VIT.items():
        configs[name] = ("vit", ModelConfig(
            family="vit", width=width, n_heads=heads, depth=depth, vocab=classes, seq_len=(image // patch) ** 2 + 1,
            mlp_hidden=4 * width, extra={"image_size": image, "patch_size": patch},
        ))
    return configs


_NAMED = _build()
_LADDERS = {name: ladder for name, (ladder, _) in _NAMED.items()}
_CONFIGS = {name: cfg for name, (_, cfg) in _NAMED.items()}


def named_configs() -> dict[str, ModelConfig]:
    """Every named configuration (scheme `pre`), in listing order."""
    return dict(_CONFIGS)


def ladder_of(name: str) -> str:
    """The ladder a named size belongs to: depth, width, tiny, looped (with the GPT baselines) or vit."""
    return _LADDERS[name]


def named_config(name: str, **overrides: Any) -> ModelConfig:
    """The configuration called `name`, with any ModelConfig fields overridden (e.g. `scheme="lns"`)."""
    try:
        cfg = _CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model size '{name}' (allowed: {', '.join(_CONFIGS)})") from None
    return replace(cfg, **overrides) if overrides else cfg
