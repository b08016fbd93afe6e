"""Named model configurations: the study's two ladders and a few tiny ones for quickstarts and tests.

- depth ladder `w128-L{48..512}`: width 128, 4 heads of 32, SwiGLU hidden 352, vocab 32000, untied;
- width ladder `58M`, `130M`, `350M`, `1.3B` (LLaMA shapes of schemes.md, hidden 8/3 d rounded up to 32);
- `tiny-*`: byte-level vocabulary (256) for the built-in CPU data, seconds per step on a laptop;
- looped LMs (Parcae's official shapes and blocks, `family: looped`): `parcae-140M` (2/2/2
  prelude/core/coda blocks at d768), `parcae-370M` (4/4/4 at d1024), `parcae-770M` (6/6/6 at d1280), all
  with heads of 128 (6, 8, 10 heads; the published 140M and 370M configurations use 6 and 8, 770M's 10 is
  the same head size), ReLU^2 MLP of 4 d, QK-norm, value embeddings, tied embeddings, the scaled-zero /
  orthogonal init, a norm after the prelude, state initialised like a weight, per-sequence loop counts
  (Poisson 8, gradients through the last 4), evaluation at 1, 2, 4 and 8 loops, RMSNorm eps 1e-5, context
  2048 and Parcae's 32,768-token vocabulary. Their counts, 143.7M / 387.0M / 775.0M, reproduce the official
  labels 140M / 370M / 770M (schemes.md: 140M is about 143M with its 3 value tables; 370M's label is 4.6%
  under its count, the others within 3%). Each one's non-looped GPT baseline `<name>-gpt` (`family:
  llama`, depth P + C + Q) has the same blocks, heads, vocabulary and init: the same parameters but the
  re-injection and the prelude norm's d^2 + 3d. `parcae-tiny` (1/2/1 at d64, byte-level) keeps the LLaMA
  blocks for quick CPU runs. A sweep takes a named size's shape and `extra` (these options), not its
  vocabulary, context or norm eps: the sweep file sets those;
- ViTs (`family: vit`, DeiT shapes, 224 px images in 16 px patches, 1000 classes, MLP 4d): `ViT-T`
  (d192, 12 blocks, 3 heads), `ViT-S` (d384, 12, 6), and `vit-tiny` (d64, 4 blocks, 4 heads, 16 px
  images in 4 px patches, 10 classes) for the built-in image set on a CPU.

Names carry shapes only; the scheme is chosen per sweep method (`named_config(name, scheme=...)`).
A name that states a parameter count (`58M`, `1.3B`, `parcae-140M`, `parcae-140M-gpt`) has that nominal
count (`nominal_params`): what `train.budget_params: label` multiplies, as Parcae's budgets are 80 x its
labels (11.2B / 29.6B / 61.6B tokens for 140M / 370M / 770M), not 80 x the exact counts.
"""

from __future__ import annotations

import copy
import re
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


#: Parcae's official block options (`DecoderOptions`) and its recurrence beyond the looped family's defaults
PARCAE_BLOCKS: dict[str, Any] = {"mlp": "relu2", "qk_norm": True, "value_embeddings": True, "tie_embeddings": True,
                                 "init": "scaled_zero_orthogonal"}
PARCAE_LOOPS: dict[str, Any] = {"prelude_norm": True, "state_init": "like_weights", "loop_sampling": "per_sequence",
                                "eval_loops": [1, 2, 4, 8]}
PARCAE_VOCAB = 32768
LOOPED = {  # name: (width, heads, (prelude, core, coda), vocab, seq_len, official blocks, loop settings beyond the defaults)
    "parcae-140M": (768, 6, (2, 2, 2), PARCAE_VOCAB, 2048, True, PARCAE_LOOPS),
    "parcae-370M": (1024, 8, (4, 4, 4), PARCAE_VOCAB, 2048, True, PARCAE_LOOPS),
    "parcae-770M": (1280, 10, (6, 6, 6), PARCAE_VOCAB, 2048, True, PARCAE_LOOPS),
    "parcae-tiny": (64, 4, (1, 2, 1), 256, 128, False,
                    {"mean_loops": 4, "eval_loops": 4, "backprop_loops": 2, "max_loops": 8}),
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
    for name, (width, heads, split, vocab, seq_len, official, loops) in LOOPED.items():
        blocks = dict(PARCAE_BLOCKS) if official else {}
        extra = {"prelude": split[0], "core": split[1], "coda": split[2], **blocks, **copy.deepcopy(loops)}
        shape: dict[str, Any] = {"mlp_hidden": 4 * width, "norm_eps": 1e-5} if official else {}
        looped = ModelConfig(family="looped", width=width, n_heads=heads, depth=sum(split), vocab=vocab, seq_len=seq_len,
                             extra=extra, **shape)
        configs[name] = ("looped", looped)
        configs[f"{name}-gpt"] = ("looped", replace(looped, family="llama", extra=blocks))  # beside its looped model
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


_LABEL_COUNT = re.compile(r"(?:^|-)(\d+(?:\.\d+)?)([MB])(?=-|$)")


def nominal_params(name: str) -> int | None:
    """The parameter count a size's name states (`parcae-140M` -> 140,000,000, `1.3B` -> 1,300,000,000), or None
    for a name that states none (`w128-L48`, `tiny`, `ViT-T`)."""
    match = _LABEL_COUNT.search(name)
    if match is None:
        return None
    return round(float(match.group(1)) * (1e6 if match.group(2) == "M" else 1e9))
