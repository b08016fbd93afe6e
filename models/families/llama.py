"""The LLaMA-style decoder family (`family: llama`): the decoder's block options (shared with the looped
family), its entry, and exact parameter counts and training FLOPs per token from the configuration alone
(no torch).

Block options (`model.extra` keys of both the llama and the looped family, `DecoderOptions`; the defaults
are the LLaMA blocks the study has always trained, bit for bit):

    mlp: swiglu               swiglu: gate, up, down (hidden 8/3 d rounded up to 32);
                              relu2: up, down and relu(x)^2 between them (hidden 4 d; no gate)
    qk_norm: false            RMSNorm (no gain, eps `norm_eps`) on every head's query and key before RoPE
    value_embeddings: false   a vocabulary-sized table (V x kv-width, kv-width = d: no grouped-query
                              attention here) per block at the positions counted back from the last,
                              L, L-2, L-4, ... (alternating, always including the last; 1-based positions
                              in the network, prelude and coda included for the looped model): one table
                              per such block, none shared, so ceil(L/2) tables (3 at 6 positions). The row
                              of each input token is added to that block's attention values (after the
                              v projection, before the attention weights: `v = x W_v + E_l[token]`)
    tie_embeddings: false     the head is the token embedding transposed (one V x d table)
    init: normal              normal: every matrix N(0, init_std) in the documented order (`models.llama`);
                              scaled_zero_orthogonal: Parcae's "scaled-zero" init with orthogonal matrices
                              (the exact rule is in `models.llama`'s docstring)

Combinations: every option composes with every scheme, except a scheme whose init multipliers touch only
the output projections (`scaled_init`) under `init: scaled_zero_orthogonal`, which zeroes them: the scheme
would be Pre-Norm under another name, so the pair is refused (`DecoderOptions.check_scheme`).

Per member, for the decoder with width d, MLP hidden h, depth L, vocabulary V, sequence T, E value tables:

- matrices per block: q, k, v, o (4 d^2) and the MLP (3 d h for SwiGLU, 2 d h for ReLU^2);
- embedding V d (input) plus E V d (value tables); head d V (untied) or none (tied);
- gains: the scheme's per-block gain vectors (d each), the embedding/final norm gains, and any
  model-level gain module (LayerRoPE: 4 sites x (d + 4)). QK-norm has no parameters.

`nonembed` excludes the input embedding, the value tables and the head. `matmul` counts the parameters
that multiply activations: the block matrices and the head's d V (the tied table too: it is the head's
matmul). `hidden` counts the block matrices alone: the parameters `train.optimizer.kind: muon` gives Muon. A test checks every scheme's and every option's count against the parameters of a built model.

Training FLOPs per token (PaLM appendix B convention, multiply-add = 2 FLOPs, backward = 2x forward):

    6 * N_matmul + 12 * L * T * d,   N_matmul = L (4 d^2 + m) + d V,  m = 3 d h (SwiGLU) | 2 d h (ReLU^2)

6 N_matmul covers every parameter matmul including the LM head, not the embedding and value-table lookups
(gathers) nor norms, gains, RoPE, softmax, the ReLU^2 or the loss. 12 L T d is attention's QK^T and AV
(2 T d FLOPs each per token per layer forward, times 3), counted over the full T x T score matrix as is
standard for MFU; a causal kernel skips about half of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from models.config import ModelConfig, swiglu_hidden
from models.family import (FamilyOptions, FamilySpec, check_keys, get_family, read_bool, read_choice,
                           register_family)
from models.registry import make_scheme
from models.scheme import BLOCK_WEIGHTS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from models.scheme import Scheme

MLP_KINDS = ("swiglu", "relu2")
INIT_RULES = ("normal", "scaled_zero_orthogonal")
#: weights that `init: scaled_zero_orthogonal` sets to zero (the branches' output projections)
ZERO_INIT_WEIGHTS = frozenset({"o", "down"})


@dataclass(frozen=True)
class DecoderOptions(FamilyOptions):
    """The decoder's block options (module docstring), a base of `LlamaSettings` and the looped family's
    `LoopSettings`; `models.llama.LlamaLM` builds from them and `count_decoder` counts them."""

    mlp: str = "swiglu"
    qk_norm: bool = False
    value_embeddings: bool = False
    tie_embeddings: bool = False
    init: str = "normal"

    @classmethod
    def block_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(DecoderOptions))

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The family's own keys first, then the block options."""
        block = cls.block_keys()
        return tuple(k for k in super().keys() if k not in block) + block

    @classmethod
    def read_blocks(cls, extra: Mapping[str, Any]) -> dict[str, Any]:
        """The block options in `extra` (defaults for the keys not given), validated."""
        family, d = cls.family, DecoderOptions()
        return {
            "mlp": read_choice(family, extra, "mlp", d.mlp, MLP_KINDS),
            "qk_norm": read_bool(family, extra, "qk_norm", d.qk_norm),
            "value_embeddings": read_bool(family, extra, "value_embeddings", d.value_embeddings),
            "tie_embeddings": read_bool(family, extra, "tie_embeddings", d.tie_embeddings),
            "init": read_choice(family, extra, "init", d.init, INIT_RULES),
        }

    def hidden(self, cfg: ModelConfig) -> int:
        """The MLP's hidden size: `mlp_hidden`, else 8/3 d rounded up to 32 (SwiGLU) or 4 d (ReLU^2)."""
        if cfg.mlp_hidden is not None:
            return cfg.mlp_hidden
        return swiglu_hidden(cfg.width) if self.mlp == "swiglu" else 4 * cfg.width

    def mlp_matrices(self, cfg: ModelConfig) -> int:
        """Parameters of one block's MLP matrices: 3 d h (gate, up, down) or 2 d h (up, down)."""
        return (3 if self.mlp == "swiglu" else 2) * cfg.width * self.hidden(cfg)

    def value_layers(self, depth: int) -> tuple[int, ...]:
        """1-based positions of the blocks with a value table: L, L-2, ... (ascending); () when off."""
        if not self.value_embeddings:
            return ()
        return tuple(layer for layer in range(1, depth + 1) if (depth - layer) % 2 == 0)

    def embedding_std(self, cfg: ModelConfig) -> float:
        """The token embedding's init std: `init_std`, or sqrt(2 / (5 d)) under scaled_zero_orthogonal."""
        return cfg.init_std if self.init == "normal" else math.sqrt(2.0 / (5.0 * cfg.width))

    def check_scheme(self, scheme: Scheme) -> None:
        """ValueError when the scheme's init multipliers act only on weights this init sets to zero."""
        if self.init != "scaled_zero_orthogonal":
            return
        scaled = {w for w in BLOCK_WEIGHTS for layer in range(1, scheme.depth + 1) if scheme.init_scale(w, layer) != 1.0}
        if scaled and scaled <= ZERO_INIT_WEIGHTS:
            raise ValueError(
                f"model.extra.init: scaled_zero_orthogonal sets {', '.join(sorted(ZERO_INIT_WEIGHTS))} to zero, so "
                f"scheme '{scheme.name}' (which rescales only {', '.join(sorted(scaled))} at init) would be Pre-Norm; "
                "use init: normal with it"
            )


@dataclass(frozen=True)
class LlamaSettings(DecoderOptions):
    """The decoder's `model.extra` settings: the block options."""

    family: ClassVar[str] = "llama"

    @classmethod
    def read(cls, extra: Mapping[str, Any], depth: int | None = None) -> LlamaSettings:
        check_keys(cls.family, extra, cls.keys())
        return cls(**cls.read_blocks(extra))


def decoder_options(cfg: ModelConfig) -> DecoderOptions:
    """The block options of `cfg` (its family's settings; ValueError naming the key when one is wrong)."""
    settings = get_family(cfg.family).settings(cfg)
    if not isinstance(settings, DecoderOptions):
        raise ValueError(f"model family {cfg.family!r} has no decoder blocks")
    return settings


def decoder_hidden(cfg: ModelConfig) -> int:
    return decoder_options(cfg).hidden(cfg)


def count_decoder(cfg: ModelConfig) -> dict[str, int]:
    """{"total", "nonembed", "embedding", "head", "matmul", "hidden"} parameters of one decoder member."""
    blocks = decoder_options(cfg)
    scheme = make_scheme(cfg.scheme, cfg.depth, cfg.scheme_options)
    blocks.check_scheme(scheme)
    d, depth, vocab = cfg.width, cfg.depth, cfg.vocab
    block_matrices = depth * (4 * d * d + blocks.mlp_matrices(cfg))
    block_gains = d * sum(len(scheme.block_sites(layer)) for layer in range(1, depth + 1))
    model_gains = d * (int(scheme.embed_norm) + int(scheme.final_norm)) + scheme.extra_param_count(d)
    embedding = vocab * d * (1 + len(blocks.value_layers(depth)))
    head = 0 if blocks.tie_embeddings else vocab * d
    nonembed = block_matrices + block_gains + model_gains
    return {
        "total": nonembed + embedding + head,
        "nonembed": nonembed,
        "embedding": embedding,
        "head": head,
        "matmul": block_matrices + vocab * d,
        "hidden": block_matrices,
    }


def flops_decoder(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """Training FLOPs per token of one decoder member: 6 N_matmul + 12 L T d (see the module docstring)."""
    blocks = decoder_options(cfg)
    d, depth = cfg.width, cfg.depth
    seq = cfg.seq_len if seq_len is None else seq_len
    matmul = depth * (4 * d * d + blocks.mlp_matrices(cfg)) + d * cfg.vocab
    return float(6 * matmul + 12 * depth * seq * d)


LLAMA = register_family(FamilySpec(
    name="llama",
    summary="LLaMA-style decoder: RMSNorm, SwiGLU or ReLU^2, RoPE (QK-norm, value embeddings, tied embeddings as options)",
    network="models.llama:LlamaLM",
    options=LlamaSettings,
    count_params=count_decoder,
    flops_per_token=flops_decoder,
    mlp_hidden=decoder_hidden,
    fused_loss=True,
))
