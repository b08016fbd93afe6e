"""Exact parameter counts and training FLOPs per token of the looped LM and the ViT (no torch).

`models.counting.count_params` / `flops_per_token` dispatch here by `cfg.family`; the conventions are
the decoder's (multiply-add = 2 FLOPs, backward = 2 x forward, attention over the full T x T matrix).

Looped LM (P prelude, C core, Q coda blocks, width d, MLP hidden h, vocabulary V, sequence T):

- parameters: the decoder's with depth P + C + Q, plus the re-injection `B` (d^2), `dt` and `A` (d each);
  `nonembed` includes the re-injection. A looped model and its non-looped baseline of depth P + C + Q
  differ by exactly d^2 + 2d.
- training FLOPs per token, with n = 4 d^2 + 3 d h (one block's matrices), E[T] the mean training loop
  count and E[min(T, k)] the mean number of iterations that carry gradients (k = backprop_loops; both
  expectations over the clipped Poisson of `LoopSettings.loop_pmf`):

      6 [(P + Q) n + d V + d^2] + 2 C n (E[T] + 2 E[min(T, k)])
      + 12 (P + Q) T d + 4 C T d (E[T] + 2 E[min(T, k)])

  (the first T - k iterations run forward only: 2 FLOPs per parameter; the last k forward and
  backward: 6). Evaluation cost (at `eval_loops`) is not training compute and is not counted.

ViT (L blocks, width d, MLP hidden h, classes C, p x p patches of c channels, N patches, T = N + 1 tokens):

- parameters: patch embedding (p^2 c d + d), class token (d), position embeddings (T d), per block
  qkv (3 d^2 + 3 d), o (d^2 + d), fc1 (d h + h), fc2 (h d + d), a gain (d) per gain site and a bias (d)
  per normalised site of the scheme, the embedding / final LayerNorms (2 d each when present), any
  LayerRoPE sites, and the head (d C + C). `nonembed` excludes the patch embedding, class token,
  position embeddings and the head (the ViT's input and output embeddings).
- training FLOPs per token (per patch token and class token, T per image):

      6 [L (4 d^2 + 2 d h) + (N / T) p^2 c d + d C / T] + 12 L T d

  The patch embedding acts on N of the T tokens and the head on one per image.
"""

from __future__ import annotations

from dataclasses import replace

from models.config import ModelConfig
from models.family_settings import (
    family_scheme_options,
    loop_settings,
    normalised_sites,
    vit_hidden,
    vit_settings,
)
from models.registry import make_scheme


def sample_tokens(cfg: ModelConfig) -> int:
    """Tokens per training sample: `seq_len` for the language models, patches + 1 per image for the ViT."""
    return vit_settings(cfg).tokens if cfg.family == "vit" else cfg.seq_len


# ---- looped LM ---------------------------------------------------------------------------------------


def count_looped(cfg: ModelConfig) -> dict[str, int]:
    from models.counting import count_params

    loop_settings(cfg)  # validates the split against depth
    base = count_params(replace(cfg, family="llama", extra={}))
    d = cfg.width
    inject = d * d + 2 * d
    return {
        "total": base["total"] + inject,
        "nonembed": base["nonembed"] + inject,
        "embedding": base["embedding"],
        "head": base["head"],
        "matmul": base["matmul"] + d * d,
    }


def flops_looped(cfg: ModelConfig, seq_len: int | None = None) -> float:
    s = loop_settings(cfg)
    d, h, seq = cfg.width, cfg.hidden, cfg.seq_len if seq_len is None else seq_len
    block = 4 * d * d + 3 * d * h
    mean_loops, grad_loops = s.expected_loops()
    core_passes = mean_loops + 2.0 * grad_loops  # forward passes + backward passes (2x each)
    outer = s.prelude + s.coda
    matmul = 6.0 * (outer * block + d * cfg.vocab + d * d) + 2.0 * s.core * block * core_passes
    attention = 12.0 * outer * seq * d + 4.0 * s.core * seq * d * core_passes
    return float(matmul + attention)


# ---- ViT ------------------------------------------------------------------------------------------------


def count_vit(cfg: ModelConfig) -> dict[str, int]:
    image = vit_settings(cfg)
    scheme = make_scheme(cfg.scheme, cfg.depth, family_scheme_options(cfg))
    d, h, depth, classes = cfg.width, vit_hidden(cfg), cfg.depth, cfg.vocab
    block_matrices = depth * (4 * d * d + 2 * d * h)
    block_biases = depth * (3 * d + d + h + d)
    norm_params = 0
    for layer in range(1, depth + 1):
        norm_params += d * len(scheme.block_sites(layer)) + d * len(normalised_sites(scheme.step_for(layer)))
    model_norms = 2 * d * (int(scheme.embed_norm) + int(scheme.final_norm)) + scheme.extra_param_count(d)
    embedding = image.patch_dim * d + d + d + image.tokens * d
    head = d * classes + classes
    nonembed = block_matrices + block_biases + norm_params + model_norms
    return {
        "total": nonembed + embedding + head,
        "nonembed": nonembed,
        "embedding": embedding,
        "head": head,
        "matmul": block_matrices + image.patch_dim * d + d * classes,
    }


def flops_vit(cfg: ModelConfig) -> float:
    image = vit_settings(cfg)
    d, h, depth, tokens = cfg.width, vit_hidden(cfg), cfg.depth, image.tokens
    per_token = depth * (4 * d * d + 2 * d * h) + image.patches * image.patch_dim * d / tokens + d * cfg.vocab / tokens
    return float(6.0 * per_token + 12.0 * depth * tokens * d)
