"""Small helpers shared by the model tests of several families."""

from __future__ import annotations

import torch


def perturb(model: torch.nn.Module, seed: int, size: float = 0.05) -> torch.nn.Module:
    """Move every parameter off its initial value (gains, LayerRoPE scalars, injections too), so
    that tests do not pass only because of the initialisation's symmetries."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(size * torch.randn(param.shape, generator=gen, dtype=torch.float32).to(param.dtype))
    return model
