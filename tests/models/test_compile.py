"""Regional compilation: one compiled block serves every layer (per-layer constants are tensors, not
Python floats), so compiling a 512-layer model costs what compiling one block costs. Checked with
Dynamo's capture (backend "eager": no code generation, seconds)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from models import build_model


@pytest.mark.parametrize(("scheme", "graphs"), [("lns", 1), ("layerrope", 1), ("mixln", 2)])
def test_one_graph_per_block_kind_and_same_result(scheme, graphs, tiny):
    cfg = tiny(scheme, depth=8)
    compiled, plain = build_model(cfg, stack=2, seed=4), build_model(cfg, stack=2, seed=4)
    idx = torch.randint(0, cfg.vocab, (2, cfg.seq_len), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    counters.clear()
    for block in compiled.blocks:
        block.compile(backend="eager")
    got = compiled.member_losses(idx, idx)
    got.sum().backward()
    want = plain.member_losses(idx, idx)
    want.sum().backward()
    assert counters["stats"]["unique_graphs"] == graphs
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled.blocks[0].attn.qkv.grad, plain.blocks[0].attn.qkv.grad)
    torch._dynamo.reset()


def test_rotary_real_form_equals_complex_form_and_leaves_v_alone():
    from models.layers import apply_rotary, rotary_tables

    qkv = torch.randn(3, 10, 3, 2, 8, generator=torch.Generator().manual_seed(0))
    rope = rotary_tables(10, 8, 10000.0, qkv.device)
    complex_form, real_form = apply_rotary(qkv, rope), apply_rotary(qkv, rope._replace(cis=None))
    torch.testing.assert_close(complex_form, real_form)
    assert torch.equal(complex_form[:, :, 2], qkv[:, :, 2])
    assert torch.equal(complex_form[:, 0], qkv[:, 0])  # position 0 does not turn
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert apply_rotary(qkv.bfloat16(), rope).dtype == torch.bfloat16
