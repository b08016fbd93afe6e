"""Parcae's named sizes and their GPT baselines: the official blocks, a 32,768-token vocabulary, and parameter
counts that reproduce the official labels, each checked three ways: the formula of `count_params`, a count
written out here from schemes.md's pieces, and the parameters of the network built on the meta device."""

from __future__ import annotations

import pytest
import torch

from models import count_params, flops_per_token, named_config
from models.families.looped import loop_settings
from models.family import family_of

V = 32768
#: name: (label, width, heads, (prelude, core, coda))
SIZES = {
    "parcae-140M": (140e6, 768, 6, (2, 2, 2)),
    "parcae-370M": (370e6, 1024, 8, (4, 4, 4)),
    "parcae-770M": (770e6, 1280, 10, (6, 6, 6)),
}
#: how far a count may sit from its official label: the labels are round names (370M's budget, 29.6B tokens,
#: is 80 x 370M), and the 370M model counts 4.6% more under the official shapes (its 6 value tables alone
#: are 201M); 140M and 770M are within 3%
LABEL_TOLERANCE = 0.05


def written_out(width: int, blocks: int, looped: bool) -> int:
    """From schemes.md: per block q, k, v, o (4 d^2) and the ReLU^2 MLP (2 x 4 d^2), two Pre-Norm gains; one
    tied V x d table; a V x d value table on every other position counting back from the last; the final
    norm; the looped model adds B (d^2), dt and A (d each) and the prelude norm's gain."""
    d = width
    tables = (blocks + 1) // 2
    count = blocks * (12 * d * d + 2 * d) + V * d + tables * V * d + d
    return count + (d * d + 3 * d if looped else 0)


def built_count(cfg) -> int:
    with torch.device("meta"):
        model = family_of(cfg).build(cfg, stack=1)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("gpt", [False, True])
def test_named_sizes_reproduce_the_official_labels(name, gpt):
    label, width, heads, split = SIZES[name]
    cfg = named_config(f"{name}-gpt" if gpt else name)
    blocks = sum(split)
    assert (cfg.family, cfg.width, cfg.n_heads, cfg.head_dim, cfg.depth) == ("llama" if gpt else "looped", width, heads, 128, blocks)
    assert (cfg.vocab, cfg.seq_len, cfg.mlp_hidden, cfg.norm_eps) == (V, 2048, 4 * width, 1e-5)
    extra = cfg.extra
    assert (extra["mlp"], extra["qk_norm"], extra["value_embeddings"], extra["tie_embeddings"], extra["init"]) == (
        "relu2", True, True, True, "scaled_zero_orthogonal")
    total = count_params(cfg)["total"]
    assert total == written_out(width, blocks, looped=not gpt) == built_count(cfg)
    assert abs(total - label) / label < LABEL_TOLERANCE
    if not gpt:
        s = loop_settings(cfg)
        assert (s.prelude, s.core, s.coda) == split and s.prelude_norm and s.state_init == "like_weights"
        assert (s.loop_sampling, s.mean_loops, s.backprop_loops, s.eval_loops) == ("per_sequence", 8.0, 4, (1, 2, 4, 8))


def test_the_140M_count_is_schemes_md_breakdown():
    """schemes.md: 6 blocks at d768 about 42.5M, the tied embedding 25.2M, 3 value tables 75.5M, about 143M."""
    cfg = named_config("parcae-140M")
    counts = count_params(cfg)
    d = 768
    assert round(6 * 12 * d * d / 1e5) == 425 and round(V * d / 1e5) == 252 and round(3 * V * d / 1e5) == 755
    assert counts["embedding"] == 4 * V * d and counts["head"] == 0  # the tied table and 3 value tables
    assert counts["nonembed"] - 6 * 12 * d * d == 6 * 2 * d + d + (d * d + 3 * d)  # gains, final norm, injection
    assert abs(counts["total"] - 143e6) / 143e6 < 0.01
    assert [len(family_of(named_config(n)).settings(named_config(n)).value_layers(named_config(n).depth))
            for n in SIZES] == [3, 6, 9]


@pytest.mark.parametrize("name", list(SIZES))
def test_flops_count_the_relu2_mlp_and_not_the_lookups(name):
    _, d, _, split = SIZES[name]
    gpt = named_config(f"{name}-gpt")
    blocks, seq = sum(split), gpt.seq_len
    block = 4 * d * d + 2 * d * (4 * d)  # q, k, v, o and the two 4x matrices of ReLU^2
    assert flops_per_token(gpt) == 6 * (blocks * block + d * V) + 12 * blocks * seq * d  # the head, no lookups
    plain = type(gpt)(**{**gpt.to_dict(), "extra": {**gpt.extra, "value_embeddings": False, "tie_embeddings": False}})
    assert flops_per_token(plain) == flops_per_token(gpt)  # value tables and tying change no matmul
    assert count_params(gpt)["matmul"] == blocks * block + d * V
    looped = named_config(name)
    mean, grad = loop_settings(looped).expected_loops()
    passes = mean + 2 * grad
    p, c = split[0] + split[2], split[1]
    want = 6 * (p * block + d * V + d * d) + 2 * c * block * passes + 12 * p * seq * d + 4 * c * seq * d * passes
    assert flops_per_token(looped) == pytest.approx(want, rel=1e-12)
