"""The LLaMA-style decoder family (`family: llama`): its entry, and exact parameter counts and training
FLOPs per token from the configuration alone (no torch).

Per member, for the LLaMA decoder with width d, MLP hidden h, depth L, vocabulary V, sequence T:

- matrices per block: q, k, v, o (4 d^2) and gate, up, down (3 d h);
- embedding V d (input) and head d V (untied);
- gains: the scheme's per-block gain vectors (d each), the embedding/final norm gains, and any
  model-level gain module (LayerRoPE: 4 sites x (d + 4)).

`nonembed` excludes both the input embedding and the head. A test checks every scheme's count
against the parameters of a built model.

Training FLOPs per token (PaLM appendix B convention, multiply-add = 2 FLOPs, backward = 2x forward):

    6 * N_matmul + 12 * L * T * d,   N_matmul = L (4 d^2 + 3 d h) + d V

6 N_matmul covers every parameter matmul including the LM head, not the embedding lookup (a gather)
nor norms, gains, RoPE, softmax or the loss. 12 L T d is attention's QK^T and AV (2 T d FLOPs each
per token per layer forward, times 3), counted over the full T x T score matrix as is standard for
MFU; a causal kernel skips about half of it.

The family takes no `model.extra` settings yet (`LlamaSettings` has no fields): options of the decoder's
blocks (e.g. Parcae's GPT baseline: ReLU^2 MLP, QK-norm, value embeddings, tied embeddings) become its
fields, shared with the looped family's `LoopSettings` (see `models.family.FamilyOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.config import ModelConfig
from models.family import FamilyOptions, FamilySpec, register_family
from models.registry import make_scheme


@dataclass(frozen=True)
class LlamaSettings(FamilyOptions):
    """The decoder's `model.extra` settings: none yet."""

    family: ClassVar[str] = "llama"


def count_decoder(cfg: ModelConfig) -> dict[str, int]:
    """{"total", "nonembed", "embedding", "head", "matmul"} parameters of one decoder member."""
    scheme = make_scheme(cfg.scheme, cfg.depth, cfg.scheme_options)
    d, h, depth = cfg.width, cfg.hidden, cfg.depth
    block_matrices = depth * (4 * d * d + 3 * d * h)
    block_gains = d * sum(len(scheme.block_sites(layer)) for layer in range(1, depth + 1))
    model_gains = d * (int(scheme.embed_norm) + int(scheme.final_norm)) + scheme.extra_param_count(d)
    embedding = head = cfg.vocab * d
    nonembed = block_matrices + block_gains + model_gains
    return {
        "total": nonembed + embedding + head,
        "nonembed": nonembed,
        "embedding": embedding,
        "head": head,
        "matmul": block_matrices + head,
    }


def flops_decoder(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """Training FLOPs per token of one decoder member: 6 N_matmul + 12 L T d (see the module docstring)."""
    d, h, depth = cfg.width, cfg.hidden, cfg.depth
    seq = cfg.seq_len if seq_len is None else seq_len
    matmul = depth * (4 * d * d + 3 * d * h) + d * cfg.vocab
    return float(6 * matmul + 12 * depth * seq * d)


LLAMA = register_family(FamilySpec(
    name="llama",
    summary="LLaMA-style decoder: RMSNorm, SwiGLU, RoPE, untied embeddings",
    network="models.llama:LlamaLM",
    options=LlamaSettings,
    count_params=count_decoder,
    flops_per_token=flops_decoder,
    fused_loss=True,
))
