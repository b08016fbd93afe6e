"""Exact parameter counts and training FLOPs per token of any `ModelConfig`, from the configuration alone
(no torch): the family entry's counting (`models.family`), each family's formula in its module
(`models/families/llama.py`, `looped.py`, `vit.py`). A test checks every family's and every scheme's
count against the parameters of a built model.

Conventions (PaLM appendix B): multiply-add = 2 FLOPs, backward = 2 x forward, 6 FLOPs per parameter
in a matmul per token, and attention's QK^T and AV over the full T x T score matrix.
"""

from __future__ import annotations

from models.config import ModelConfig
from models.family import family_of


def count_params(cfg: ModelConfig) -> dict[str, int]:
    """{"total", "nonembed", "embedding", "head", "matmul", "hidden"} parameters of one member (`hidden`: the blocks'
    weight matrices, and a looped model's re-injection: what Muon updates under `optimizer.kind: muon`)."""
    return family_of(cfg).count_params(cfg)


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """Training FLOPs per token of one member (`seq_len`: the attention's T, default `cfg.seq_len`)."""
    return family_of(cfg).flops_per_token(cfg, seq_len)
