"""The networks of the study.

A LLaMA-style decoder (`models.llama`), one small module per normalization scheme
(`models.schemes.*`, chosen by name through `models.registry`), LayerRoPE
(`models.layerrope`), the looped latent LM and the ViT, each family one entry of the family registry
(`models.family`, one module per family in `models.families`). Every network carries a
leading *stack* dimension K: K models of identical architecture trained side by side
(one per learning rate of a sweep cell). K = 1 is a plain model.

`ModelConfig`, `count_params`, `flops_per_token`, `named_config(s)` and the registries do not import
torch; `build_model` does (on first use), so `from models import ModelConfig` stays fast.
"""

from __future__ import annotations

from typing import Any

from models.config import ModelConfig

__all__ = ["ModelConfig", "build_model", "count_params", "flops_per_token", "named_config", "named_configs"]

_LAZY = {
    "build_model": "models.build",
    "count_params": "models.counting",
    "flops_per_token": "models.counting",
    "named_config": "models.named",
    "named_configs": "models.named",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'models' has no attribute '{name}'")
