"""The ViT: Pre-LN against an independent reference, LayerRoPE on the LayerNorm gain (centring and bias
kept), drop-path, every scheme, counts, the stack dimension."""

from __future__ import annotations

import math

import pytest
import torch

from models.families.vit import count_vit, flops_vit
from models.registry import scheme_names
from tests.helpers import perturb
from tests.models.small_vit import make, vit_config


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))


def ref_layer_norm(x: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gain + bias


def reference_pre_vit(sd: dict[str, torch.Tensor], cfg, images: torch.Tensor) -> torch.Tensor:
    """ViT / DeiT written out for one member: patches by explicit slicing, explicit softmax attention."""
    batch, p, d, heads, eps = images.shape[0], 4, cfg.width, cfg.n_heads, cfg.norm_eps
    n = images.shape[-1] // p
    patches = torch.stack(
        [images[:, :, i * p : (i + 1) * p, j * p : (j + 1) * p].reshape(batch, -1) for i in range(n) for j in range(n)], dim=1
    )
    x = patches @ sd["patch_embed"] + sd["patch_bias"]
    h = torch.cat([sd["cls_token"].expand(batch, 1, d), x], dim=1) + sd["pos_embed"]
    hd = d // heads
    for layer in range(cfg.depth):
        w = {k.split(f"blocks.{layer}.", 1)[1]: v for k, v in sd.items() if k.startswith(f"blocks.{layer}.")}
        y = ref_layer_norm(h, w["gains.attn_in"], w["norm_bias.attn_in"], eps)
        qkv = y @ w["attn.qkv"] + w["attn.qkv_bias"]
        q, k, v = (qkv[..., i * d : (i + 1) * d].reshape(batch, -1, heads, hd) for i in range(3))
        att = torch.softmax(torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd), dim=-1)
        h = h + torch.einsum("bhts,bshd->bthd", att, v).reshape(batch, -1, d) @ w["attn.o"] + w["attn.o_bias"]
        y = ref_layer_norm(h, w["gains.mlp_in"], w["norm_bias.mlp_in"], eps)
        z = y @ w["mlp.fc1"] + w["mlp.fc1_bias"]
        z = 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))
        h = h + z @ w["mlp.fc2"] + w["mlp.fc2_bias"]
    cls = ref_layer_norm(h[:, 0], sd["final_gain"], sd["final_bias"], eps)
    return cls @ sd["head"] + sd["head_bias"]


def test_pre_norm_vit_matches_the_reference(images):
    cfg = vit_config("pre")
    model = perturb(make(cfg, stack=2, dtype=torch.float64), seed=1)
    logits = model(images.double())
    assert logits.shape == (2, 4, 5)
    for k in range(2):
        want = reference_pre_vit(model.member_state_dict(k), cfg, images.double())
        torch.testing.assert_close(logits[k], want, rtol=1e-10, atol=1e-10)


def test_layerrope_conditions_the_layernorm_gain_and_keeps_centring_and_bias(images):
    cfg = vit_config("layerrope", depth=4)
    model = perturb(make(cfg, stack=2, dtype=torch.float64), seed=2, size=0.3)
    assert sorted(model.site_gains.sites) == ["attn_in", "mlp_in"]  # read sites only: the LayerNorms' gains
    assert all(torch.all(site.b_mag == 0.0) for site in make(cfg).site_gains.sites.values())
    names = {n for n, _ in model.named_parameters()}
    assert "blocks.2.norm_bias.attn_in" in names and "blocks.2.norm_bias.mlp_in" in names
    assert not any(".gains." in n for n in names)  # no per-block gain vectors: LayerRoPE provides them
    captured: dict[tuple[int, str], torch.Tensor] = {}
    for block in model.blocks:
        block.register_forward_pre_hook(lambda mod, args: captured.__setitem__((mod.layer, "h"), args[0]))
        block.attn.register_forward_pre_hook(lambda mod, args, b=block: captured.__setitem__((b.layer, "attn_x"), args[0]))
    model(images.double())
    gains = model.site_gains()["attn_in"]  # [K, L, d]
    eps = cfg.norm_eps
    for layer in range(1, 5):
        h, x = captured[(layer, "h")], captured[(layer, "attn_x")]
        bias = model.blocks[layer - 1].norm_bias["attn_in"]
        centred = (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + eps)
        want = centred * gains[:, layer - 1].unsqueeze(1) + bias.unsqueeze(1)
        torch.testing.assert_close(x, want, rtol=1e-10, atol=1e-10)
        # centring: undoing the gain and the bias leaves a zero-mean, unit-variance vector
        undone = (x - bias.unsqueeze(1)) / gains[:, layer - 1].unsqueeze(1)
        torch.testing.assert_close(undone.mean(-1), torch.zeros_like(undone.mean(-1)), rtol=0, atol=1e-9)
    assert set(model.layer_gains()) == {"attn_in", "mlp_in"}


def test_layerrope_write_gains_can_be_switched_on(images):
    cfg = vit_config("layerrope", scheme_options={"write_gains": True})
    model = make(cfg)
    assert sorted(model.site_gains.sites) == ["attn_in", "attn_out", "mlp_in", "mlp_out"]
    assert count_vit(cfg)["total"] == model.num_params()


def test_drop_path_is_shared_by_members_and_off_in_eval(images):
    cfg = vit_config("pre", depth=4, drop_path=0.5)
    model = perturb(make(cfg, stack=3), seed=3)
    with torch.no_grad():
        for p in model.parameters():  # make the three members identical
            p.copy_(p[:1].expand_as(p))
    torch.manual_seed(0)
    train_out = model(images)
    assert torch.equal(train_out[0], train_out[1]) and torch.equal(train_out[1], train_out[2])
    model.eval()
    eval_a, eval_b = model(images), model(images)
    assert torch.equal(eval_a, eval_b)
    assert not torch.allclose(train_out, eval_a)
    rates = [b.drop_rate for b in model.blocks]
    assert rates == pytest.approx([0.0, 0.5 / 3, 1.0 / 3, 0.5])


def test_drop_path_zeroes_whole_images_of_a_branch():
    cfg = vit_config("pre", depth=2, drop_path=0.9)
    model = make(cfg)
    block = model.blocks[1]
    keep = model._keep_masks(block, batch=64, tokens=17, like=torch.zeros(1))
    assert keep is not None
    mask = keep[0].view(64, 17)
    assert torch.all(mask == mask[:, :1])  # one decision per image, for all its tokens
    values = torch.unique(mask).tolist()
    assert 0.0 in values and all(v == 0.0 or v == pytest.approx(10.0) for v in values)


@pytest.mark.parametrize("scheme", scheme_names())
def test_every_scheme_builds_trains_and_counts(scheme, images):
    cfg = vit_config(scheme, drop_path=0.1)
    model = make(cfg, stack=2)
    loss = model.member_losses(images, torch.tensor([0, 1, 2, 3]))
    assert loss.shape == (2,) and torch.isfinite(loss).all()
    loss.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert count_vit(cfg)["total"] == model.num_params()
    decayed = {s.name for s in model.param_specs() if s.weight_decay}
    assert "patch_embed" in decayed and "blocks.0.mlp.fc1" in decayed and "head" in decayed
    assert not any(n.endswith(("bias", "_token", "pos_embed")) for n in decayed)


def test_soft_targets_and_label_smoothing(images):
    model = perturb(make(vit_config("pre"), dtype=torch.float64), seed=4)
    labels = torch.tensor([0, 1, 2, 3])
    logits = model(images.double())[0].float()
    onehot = torch.nn.functional.one_hot(labels, 5).float()
    hard = model.member_losses(images.double(), labels)
    soft = model.member_losses(images.double(), onehot)
    torch.testing.assert_close(hard, soft)
    smoothed = model.member_losses(images.double(), labels, label_smoothing=0.1)
    want = -(torch.log_softmax(logits, -1) * (onehot * 0.9 + 0.1 / 5)).sum(-1).mean()
    torch.testing.assert_close(smoothed[0], want, rtol=1e-6, atol=1e-6)


def test_stack_members_equal_separate_models(images):
    cfg = vit_config("peri")
    singles = [perturb(make(cfg, seed=k), seed=30 + k) for k in range(2)]
    stacked = make(cfg, stack=2)
    for k, single in enumerate(singles):
        stacked.load_member_state_dict(k, single.member_state_dict(0))
    labels = torch.tensor([4, 3, 2, 1])
    losses = stacked.member_losses(images, labels)
    losses.sum().backward()
    for k, single in enumerate(singles):
        loss = single.member_losses(images, labels)
        loss.backward()
        torch.testing.assert_close(losses[k], loss[0], rtol=1e-5, atol=1e-6)
        for name, param in stacked.named_parameters():
            torch.testing.assert_close(param.grad[k], dict(single.named_parameters())[name].grad[0], rtol=1e-4, atol=1e-6)


def test_flops_per_token_formula():
    cfg = vit_config("pre")
    d, h, depth, tokens, patches = 32, 128, 3, 17, 16
    want = 6 * (depth * (4 * d * d + 2 * d * h) + patches * 48 * d / tokens + d * 5 / tokens) + 12 * depth * tokens * d
    assert flops_vit(cfg) == pytest.approx(want)


@pytest.mark.parametrize(("extra", "message"), [
    ({"image_size": 18}, "multiple of patch_size"),
    ({"drop_path": 1.5}, "drop_path"),
    ({"patches": 4}, "unknown key"),
])
def test_bad_settings_are_one_line_errors(extra, message):
    with pytest.raises(ValueError, match=message):
        make(vit_config("pre", **extra))


def test_wrong_image_shape_is_a_clear_error():
    model = make(vit_config("pre"))
    with pytest.raises(ValueError, match=r"expected \(3, 16, 16\)"):
        model(torch.zeros(2, 3, 32, 32))


def test_weights_are_drawn_truncated_normal_seed_stable_and_equal_across_members():
    wide = make(vit_config("pre", width=64), stack=2, seed=7)  # DeiT's default: std 0.02, cut at +-2 (absolute)
    again = make(vit_config("pre", width=64), stack=2, seed=7)
    for (name, p), q in zip(wide.named_parameters(), again.parameters()):
        assert torch.equal(p, q) and torch.equal(p[0], p[1]), name  # seed-stable, the same in every member
    fc1 = wide.blocks[0].mlp.fc1[0].detach()
    assert float(fc1.abs().max()) <= 2.0 and float(fc1.std()) == pytest.approx(0.02, rel=0.05)
    cut = make(vit_config("pre", width=64, init_trunc=0.04), seed=7)  # a cut at 2 sigma does cut
    weights = torch.cat([cut.blocks[0].mlp.fc1[0].flatten(), cut.blocks[1].attn.qkv[0].flatten(), cut.head[0].flatten()]).detach()
    assert float(weights.abs().max()) <= 0.04
    assert float(weights.std()) == pytest.approx(0.02 * 0.8796, rel=0.03)  # std of N(0,1) cut at +-2: 0.8796
    plain = make(vit_config("pre", width=64, init="normal"), seed=7)
    assert float(plain.blocks[0].mlp.fc1[0].std()) == pytest.approx(0.02, rel=0.05)
    assert not torch.equal(plain.blocks[0].mlp.fc1, cut.blocks[0].mlp.fc1)
    with pytest.raises(ValueError, match="model.extra.init"):
        make(vit_config("pre", init="xavier"))
