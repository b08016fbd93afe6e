"""Small ViTs for the tests (built directly, so these tests do not depend on the family dispatch)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from models.config import ModelConfig
from models.vit import ViT


def vit_config(scheme: str = "pre", *, depth: int = 3, width: int = 32, heads: int = 2, classes: int = 5,
               scheme_options: dict[str, Any] | None = None, **extra: Any) -> ModelConfig:
    return ModelConfig(
        family="vit", scheme=scheme, width=width, n_heads=heads, depth=depth, vocab=classes, seq_len=17,
        scheme_options=scheme_options or {}, extra={"image_size": 16, "patch_size": 4, **extra},
    )


def make(cfg: ModelConfig, stack: int = 1, seed: int = 0, dtype: torch.dtype | None = None) -> ViT:
    model = ViT(cfg, stack=stack)
    if dtype is not None:
        model.to(dtype)
    model.init_weights(seed)
    return model


def perturb(model: torch.nn.Module, seed: int, size: float = 0.05) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(size * torch.randn(param.shape, generator=gen, dtype=torch.float32).to(param.dtype))
    return model


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))
