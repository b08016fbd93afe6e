"""Small looped models for the tests."""

from __future__ import annotations

from typing import Any

import torch

from models import build_model
from models.config import ModelConfig
from models.looped import LoopedLM


def looped_config(scheme: str = "pre", *, prelude: int = 1, core: int = 2, coda: int = 1, width: int = 32,
                  vocab: int = 48, seq_len: int = 8, **extra: Any) -> ModelConfig:
    return ModelConfig(
        family="looped", scheme=scheme, width=width, n_heads=2, depth=prelude + core + coda, vocab=vocab, seq_len=seq_len,
        extra={"prelude": prelude, "core": core, "coda": coda, **extra},
    )


def make(cfg: ModelConfig, stack: int = 1, seed: int = 0, dtype: torch.dtype | None = None) -> LoopedLM:
    return build_model(cfg, stack, seed, dtype=dtype)  # type: ignore[return-value]
