"""LayerRoPE: interface, the formula of schemes.md (checked with Python complex numbers), stacking,
explicit depth indices, and its use in the decoder (four sites, computed once per forward)."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from models import build_model
from models.layerrope import LayerRoPE


def test_interface_names_shapes_and_init():
    site = LayerRoPE(8, 5)
    assert [n for n, _ in site.named_parameters()] == ["gamma", "a_mag", "b_mag", "a_rot", "b_rot"]
    assert site.gamma.shape == (8,) and site.a_mag.shape == ()
    assert torch.equal(site.gamma, torch.ones(8))
    assert (site.a_mag.item(), site.b_mag.item(), site.a_rot.item(), site.b_rot.item()) == (0.0, -0.5, 0.0, -0.5)
    assert site().shape == (5, 8)
    stacked = LayerRoPE(8, 5, stack=3)
    assert stacked.gamma.shape == (3, 8) and stacked.b_rot.shape == (3,)
    assert stacked().shape == (3, 5, 8)
    flat = LayerRoPE(8, 5, beta_init=-0.25, mag_slope_init=0.0)
    assert flat.b_mag.item() == 0.0 and flat.b_rot.item() == -0.25
    assert not list(site.state_dict().keys() - {"gamma", "a_mag", "b_mag", "a_rot", "b_rot"})  # buffers are derived


def test_at_init_gamma_scaled_by_l_pow_minus_half_and_rotated_by_l_pow_minus_half_freq():
    d, n_layers, base = 12, 7, 100.0
    site = LayerRoPE(d, n_layers, base=base)
    gamma = torch.randn(d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    site = site.double()
    with torch.no_grad():
        site.gamma.copy_(gamma)
    out = site()
    for layer in range(1, n_layers + 1):
        for j in range(d // 2):
            g = complex(gamma[2 * j].item(), gamma[2 * j + 1].item())
            freq = base ** (-2 * j / d)
            z = g * layer**-0.5 * cmath.exp(1j * layer**-0.5 * freq)
            assert out[layer - 1, 2 * j].item() == pytest.approx(z.real, abs=1e-12)
            assert out[layer - 1, 2 * j + 1].item() == pytest.approx(z.imag, abs=1e-12)


def test_general_parameters_match_the_complex_formula(reference_layerrope):
    site = LayerRoPE(16, 9, base=37.0).double()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in site.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64))
    params = {name: p.detach() for name, p in site.named_parameters()}
    torch.testing.assert_close(site(), reference_layerrope(params, 9, 37.0), rtol=1e-12, atol=1e-12)
    # magnitude is exactly exp(a_mag) * l^b_mag for gamma pairs of modulus 1
    with torch.no_grad():
        site.gamma.fill_(math.sqrt(0.5))
    pair_modulus = site().view(9, 8, 2).norm(dim=-1)
    expected = torch.tensor([math.exp(params["a_mag"].item()) * l ** params["b_mag"].item() for l in range(1, 10)], dtype=torch.float64)
    torch.testing.assert_close(pair_modulus, expected[:, None].expand(9, 8), rtol=1e-12, atol=0)


def test_stacked_members_equal_unstacked_sites():
    stacked = LayerRoPE(8, 4, stack=3)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for param in stacked.parameters():
            param.add_(torch.randn(param.shape, generator=gen))
    out = stacked()
    for k in range(3):
        single = LayerRoPE(8, 4)
        single.load_state_dict({name: p[k] for name, p in stacked.state_dict().items()})
        torch.testing.assert_close(out[k], single(), rtol=1e-6, atol=1e-7)


def test_explicit_depth_indices():
    full = LayerRoPE(8, 6)
    chosen = LayerRoPE(8, 4, depths=[3, 3, 6, 1])
    torch.testing.assert_close(chosen(), full()[[2, 2, 5, 0]])
    torch.testing.assert_close(full(torch.tensor([2.0, 4.0])), full()[[1, 3]])
    with pytest.raises(ValueError, match="positive"):
        LayerRoPE(8, 2, depths=[0, 1])
    with pytest.raises(ValueError, match="even"):
        LayerRoPE(7, 2)


def test_every_parameter_gets_a_gradient():
    site = LayerRoPE(8, 5, stack=2)
    (site() * torch.randn(2, 5, 8)).sum().backward()
    for name, param in site.named_parameters():
        assert param.grad is not None and bool((param.grad != 0).all()), name


def test_decoder_uses_four_sites_computed_once_per_forward(tiny):
    cfg = tiny("layerrope", depth=6)
    model = build_model(cfg, stack=2)
    sites = dict(model.site_gains.sites.items())
    assert sorted(sites) == ["attn_in", "attn_out", "mlp_in", "mlp_out"]
    calls = []
    for site in sites.values():
        site.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    model(torch.zeros(1, cfg.seq_len, dtype=torch.long))
    assert calls == [(2, 6, cfg.width)] * 4
    gains = model.layer_gains()
    torch.testing.assert_close(gains["attn_in"], sites["attn_in"]().detach())
    # at init every layer's read gain is gamma (ones) times l^-0.5 rotated: its pair modulus is sqrt(2) l^-0.5
    modulus = gains["mlp_out"][0].view(6, -1, 2).norm(dim=-1)
    torch.testing.assert_close(modulus, (math.sqrt(2) * torch.arange(1, 7.0) ** -0.5)[:, None].expand_as(modulus))


def test_scheme_options_reach_the_sites(tiny):
    model = build_model(tiny("layerrope", scheme_options={"base": 10.0, "beta_init": -0.25, "mag_slope_init": 0.0}))
    site = model.site_gains.sites["attn_in"]
    assert site.base == 10.0 and site.b_rot[0].item() == -0.25 and site.b_mag[0].item() == 0.0
