"""Named model configurations: the study's two ladders and a few tiny ones for quickstarts and tests.

- depth ladder `w128-L{48..512}`: width 128, 4 heads of 32, SwiGLU hidden 352, vocab 32000, untied;
- width ladder `58M`, `130M`, `350M`, `1.3B` (LLaMA shapes of schemes.md, hidden 8/3 d rounded up to 32);
- `tiny-*`: byte-level vocabulary (256) for the built-in CPU data, seconds per step on a laptop.

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


def _build() -> dict[str, ModelConfig]:
    configs: dict[str, ModelConfig] = {}
    for depth in DEPTH_LADDER:
        configs[f"w128-L{depth}"] = ModelConfig(width=128, n_heads=4, depth=depth, vocab=32000, seq_len=256)
    for name, (width, heads, depth) in WIDTH_LADDER.items():
        configs[name] = ModelConfig(width=width, n_heads=heads, depth=depth, vocab=32000, seq_len=256)
    configs["tiny"] = ModelConfig(width=64, n_heads=4, depth=4, vocab=256, seq_len=128)
    configs["tiny-deep"] = ModelConfig(width=64, n_heads=4, depth=16, vocab=256, seq_len=128)
    configs["tiny-w128"] = ModelConfig(width=128, n_heads=4, depth=8, vocab=256, seq_len=128)
    configs["micro"] = ModelConfig(width=32, n_heads=2, depth=2, vocab=256, seq_len=32)
    return configs


_CONFIGS = _build()


def named_configs() -> dict[str, ModelConfig]:
    """Every named configuration (scheme `pre`), in listing order."""
    return dict(_CONFIGS)


def named_config(name: str, **overrides: Any) -> ModelConfig:
    """The configuration called `name`, with any ModelConfig fields overridden (e.g. `scheme="lns"`)."""
    try:
        cfg = _CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model size '{name}' (allowed: {', '.join(_CONFIGS)})") from None
    return replace(cfg, **overrides) if overrides else cfg
