"""Naming rules: each family's per-layer norms land on the right site (pure, names only)."""

from __future__ import annotations

import pytest

from sweeper.analysis.gamma.layouts import UnknownLayout, detect_layouts, sample_names


def _names(prefix: str, leaves: list[str], n: int = 3, param: str = "weight") -> list[str]:
    names = [f"{prefix}.{i}.{leaf}.{param}" for i in range(n) for leaf in leaves]
    # projections and the like, which must be ignored
    names += [f"{prefix}.{i}.mlp.down_proj.weight" for i in range(n)] + ["lm_head.weight"]
    return names


def _sites(names: list[str], config: dict | None = None) -> dict[str, list[str]]:
    (stack,) = detect_layouts(names, config)
    return {site: [layers[i] for i in sorted(layers)] for site, layers in stack.sites.items()}


def test_llama_mistral_qwen_mixtral() -> None:
    names = _names("model.layers", ["input_layernorm", "post_attention_layernorm", "self_attn.q_norm"])
    names += ["model.layers.0.block_sparse_moe.experts.0.w1.weight"]
    sites = _sites(names, {"model_type": "mixtral"})
    assert set(sites) == {"attn_in", "mlp_in"}
    assert sites["mlp_in"][2] == "model.layers.2.post_attention_layernorm.weight"
    (stack,) = detect_layouts(names, {"model_type": "mixtral"})
    assert not stack.zero_centered and stack.n_layers == 3


def test_gemma_is_zero_centered_and_gemma2_is_a_sandwich() -> None:
    (gemma1,) = detect_layouts(_names("model.layers", ["input_layernorm", "post_attention_layernorm"]), {"model_type": "gemma"})
    assert gemma1.zero_centered and set(gemma1.sites) == {"attn_in", "mlp_in"}
    leaves = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
    (gemma2,) = detect_layouts(_names("model.layers", leaves), {"model_type": "gemma2"})
    assert gemma2.zero_centered
    assert gemma2.sites["attn_out"][0] == "model.layers.0.post_attention_layernorm.weight"
    assert gemma2.sites["mlp_in"][0] == "model.layers.0.pre_feedforward_layernorm.weight"
    assert gemma2.sites["mlp_out"][0] == "model.layers.0.post_feedforward_layernorm.weight"
    assert any("1 + w" in note for note in gemma2.notes)


def test_gemma3_multimodal_reads_text_config_and_keeps_vision_tower_plain() -> None:
    leaves = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
    names = _names("language_model.model.layers", leaves) + _names("vision_tower.vision_model.encoder.layers", ["layer_norm1", "layer_norm2"])
    stacks = detect_layouts(names, {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})
    by_stack = {s.stack: s for s in stacks}
    assert by_stack["language_model.model.layers"].zero_centered
    assert not by_stack["vision_tower.vision_model.encoder.layers"].zero_centered


def test_olmo2_post_norms() -> None:
    sites = _sites(_names("model.layers", ["post_attention_layernorm", "post_feedforward_layernorm"]), {"model_type": "olmo2"})
    assert set(sites) == {"attn_out", "mlp_out"}


def test_gpt_neox_and_phi_parallel_block() -> None:
    (neox,) = detect_layouts(_names("gpt_neox.layers", ["input_layernorm", "post_attention_layernorm"]), {"model_type": "gpt_neox"})
    assert set(neox.sites) == {"attn_in", "mlp_in"} and any("parallel residual" in n for n in neox.notes)
    (phi,) = detect_layouts(_names("model.layers", ["input_layernorm"]), {"model_type": "phi"})
    assert phi.sites["attn_in"] == phi.sites["mlp_in"]
    assert phi.shared_sites() == {"mlp_in": "attn_in"}


def test_bert_post_ln_including_tf_era_gamma() -> None:
    for param in ("weight", "gamma"):
        sites = _sites(_names("bert.encoder.layer", ["attention.output.LayerNorm", "output.LayerNorm"], param=param))
        assert set(sites) == {"attn_out", "mlp_out"}
        assert sites["mlp_out"][1] == f"bert.encoder.layer.1.output.LayerNorm.{param}"


@pytest.mark.parametrize(
    "prefix, leaves, expected",
    [
        ("transformer.h", ["ln_1", "ln_2"], {"attn_in", "mlp_in"}),
        ("transformer.layer", ["sa_layer_norm", "output_layer_norm"], {"attn_out", "mlp_out"}),
        ("vit.encoder.layer", ["layernorm_before", "layernorm_after"], {"attn_in", "mlp_in"}),
        ("blocks", ["norm1", "norm2"], {"attn_in", "mlp_in"}),
        ("layers", ["attention_norm", "ffn_norm"], {"attn_in", "mlp_in"}),
        ("model.layers", ["input_layernorm", "pre_ff_layernorm"], {"attn_in", "mlp_in"}),
        ("encoder.block", ["layer.0.layer_norm", "layer.1.layer_norm"], {"attn_in", "mlp_in"}),
    ],
)
def test_other_families(prefix: str, leaves: list[str], expected: set[str]) -> None:
    assert set(_sites(_names(prefix, leaves))) == expected


def test_opt_pre_and_bart_post_from_config() -> None:
    names = _names("model.decoder.layers", ["self_attn_layer_norm", "final_layer_norm"])
    assert set(_sites(names, {"model_type": "opt"})) == {"attn_in", "mlp_in"}
    assert set(_sites(names, {"model_type": "opt", "do_layer_norm_before": False})) == {"attn_out", "mlp_out"}
    assert set(_sites(names, {"model_type": "bart"})) == {"attn_out", "mlp_out"}


def test_t5_decoder_skips_cross_attention_norm() -> None:
    names = _names("decoder.block", ["layer.0.layer_norm", "layer.1.layer_norm", "layer.2.layer_norm"])
    sites = _sites(names)
    assert sites["mlp_in"][0] == "decoder.block.0.layer.2.layer_norm.weight"


def test_unknown_layout_carries_the_names() -> None:
    names = ["encoder.stages.0.conv.weight", "encoder.stages.0.bn.weight", "head.weight"]
    with pytest.raises(UnknownLayout) as info:
        detect_layouts(names, {})
    assert info.value.names == names
    assert sample_names(names) == names


def test_sample_names_puts_norms_first_and_limits() -> None:
    names = [f"x.{i}.dense.weight" for i in range(20)] + ["x.0.my_norm.weight"]
    sample = sample_names(names, limit=5)
    assert sample[0] == "x.0.my_norm.weight" and len(sample) == 5
