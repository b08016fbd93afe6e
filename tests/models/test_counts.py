"""Parameter counts and FLOPs: the named ladders against schemes.md, the analytic counts against
built models for every scheme, and the FLOPs formula."""

from __future__ import annotations

import pytest
import torch

from models import build_model, count_params, flops_per_token, named_config, named_configs
from models.config import ModelConfig
from models.llama import LlamaLM
from models.registry import scheme_names

V = 32000


def llama_params(d: int, hidden: int, depth: int, vocab: int = V) -> int:
    """Pre-Norm LLaMA, written out: q,k,v,o + gate,up,down + 2 norm gains per block; untied embeddings; final norm."""
    return depth * (4 * d * d + 3 * d * hidden + 2 * d) + 2 * vocab * d + d


def test_depth_ladder_matches_schemes_md():
    for depth in (48, 64, 96, 128, 192, 256, 384, 512):
        cfg = named_config(f"w128-L{depth}")
        assert (cfg.width, cfg.n_heads, cfg.head_dim, cfg.hidden, cfg.vocab, cfg.depth) == (128, 4, 32, 352, V, depth)
        counts = count_params(cfg)
        assert counts["total"] == llama_params(128, 352, depth)
        assert counts["nonembed"] == counts["total"] - 2 * V * 128
    per_block = 4 * 128 * 128 + 3 * 128 * 352
    assert round(per_block / 1e3, 1) == 200.7  # "about 200.7k per block" (matrices; plus 256 gains)
    assert round(2 * V * 128 / 1e6, 2) == 8.19
    assert round(count_params(named_config("w128-L48"))["total"] / 1e6) == 18
    assert round(count_params(named_config("w128-L512"))["total"] / 1e6) == 111


@pytest.mark.parametrize(("name", "width", "heads", "hidden", "depth", "approx"), [
    ("58M", 512, 8, 1376, 8, 58e6),
    ("130M", 768, 12, 2048, 12, 134e6),
    ("350M", 1024, 16, 2752, 24, 369e6),
    ("1.3B", 2048, 32, 5472, 24, 1.34e9),
])
def test_width_ladder_matches_schemes_md(name, width, heads, hidden, depth, approx):
    cfg = named_config(name)
    assert (cfg.width, cfg.n_heads, cfg.hidden, cfg.depth, cfg.vocab) == (width, heads, hidden, depth, V)
    total = count_params(cfg)["total"]
    assert total == llama_params(width, hidden, depth)
    assert abs(total - approx) / approx < 0.005


@pytest.mark.parametrize("scheme", scheme_names())
@pytest.mark.parametrize("depth", [1, 3, 9])
def test_analytic_count_equals_built_model(scheme, depth):
    cfg = ModelConfig(width=16, n_heads=2, depth=depth, vocab=23, seq_len=8, scheme=scheme)
    counts = count_params(cfg)
    model = build_model(cfg, stack=2)
    assert counts["total"] == model.num_params() == sum(p.numel() for p in model.parameters()) // 2
    assert counts["nonembed"] == counts["total"] - 2 * 23 * 16


@pytest.mark.parametrize("scheme", ["pre", "layerrope", "peri"])
def test_analytic_count_equals_meta_model_at_full_size(scheme):
    cfg = named_config("w128-L96", scheme=scheme)
    with torch.device("meta"):
        model = LlamaLM(cfg, stack=1)
    assert count_params(cfg)["total"] == sum(p.numel() for p in model.parameters())


def test_flops_per_token_formula():
    for name, cfg in named_configs().items():
        if cfg.family != "llama":
            continue  # other families document their own counts
        d, h, depth, seq = cfg.width, cfg.hidden, cfg.depth, cfg.seq_len
        mlp = 3 * d * h  # SwiGLU: gate, up, down
        if cfg.extra.get("mlp") == "relu2":  # the Parcae baselines: up, down of 4 d
            assert h == 4 * d
            mlp = 2 * d * h
        matmul_params = depth * (4 * d * d + mlp) + d * cfg.vocab
        assert flops_per_token(cfg) == 6 * matmul_params + 12 * depth * seq * d, name
        assert count_params(cfg)["matmul"] == matmul_params
    cfg = named_config("w128-L48")
    assert flops_per_token(cfg, seq_len=1024) - flops_per_token(cfg) == 12 * 48 * (1024 - 256) * 128


def test_named_config_overrides_and_errors():
    cfg = named_config("tiny", scheme="lns", seq_len=64)
    assert cfg.scheme == "lns" and cfg.seq_len == 64 and cfg.width == 64
    with pytest.raises(ValueError, match="unknown model size 'huge'.*w128-L48"):
        named_config("huge")
    assert list(named_configs())[:8] == [f"w128-L{d}" for d in (48, 64, 96, 128, 192, 256, 384, 512)]


def test_counts_names_and_registry_do_not_import_torch():
    """`sweeper validate` / `sweeper models` rely on these answering without torch."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from models import ModelConfig, count_params, flops_per_token, named_config\n"
        "from models.registry import scheme_names, make_scheme\n"
        "for s in scheme_names(): count_params(named_config('w128-L48', scheme=s)); make_scheme(s, 4)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
