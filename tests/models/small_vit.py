"""Small ViTs for the tests."""

from __future__ import annotations

from typing import Any

import torch

from models import build_model
from models.config import ModelConfig
from models.vit import ViT
from trials.config import DataConfig


def vit_config(scheme: str = "pre", *, depth: int = 3, width: int = 32, heads: int = 2, classes: int = 5,
               scheme_options: dict[str, Any] | None = None, **extra: Any) -> ModelConfig:
    return ModelConfig(
        family="vit", scheme=scheme, width=width, n_heads=heads, depth=depth, vocab=classes, seq_len=17,
        scheme_options=scheme_options or {}, extra={"image_size": 16, "patch_size": 4, **extra},
    )


def make(cfg: ModelConfig, stack: int = 1, seed: int = 0, dtype: torch.dtype | None = None) -> ViT:
    return build_model(cfg, stack, seed, dtype=dtype)  # type: ignore[return-value]


def tiny_spec_dict(vision: dict | None, *, steps: int = 12, lrs: tuple[float, ...] = (2e-3,), extra: dict | None = None,
                   **train: object) -> dict:
    """A 2-block ViT on 4 classes of the built-in 16 px images (`vision`: the train.vision section)."""
    return ({
        "model": {"family": "vit", "scheme": "pre", "width": 32, "depth": 2, "n_heads": 2, "vocab": 4, "seq_len": 17,
                  "extra": {"image_size": 16, "patch_size": 4, **(extra or {})}},
        "train": {"steps": steps, "batch_size": 16, "eval_every": steps, "eval_batches": 2, "checkpoint_every": 6,
                  "optimizer": {"betas": [0.9, 0.999], "weight_decay": 0.05, "grad_clip": 0},
                  "objective": "error", **({"vision": vision} if vision is not None else {}), **train},
        "data": DataConfig(source="builtin_images", builtin_classes=4, builtin_per_class=40).model_dump(),
        "divergence": {"init_loss_margin": 1.0, "stall_margin": None},  # seconds of training: near chance; the stall rule is tested elsewhere
        "lrs": list(lrs),
    })
