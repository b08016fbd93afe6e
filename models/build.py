"""`build_model(cfg, stack=K, seed=s)`: the one entry point that turns a ModelConfig into a network
(the family entry's network class, `models.family`)."""

from __future__ import annotations

import torch

from models.config import ModelConfig
from models.family import family_of
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
    model = family_of(cfg).build(cfg, stack=stack)
    if device is not None or dtype is not None:
        model.to(device=device, dtype=dtype)
    model.init_weights(seed)  # type: ignore[operator]
    return model
