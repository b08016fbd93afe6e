"""Each scheme's forward pass equals the formula of schemes.md, computed independently (conftest.ref_forward).

Gains are randomised first (they start at one, which would hide a gain in the wrong place), and the
comparison runs in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from models import build_model
from models.registry import scheme_names


def pre(h, branch, norm, g, layer, depth):
    return h + branch(norm(h) * g["in"])


def post(h, branch, norm, g, layer, depth):
    return norm(h + branch(h)) * g["out"]


def peri(h, branch, norm, g, layer, depth):
    return h + norm(branch(norm(h) * g["in"])) * g["out"]


def lns(h, branch, norm, g, layer, depth):
    return h + branch(norm(h) * g["in"] * (1.0 / math.sqrt(layer)))


def deepnet(h, branch, norm, g, layer, depth):
    alpha = (2 * depth) ** 0.25
    return norm(alpha * h + branch(h)) * g["out"]


def mixln(h, branch, norm, g, layer, depth):
    n_post = math.floor(0.25 * depth + 0.5)
    return post(h, branch, norm, g, layer, depth) if layer <= n_post else pre(h, branch, norm, g, layer, depth)


def completep(base_depth, alpha):
    def step(h, branch, norm, g, layer, depth):
        return h + branch(norm(h) * g["in"]) * (depth / base_depth) ** (-alpha)

    return step


def layerrope(h, branch, norm, g, layer, depth):
    return h + g["out"] * branch(norm(h) * g["in"])


# scheme -> (options, reference step, reference extras)
CASES = {
    "pre": ({}, pre, {}),
    "post": ({}, post, {"final_norm": False}),
    "post+final": ({"final_norm": True}, post, {"final_norm": True}),
    "peri": ({}, peri, {"embed_norm": True}),
    "peri-noembed": ({"embed_norm": False}, peri, {"embed_norm": False}),
    "lns": ({}, lns, {}),
    "deepnet": ({}, deepnet, {"final_norm": False}),
    "mixln": ({}, mixln, {}),
    "scaled_init": ({}, pre, {}),
    "completep": ({}, completep(48, 1.0), {}),
    "completep-opts": ({"alpha": 0.5, "base_depth": 2}, completep(2, 0.5), {}),
    "layerrope": ({}, layerrope, {"layerrope_base": 100.0}),
    "layerrope-base": ({"base": 10.0, "beta_init": -0.3}, layerrope, {"layerrope_base": 10.0}),
}


def randomise_gains(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "gain" in name and not name.startswith("site_gains"):
                param.copy_(1.0 + 0.5 * torch.randn(param.shape, generator=gen, dtype=param.dtype))
            elif name.startswith("site_gains"):
                param.add_(0.3 * torch.randn(param.shape, generator=gen, dtype=param.dtype))


def test_every_registered_scheme_has_an_exactness_case():
    covered = {name.split("-")[0].split("+")[0] for name in CASES}
    assert set(scheme_names()) <= covered


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("depth", [6, 10])
def test_forward_matches_independent_formula(case, depth, tiny, reference_forward):
    options, step, extras = CASES[case]
    scheme = case.split("-")[0].split("+")[0]
    cfg = tiny(scheme, depth=depth, scheme_options=options)
    model = build_model(cfg, stack=1, seed=3).double()
    randomise_gains(model, seed=depth)
    idx = torch.randint(0, cfg.vocab, (2, cfg.seq_len), generator=torch.Generator().manual_seed(0))
    got = model(idx)[0]
    expected = reference_forward(model.member_state_dict(0), cfg, step, idx, **extras)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_structure_of_norms(tiny):
    """Which gain parameters exist, per scheme (Post-LN: no final norm; Peri: embedding norm, 4 gains)."""

    def names(scheme, **options):
        model = build_model(tiny(scheme, depth=4, scheme_options=options))
        return {n for n, _ in model.named_parameters() if "gain" in n and not n.startswith("site_gains")}

    assert names("pre") == {f"blocks.{i}.gains.{s}" for i in range(4) for s in ("attn_in", "mlp_in")} | {"final_gain"}
    assert names("post") == {f"blocks.{i}.gains.{s}" for i in range(4) for s in ("attn_out", "mlp_out")}
    assert "final_gain" in names("post", final_norm=True)
    peri = names("peri")
    assert {"embed_gain", "final_gain", "blocks.3.gains.attn_in", "blocks.3.gains.attn_out", "blocks.3.gains.mlp_out"} <= peri
    assert "embed_gain" not in names("peri", embed_norm=False)
    assert names("layerrope") == {"final_gain"}
    assert names("deepnet") == names("post")


@pytest.mark.parametrize(("depth", "n_post"), [(1, 0), (2, 1), (4, 1), (6, 2), (8, 2), (10, 3), (48, 12), (512, 128)])
def test_mixln_split_is_round_half_up_of_quarter_depth(depth, n_post, tiny):
    from models.registry import make_scheme

    scheme = make_scheme("mixln", depth)
    post_layers = [layer for layer in range(1, depth + 1) if scheme.block_sites(layer) == ("attn_out", "mlp_out")]
    assert post_layers == list(range(1, n_post + 1))


def test_unknown_scheme_and_option_errors(tiny):
    with pytest.raises(ValueError, match="unknown scheme 'nope' \\(allowed: .*layerrope"):
        build_model(tiny("nope"))
    with pytest.raises(ValueError, match="unknown key\\(s\\) beta .*allowed: alpha, base_depth"):
        build_model(tiny("completep", scheme_options={"beta": 1}))
    with pytest.raises(ValueError, match="post_fraction"):
        build_model(tiny("mixln", scheme_options={"post_fraction": 2.0}))
    with pytest.raises(ValueError, match="must be even"):
        build_model(tiny("pre", width=12, n_heads=4))
