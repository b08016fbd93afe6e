"""Every scheme runs forward and backward and learns: a few AdamW steps on a fixed batch lower each member's loss."""

from __future__ import annotations

import pytest
import torch

from models import build_model
from models.registry import scheme_names


@pytest.mark.parametrize("scheme", scheme_names())
def test_trains_a_few_steps_with_falling_loss(scheme, tiny):
    torch.manual_seed(0)
    cfg = tiny(scheme, depth=4, vocab=64, seq_len=16)
    model = build_model(cfg, stack=2, seed=0)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab, (4, cfg.seq_len + 1), generator=gen)
    x, y = tokens[:, :-1], tokens[:, 1:]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    history = []
    for step in range(12):
        optimizer.zero_grad(set_to_none=True)
        losses = model.member_losses(x, y)
        losses.sum().backward()
        if step == 0:
            for name, param in model.named_parameters():
                assert param.grad is not None and torch.isfinite(param.grad).all(), name
                assert param.grad.abs().sum() > 0, f"{name} gets no gradient"
        optimizer.step()
        history.append(losses.detach())
    first, last = history[0], history[-1]
    assert torch.isfinite(last).all()
    assert (last < first - 0.5).all(), f"{scheme}: loss {first.tolist()} -> {last.tolist()}"


def test_bf16_autocast_forward_backward(tiny):
    cfg = tiny("layerrope", depth=2)
    model = build_model(cfg, stack=2)
    x = torch.randint(0, cfg.vocab, (2, cfg.seq_len))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model.member_losses(x, x)
    assert losses.dtype == torch.float32 and torch.isfinite(losses).all()
    losses.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("scheme", ["pre", "deepnet", "completep", "layerrope"])
def test_residual_stream_stays_fp32_under_autocast(scheme, tiny):
    """The fused residual add (baddbmm) must not round the residual stream to bf16 under autocast."""
    cfg = tiny(scheme, depth=2)
    model = build_model(cfg, stack=2)
    seen = []
    for block in model.blocks:
        block.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.zeros(1, cfg.seq_len, dtype=torch.long))
    assert seen == [torch.float32, torch.float32]
