"""`build_model(cfg, stack=K, seed=s)`: the one entry point that turns a ModelConfig into a network."""

from __future__ import annotations

import torch

from models.config import ModelConfig
from models.stacked import StackedModel


def build_model(
    cfg: ModelConfig,
    stack: int = 1,
    seed: int = 0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> StackedModel:
    """K identical members (initialised once from `seed`, copied K times), on `device` in `dtype`.

    The base weights are drawn on the CPU whatever the device, so a seed gives the same network on
    every machine, for every K and every scheme.
    """
    if cfg.family == "llama":
        from models.llama import LlamaLM

        model: StackedModel = LlamaLM(cfg, stack=stack)
    elif cfg.family == "looped":
        from models.looped import LoopedLM

        model = LoopedLM(cfg, stack=stack)
    elif cfg.family == "vit":
        from models.vit import ViT

        model = ViT(cfg, stack=stack)
    else:
        raise ValueError(f"unknown model family '{cfg.family}' (available: llama, looped, vit)")
    if device is not None or dtype is not None:
        model.to(device=device, dtype=dtype)
    model.init_weights(seed)  # type: ignore[operator]
    return model
