"""Small ViTs for the tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from models import build_model
from models.config import ModelConfig
from models.vit import ViT


def vit_config(scheme: str = "pre", *, depth: int = 3, width: int = 32, heads: int = 2, classes: int = 5,
               scheme_options: dict[str, Any] | None = None, **extra: Any) -> ModelConfig:
    return ModelConfig(
        family="vit", scheme=scheme, width=width, n_heads=heads, depth=depth, vocab=classes, seq_len=17,
        scheme_options=scheme_options or {}, extra={"image_size": 16, "patch_size": 4, **extra},
    )


def make(cfg: ModelConfig, stack: int = 1, seed: int = 0, dtype: torch.dtype | None = None) -> ViT:
    return build_model(cfg, stack, seed, dtype=dtype)  # type: ignore[return-value]


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))
