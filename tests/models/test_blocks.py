"""The decoder's block options (Parcae's blocks): each changes the network as specified (against a reference
written here from the formulas), the defaults are today's network bit for bit, every scheme still wires the
blocks, the stack dimension, the fused loss and regional compilation keep working, and bad values are
one-line errors naming the key."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import Tensor
from torch._dynamo.utils import counters

from models import build_model, count_params
from models.config import ModelConfig
from models.family import get_family
from models.registry import scheme_names
from tests.helpers import perturb
from tests.models.conftest import ref_norm, ref_rope

ALL_OPTIONS = {"mlp": "relu2", "qk_norm": True, "value_embeddings": True, "tie_embeddings": True}
ONE_AT_A_TIME = [{"mlp": "relu2"}, {"qk_norm": True}, {"value_embeddings": True}, {"tie_embeddings": True}, ALL_OPTIONS]


def config(scheme: str = "pre", depth: int = 3, **extra) -> ModelConfig:
    return ModelConfig(scheme=scheme, width=16, n_heads=2, depth=depth, vocab=37, seq_len=8, extra=extra)


def tokens(vocab: int = 37, batch: int = 2, seq: int = 9) -> Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(5))


# ---- a reference Pre-Norm decoder with the options, from the formulas ------------------------------------


def ref_attention(x: Tensor, wqkv: Tensor, wo: Tensor, heads: int, base: float, eps: float, qk_norm: bool,
                  value: Tensor | None) -> Tensor:
    batch, seq, d = x.shape
    hd = d // heads
    qkv = x @ wqkv
    q, k, v = (qkv[..., i * d : (i + 1) * d].reshape(batch, seq, heads, hd) for i in range(3))
    if qk_norm:  # per head, over the head dimension, no gain, before RoPE
        q, k = ref_norm(q, eps), ref_norm(k, eps)
    q, k = ref_rope(q, base), ref_rope(k, base)
    if value is not None:  # the token's row of the value table, added to the values
        v = v + value.reshape(batch, seq, heads, hd)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    future = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return torch.einsum("bhts,bshd->bthd", weights, v).reshape(batch, seq, d) @ wo


def ref_logits(sd: dict[str, Tensor], cfg: ModelConfig, idx: Tensor) -> Tensor:
    extra, eps = cfg.extra, cfg.norm_eps
    h = sd["tok_emb"][idx]
    for i in range(cfg.depth):
        p = f"blocks.{i}."
        value = sd[f"value_embeds.{i + 1}"][idx] if f"value_embeds.{i + 1}" in sd else None
        x = ref_norm(h, eps) * sd[p + "gains.attn_in"]
        h = h + ref_attention(x, sd[p + "attn.qkv"], sd[p + "attn.o"], cfg.n_heads, cfg.rope_base, eps,
                              extra.get("qk_norm", False), value)
        x = ref_norm(h, eps) * sd[p + "gains.mlp_in"]
        if extra.get("mlp") == "relu2":
            hidden = torch.relu(x @ sd[p + "mlp.up"]) ** 2
        else:
            gate, up = (x @ sd[p + "mlp.gate_up"]).chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        h = h + hidden @ sd[p + "mlp.down"]
    h = ref_norm(h, eps) * sd["final_gain"]
    return h @ (sd["tok_emb"].T if extra.get("tie_embeddings") else sd["head"])


@pytest.mark.parametrize("extra", ONE_AT_A_TIME)
def test_each_option_is_the_network_of_its_formula(extra):
    cfg = config(depth=5, **extra)
    model = perturb(build_model(cfg, stack=2, dtype=torch.float64, seed=1), seed=2)
    idx = tokens()
    for k in range(2):
        sd = model.member_state_dict(k)
        torch.testing.assert_close(model(idx)[k], ref_logits(sd, cfg, idx), rtol=1e-10, atol=1e-10)


def test_the_options_shape_the_parameters():
    d, depth = 16, 5
    model = build_model(config(depth=depth, **ALL_OPTIONS), stack=2)
    shapes = {name: tuple(p.shape[1:]) for name, p in model.named_parameters()}
    assert shapes["blocks.0.mlp.up"] == (d, 4 * d) and shapes["blocks.0.mlp.down"] == (4 * d, d)  # ReLU^2 of 4 d
    assert not any("gate" in name for name in shapes) and "head" not in shapes  # no gate; the head is tok_emb
    # value tables on alternating positions counted back from the last: 5, 3, 1 of 5; 6, 4, 2 of 6 (1-based)
    assert sorted(n for n in shapes if n.startswith("value_embeds.")) == ["value_embeds.1", "value_embeds.3", "value_embeds.5"]
    assert shapes["value_embeds.3"] == (37, d)  # vocabulary x kv-width (= d: no grouped-query attention)
    six = build_model(config(depth=6, value_embeddings=True))
    assert sorted(six.value_embeds) == ["2", "4", "6"]
    assert torch.equal(model.head, model.tok_emb.transpose(1, 2))
    kinds = {s.name: s.kind for s in model.param_specs()}
    assert kinds["blocks.0.mlp.up"] == "hidden" and kinds["value_embeds.5"] == kinds["tok_emb"] == "embedding"
    assert sum(p.numel() for p in model.parameters()) // 2 == count_params(model.cfg)["total"]


def test_qk_norm_normalises_queries_and_keys_not_values(monkeypatch):
    cfg = ModelConfig(**{**config(depth=1, qk_norm=True).to_dict(), "norm_eps": 1e-30})
    model = build_model(cfg, seed=3, dtype=torch.float64)
    seen: dict[str, Tensor] = {}
    original = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.update(q=q, k=k, v=v)
        return original(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model(tokens())

    def rms(t: Tensor) -> Tensor:
        return t.pow(2).mean(dim=-1).sqrt()

    # RoPE turns pairs, so every head's query and key keep the RMS 1 of the norm; the values are not normalised
    for name in ("q", "k"):
        torch.testing.assert_close(rms(seen[name]), torch.ones_like(rms(seen[name])), rtol=1e-12, atol=1e-12)
    assert (rms(seen["v"]) < 0.5).all()


def test_tied_head_gets_the_gradient_of_both_uses_and_the_fused_loss_agrees():
    from trials.fused_loss import member_losses as fused_member_losses

    cfg = config(**ALL_OPTIONS)
    idx = tokens()
    x, y = idx[:, :-1], idx[:, 1:]
    plain, fused = (perturb(build_model(cfg, stack=2, seed=4), seed=5) for _ in range(2))
    want = plain.member_losses(x, y)
    want.sum().backward()
    got = fused_member_losses(fused, x, y)
    got.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (name, a), (_, b) in zip(plain.named_parameters(), fused.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)
    # the gradient of the tied table is the embedding's plus the head's
    untied = perturb(build_model(config(**{**ALL_OPTIONS, "tie_embeddings": False}), stack=2, seed=4), seed=5)
    with torch.no_grad():
        untied.head.copy_(untied.tok_emb.transpose(1, 2))
        for name, param in untied.named_parameters():
            if name != "head":
                param.copy_(dict(plain.named_parameters())[name])
    untied.member_losses(x, y).sum().backward()
    torch.testing.assert_close(plain.tok_emb.grad, untied.tok_emb.grad + untied.head.grad.transpose(1, 2), rtol=1e-5, atol=1e-7)


# ---- defaults: today's network, bit for bit ---------------------------------------------------------------

#: sha256 of the initial parameters (name, then bytes, in parameter order) and the losses of two members, as
#: the code before the block options computed them (commit da44d17): width 32, 2 heads, 4 blocks (looped
#: 1/2/1), vocab 48, seed 3, the tokens below, the looped model at 3 loops
BEFORE = {
    ("llama", "pre"): ("60c7550b1ada0f7b81502525a9fab1307e044299727d06c7f17f7faa5b5ef0ff", 3.86515736579895),
    ("llama", "layerrope"): ("d6b45594565048b518a954e9abcfbb11d7637e60fc27654d8c90922900720d47", 3.8568735122680664),
    ("looped", "pre"): ("501c572e78fae36296115c8d63a97614b70503219272ffd7dedf45e421548e60", 3.890774965286255),
    ("looped", "layerrope"): ("9a5be1fe5defc51f8ca09973b7f090bb46877e8c596dfd5c4707b5977e45b265", 3.87744402885437),
}


@pytest.mark.parametrize(("family", "scheme"), list(BEFORE))
def test_defaults_are_todays_network_bit_for_bit(family, scheme):
    extra = {"prelude": 1, "core": 2, "coda": 1} if family == "looped" else {}
    cfg = ModelConfig(family=family, scheme=scheme, width=32, n_heads=2, depth=4, vocab=48, seq_len=8, extra=extra)
    defaults = {k: v for k, v in get_family(family).options.defaults().items() if k not in ("prelude", "core", "coda")}
    spelled = ModelConfig(**{**cfg.to_dict(), "extra": {**extra, **defaults}})
    idx = torch.randint(0, 48, (3, 9), generator=torch.Generator().manual_seed(7))
    losses = []
    for c in (cfg, spelled):
        model = build_model(c, stack=2, seed=3)
        digest = hashlib.sha256()
        for name, param in model.named_parameters():
            digest.update(name.encode())
            digest.update(param.detach().contiguous().numpy().tobytes())
        assert digest.hexdigest() == BEFORE[family, scheme][0]
        loss = model.member_losses(idx[:, :-1], idx[:, 1:], **({"loops": 3} if family == "looped" else {}))
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1])  # spelling the defaults out changes nothing
    # the same float32 loss as before (exactly, on the machine that recorded it; a CPU with other kernels may
    # round the last bits of a matmul differently)
    torch.testing.assert_close(losses[0], torch.full((2,), BEFORE[family, scheme][1]), rtol=1e-6, atol=0)


# ---- every scheme, the stack, compilation ------------------------------------------------------------------


@pytest.mark.parametrize("scheme", scheme_names())
def test_every_scheme_wires_the_options_and_counts_them(scheme):
    cfg = config(scheme, depth=4, **ALL_OPTIONS)
    model = build_model(cfg, stack=2)
    idx = tokens()
    loss = model.member_losses(idx[:, :-1], idx[:, 1:])
    loss.sum().backward()
    assert torch.isfinite(loss).all() and all(torch.isfinite(p.grad).all() for p in model.parameters())
    counts = count_params(cfg)
    assert counts["total"] == model.num_params() == sum(p.numel() for p in model.parameters()) // 2
    assert counts["head"] == 0 and counts["embedding"] == 37 * 16 * (1 + 2)  # tied table + 2 value tables
    assert counts["nonembed"] == counts["total"] - counts["embedding"]
    # with the options off, the same scheme's blocks wire the same gains
    plain = build_model(config(scheme, depth=4), stack=2)
    assert {n for n, _ in plain.named_parameters() if ".gains." in n} == {n for n, _ in model.named_parameters() if ".gains." in n}


@pytest.mark.parametrize("extra", ONE_AT_A_TIME + [{**ALL_OPTIONS, "init": "scaled_zero_orthogonal"}])
def test_stacked_members_equal_separate_models_with_each_option(extra):
    cfg = config(**extra)
    singles = [perturb(build_model(cfg, seed=k), seed=30 + k) for k in range(2)]
    stacked = build_model(cfg, stack=2)
    for k, single in enumerate(singles):
        stacked.load_member_state_dict(k, single.member_state_dict(0))
    idx = tokens()
    x, y = idx[:, :-1], idx[:, 1:]
    losses = stacked.member_losses(x, y)
    losses.sum().backward()
    for k, single in enumerate(singles):
        loss = single.member_losses(x, y)
        loss.backward()
        torch.testing.assert_close(losses[k], loss[0], rtol=1e-5, atol=1e-6)
        grads = dict(single.named_parameters())
        for name, param in stacked.named_parameters():
            torch.testing.assert_close(param.grad[k], grads[name].grad[0], rtol=1e-4, atol=1e-6, msg=name)


def test_regional_compilation_with_every_option():
    cfg = config("layerrope", depth=4, **ALL_OPTIONS)
    compiled, plain = build_model(cfg, stack=2, seed=4), build_model(cfg, stack=2, seed=4)
    idx = tokens()
    torch._dynamo.reset()
    counters.clear()
    for block in compiled.blocks:
        block.compile(backend="eager")
    got = compiled.member_losses(idx, idx)
    got.sum().backward()
    want = plain.member_losses(idx, idx)
    want.sum().backward()
    assert counters["stats"]["unique_graphs"] == 2  # blocks with and without a value table
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled.value_embeds["4"].grad, plain.value_embeds["4"].grad)
    torch._dynamo.reset()


# ---- the init rules ----------------------------------------------------------------------------------------


def gram(w: Tensor) -> Tensor:
    """W W^T for a wide matrix, W^T W for a tall one."""
    return w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w


@pytest.mark.parametrize("mlp", ["relu2", "swiglu"])
def test_scaled_zero_orthogonal_init(mlp):
    d, depth = 32, 3
    cfg = ModelConfig(width=d, n_heads=2, depth=depth, vocab=400, seq_len=8, init_std=0.05,
                      extra={"init": "scaled_zero_orthogonal", "mlp": mlp, "value_embeddings": True})
    s = math.sqrt(2 / (5 * d))  # the small-init std; init_std is not used
    model = build_model(cfg, stack=2, seed=6)
    sd = model.member_state_dict(0)
    assert all(torch.equal(v, model.member_state_dict(1)[n]) for n, v in sd.items())  # one draw, every member
    hidden = 4 * d if mlp == "relu2" else model.blocks[0].mlp.hidden
    for block in model.blocks:
        assert torch.count_nonzero(block.attn.o) == 0 and torch.count_nonzero(block.mlp.down) == 0
        inputs = [block.weight_view(n)[0] for n in ("q", "k", "v", *block.mlp_inputs())]
        assert len(inputs) == (5 if mlp == "swiglu" else 4)
        for w in inputs:  # scaled (semi-)orthogonal: every singular value s * sqrt(max(in, out)), entries of RMS s
            side = min(w.shape)
            torch.testing.assert_close(gram(w), s * s * max(w.shape) * torch.eye(side), rtol=0, atol=1e-5)
            assert w.pow(2).mean().sqrt().item() == pytest.approx(s, rel=1e-5)
        assert max(inputs[-1].shape) == hidden
    for name in ("tok_emb", "head", "value_embeds.1", "value_embeds.3"):  # N(0, s) truncated at 3 s
        w = sd[name]
        assert w.abs().max().item() <= 3 * s
        assert w.std().item() == pytest.approx(0.9866 * s, rel=0.03)  # the std of a normal cut at 3 sigma
    again, other = build_model(cfg, seed=6).member_state_dict(0), build_model(cfg, seed=7).member_state_dict(0)
    assert all(torch.equal(v, again[n]) for n, v in sd.items())
    assert not torch.equal(sd["blocks.0.attn.qkv"], other["blocks.0.attn.qkv"])


def test_init_composes_with_the_schemes_init_multipliers_or_is_refused():
    extra = {"init": "scaled_zero_orthogonal"}
    base, deep = build_model(config("pre", **extra), seed=2), build_model(config("deepnet", **extra), seed=2)
    beta = (8 * 3) ** -0.25
    for a, b in zip(base.blocks, deep.blocks):
        torch.testing.assert_close(b.weight_view("v"), a.weight_view("v") * beta)  # DeepNet's beta on v, up
        torch.testing.assert_close(b.weight_view("up"), a.weight_view("up") * beta)
        assert torch.equal(b.weight_view("q"), a.weight_view("q"))
    message = r"^model.extra.init: scaled_zero_orthogonal sets down, o to zero, so scheme 'scaled_init' .* use init: normal"
    with pytest.raises(ValueError, match=message):
        build_model(config("scaled_init", **extra))
    with pytest.raises(ValueError, match=message):
        count_params(config("scaled_init", **extra))
    count_params(config("scaled_init"))  # the normal init keeps the scheme


@pytest.mark.parametrize(("extra", "message"), [
    ({"mlp": "gelu"}, r"^model.extra.mlp for the llama family must be one of swiglu, relu2, got 'gelu'$"),
    ({"qk_norm": "yes"}, r"^model.extra.qk_norm for the llama family must be true or false, got 'yes'$"),
    ({"value_embeddings": 1}, "value_embeddings .* must be true or false"),
    ({"tie_embeddings": None}, "tie_embeddings .* must be true or false"),
    ({"init": "xavier"}, "init .* must be one of normal, scaled_zero_orthogonal"),
    ({"prelude_norm": True}, r"unknown key\(s\) prelude_norm"),  # looped only
])
def test_bad_options_are_one_line_errors_naming_the_key(extra, message):
    with pytest.raises(ValueError, match=message):
        get_family("llama").validate_extra(extra)
    with pytest.raises(ValueError, match=message):
        build_model(config(**extra))
