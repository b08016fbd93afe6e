"""The memory model's optimizer state (`trials.footprint`): AdamW's two moments, Muon's one momentum buffer per
matrix, against the bytes a real stacked optimizer holds."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from models import ModelConfig, build_model, count_params
from trials.data.cache import digest
from trials.footprint import TrialShape, footprint, shape_key
from trials.muon import MuonRule, StackedMuon, is_muon_param
from trials.optim import StackedAdamW


def held_bytes(model: torch.nn.Module, opt: StackedAdamW | StackedMuon) -> int:
    """Weights + gradients + optimizer state (per-member LRs aside), as allocated."""
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [t for n, t in opt.state_tensors().items() if n != "lrs"]
    return sum(t.numel() * t.element_size() for t in tensors)


PARCAE_BLOCKS = {"mlp": "relu2", "qk_norm": True, "value_embeddings": True, "tie_embeddings": True,
                 "init": "scaled_zero_orthogonal"}


@pytest.mark.parametrize("family", ["llama", "looped", "vit", "parcae"])
def test_state_bytes_of_adamw_and_muon(family: str) -> None:
    cfg = {
        "llama": ModelConfig(scheme="layerrope", width=32, depth=2, n_heads=2, vocab=48, seq_len=16),
        "looped": ModelConfig(family="looped", scheme="pre", width=32, depth=3, n_heads=2, vocab=48, seq_len=16,
                              extra={"prelude": 1, "core": 1, "coda": 1}),
        "parcae": ModelConfig(family="looped", scheme="layerrope", width=32, depth=3, n_heads=2, vocab=48, seq_len=16,
                              mlp_hidden=128, extra={"prelude": 1, "core": 1, "coda": 1, "prelude_norm": True,
                                                     **PARCAE_BLOCKS}),
        "vit": ModelConfig(family="vit", scheme="layerrope", depth=2, vocab=5, seq_len=17, width=32, n_heads=2,
                           extra={"image_size": 16, "patch_size": 4}),
    }[family]
    model = build_model(cfg, stack=1, seed=0)
    n = sum(p.numel() for p in model.parameters())
    n_muon = sum(s.param.numel() for s in model.param_specs() if is_muon_param(s))
    assert 0 < n_muon < n
    assert count_params(cfg)["hidden"] == n_muon  # what the planner's memory model gives Muon (sweeper.search.memory)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    shape = TrialShape(family=cfg.family, params=n, params_matmul=n_muon, width=32, layers=2, vocab=cfg.vocab, seq_len=16,
                       micro_sequences=4, bf16=False, cuda=False, fused_loss=False)
    adamw = StackedAdamW(model.param_specs(), [1e-3])
    assert held_bytes(model, adamw) == footprint(shape).per_member["weights_grads_adam"] == 16 * n
    muon = StackedMuon(model.param_specs(), [1e-3], rule=MuonRule())
    with_muon = replace(shape, params_muon=n_muon)
    assert held_bytes(model, muon) == footprint(with_muon).per_member["weights_grads_adam"] == 16 * n - 4 * n_muon
    assert footprint(with_muon).total(4) < footprint(shape).total(4)


def test_measured_peak_keys_of_adamw_shapes_are_unchanged() -> None:
    shape = TrialShape(family="llama", params=10, params_matmul=8, width=4, layers=1, vocab=8, seq_len=4,
                       micro_sequences=1, bf16=False, cuda=False, fused_loss=True)
    # the key digest(...) of the fields before `params_muon` existed, computed independently
    before = {k: v for k, v in shape.__dict__.items() if k != "params_muon"}
    assert shape_key(shape, "pre", False) == digest(sorted(before.items()), "pre", False)
    assert shape_key(replace(shape, params_muon=6), "pre", False) != shape_key(shape, "pre", False)
