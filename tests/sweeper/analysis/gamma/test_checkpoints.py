"""Synthetic checkpoints on disk, in real naming layouts: reading them back recovers what was planted."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sweeper.core.errors import UserError
from sweeper.analysis.gamma.checkpoints import read_checkpoint
from sweeper.analysis.gamma.report import analyze, summary_rows

L, D = 24, 64


def _write(ckpt, planted, layout: str, kind: str, folder: Path) -> tuple[str, np.ndarray]:
    """Write `kind` gains in `layout`; returns the site carrying them and the gains."""
    gains = planted.gains(kind, L, D, seed=0)
    other = planted.gains("noise", L, D, seed=7)
    if layout == "llama-safetensors":
        ckpt.llama(folder, attn_in=other, mlp_in=gains)
        return "mlp_in", gains
    ckpt.bert_bin(folder, attn_out=other, mlp_out=gains)
    return "mlp_out", gains


def _expect(kind: str, site: dict) -> None:
    """What each planted structure must look like in the results document."""
    trend = site["trend"]
    direction = site["direction"]
    if kind in ("rising", "falling"):
        sign = 1 if kind == "rising" else -1
        for stat in ("mean", "median", "p90", "p99"):
            assert sign * trend[stat]["spearman"] > 0.95
            assert sign * trend[stat]["slope"] > 0
        assert site["schedule"]["b"] == pytest.approx(0.5 * sign, abs=0.02)
        assert site["schedule"]["r2"] > 0.99
    elif kind == "steady":
        assert direction["arc_order"] > 0.95
        assert direction["locality"] < 0.3
        assert direction["mean_adjacent_cosine"] > 0.99
        assert direction["first_last_cosine"] < 0.6
    elif kind == "rigid":
        assert direction["arc_order"] < 0.3
        assert direction["locality"] > 0.9
    else:
        for stat in ("mean", "median", "p90", "p99", "rms"):
            assert trend[stat]["spearman_p"] > 0.01
        assert abs(site["schedule"]["b"]) < 0.02
        assert direction["arc_order"] < 0.6
        assert 0.9 < direction["locality"] < 1.1


@pytest.mark.parametrize("layout", ["llama-safetensors", "bert-bin"])
@pytest.mark.parametrize("kind", ["rising", "falling", "steady", "rigid", "noise"])
def test_planted_structure_is_recovered_from_disk(ckpt, planted, tmp_path: Path, layout: str, kind: str) -> None:
    site, gains = _write(ckpt, planted, layout, kind, tmp_path / "model")
    (model,) = read_checkpoint(tmp_path / "model")
    np.testing.assert_allclose(model.sites[site].gains, gains, rtol=1e-6)  # float32 on disk
    assert model.sites[site].depth.tolist() == list(range(1, L + 1))
    results = analyze([model], "mlp")
    _expect(kind, results["models"][0]["sites"][site])
    json.dumps(results, allow_nan=False)  # JSON-safe


def test_sharded_index_reads_only_the_shards_holding_norms(ckpt, planted, tmp_path: Path) -> None:
    gains = planted.gains("rising", L, D)
    ckpt.llama(tmp_path / "m", attn_in=gains, mlp_in=gains, shards=3, garbage_shard=True)
    (model,) = read_checkpoint(tmp_path / "m")  # the embeddings shard is not a valid file: never opened
    np.testing.assert_allclose(model.sites["attn_in"].gains, gains, rtol=1e-6)
    assert model.layout.startswith("LLaMA-style")


def test_bfloat16_and_a_single_file_path(ckpt, planted, tmp_path: Path) -> None:
    gains = planted.gains("falling", L, D)
    ckpt.llama(tmp_path / "m", attn_in=gains, mlp_in=gains, dtype="bfloat16")
    (model,) = read_checkpoint(tmp_path / "m" / "model.safetensors")
    np.testing.assert_allclose(model.sites["mlp_in"].gains, gains, rtol=1e-2)
    assert model.source == "safetensors" and model.model_type == "llama"
    (tmp_path / "m" / "config.json").unlink()
    (bare,) = read_checkpoint(tmp_path / "m" / "model.safetensors")
    assert bare.model_type is None and any("no config.json" in n for n in bare.notes)


def test_gemma2_gains_are_reported_as_one_plus_w(ckpt, planted, tmp_path: Path) -> None:
    gains = planted.gains("rising", 6, 16)
    leaves = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")
    tensors = {f"model.layers.{i}.{leaf}.weight": gains[i] - 1.0 for i in range(6) for leaf in leaves}
    ckpt.named(tmp_path / "g", tensors, {"model_type": "gemma2"})
    (model,) = read_checkpoint(tmp_path / "g")
    assert model.gain_transform == "1 + w"
    assert set(model.sites) == {"attn_in", "attn_out", "mlp_in", "mlp_out"}
    np.testing.assert_allclose(model.sites["mlp_out"].gains, gains, rtol=1e-6)


def test_sharded_bin_index_and_tf_era_names(ckpt, planted, tmp_path: Path) -> None:
    gains = planted.gains("steady", 6, 16)
    folder = ckpt.bert_bin(tmp_path / "b", attn_out=gains, mlp_out=gains, old_names=True)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    (folder / "pytorch_model.bin").unlink()
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    for file, group in halves.items():
        torch.save({n: state[n] for n in group}, folder / file)
    weight_map = {n: file for file, group in halves.items() for n in group}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (model,) = read_checkpoint(folder)
    assert model.source == "torch"
    np.testing.assert_allclose(model.sites["attn_out"].gains, gains, rtol=1e-6)


def test_parallel_block_reports_one_norm_as_both_sites(ckpt, planted, tmp_path: Path) -> None:
    gains = planted.gains("rising", 5, 16)
    tensors = {f"model.layers.{i}.input_layernorm.weight": gains[i] for i in range(5)}
    tensors.update({f"model.layers.{i}.mlp.fc1.weight": np.ones((4, 16)) for i in range(5)})
    ckpt.named(tmp_path / "phi", tensors, {"model_type": "phi"})
    (model,) = read_checkpoint(tmp_path / "phi")
    assert model.sites["mlp_in"].shared_with == "attn_in"
    np.testing.assert_array_equal(model.sites["mlp_in"].gains, model.sites["attn_in"].gains)
    rows = summary_rows(analyze([model], "all"))
    assert [r["site"] for r in rows] == ["attn_in", "mlp_in (= attn_in)"]


def test_two_stacks_become_two_models(ckpt, planted, tmp_path: Path) -> None:
    g = planted.gains("noise", 4, 8)
    tensors = {f"encoder.layers.{i}.layer_norm1.weight": g[i] for i in range(4)}
    tensors |= {f"encoder.layers.{i}.layer_norm2.weight": g[i] for i in range(4)}
    tensors |= {f"text.layers.{i}.input_layernorm.weight": g[i] for i in range(4)}
    tensors |= {f"text.layers.{i}.post_attention_layernorm.weight": g[i] for i in range(4)}
    ckpt.named(tmp_path / "mm", tensors, {})
    models = read_checkpoint(tmp_path / "mm")
    assert [m.name for m in models] == ["mm [encoder.layers]", "mm [text.layers]"]


def test_unknown_layout_lists_the_tensor_names(ckpt, tmp_path: Path) -> None:
    ckpt.named(tmp_path / "cnn", {"stem.conv.weight": np.ones((4, 4)), "stages.0.bn.weight": np.ones(4)}, {})
    with pytest.raises(UserError) as info:
        read_checkpoint(tmp_path / "cnn")
    assert "unknown checkpoint layout" in info.value.message
    assert any("stages.0.bn.weight" in line for line in info.value.details)
    assert any("stem.conv.weight" in line for line in info.value.details)


def test_unsafe_pickle_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "evil"
    folder.mkdir()
    torch.save({"model.layers.0.input_layernorm.weight": torch.ones(4), "args": argparse.Namespace(x=1)},
               folder / "pytorch_model.bin")
    with pytest.raises(UserError, match="refused to load"):
        read_checkpoint(folder)


def test_missing_and_empty_paths(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no weights found"):
        read_checkpoint(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UserError, match="not a weights file"):
        read_checkpoint(tmp_path / "notes.txt")


def test_gain_sizes_must_agree_across_layers(ckpt, tmp_path: Path) -> None:
    tensors = {"model.layers.0.input_layernorm.weight": np.ones(8), "model.layers.1.input_layernorm.weight": np.ones(6)}
    tensors |= {f"model.layers.{i}.post_attention_layernorm.weight": np.ones(8) for i in range(2)}
    ckpt.named(tmp_path / "odd", tensors, {})
    with pytest.raises(UserError, match="gain sizes differ"):
        read_checkpoint(tmp_path / "odd")


def test_legacy_and_wrapped_torch_files(planted, tmp_path: Path) -> None:
    gains = planted.gains("rising", 4, 8)
    state = {f"model.layers.{i}.{leaf}.weight": torch.tensor(gains[i], dtype=torch.float32)
             for i in range(4) for leaf in ("input_layernorm", "post_attention_layernorm")}
    legacy = tmp_path / "legacy.bin"
    torch.save(state, legacy, _use_new_zipfile_serialization=False)  # cannot be memory-mapped
    wrapped = tmp_path / "wrapped.pt"
    torch.save({"state_dict": state, "epoch": 3}, wrapped)
    for path in (legacy, wrapped):
        (model,) = read_checkpoint(path)
        np.testing.assert_allclose(model.sites["mlp_in"].gains, gains, rtol=1e-6)


def test_corrupt_shard_holding_norms_is_a_clear_error(ckpt, planted, tmp_path: Path) -> None:
    gains = planted.gains("rising", 4, 8)
    folder = ckpt.llama(tmp_path / "m", attn_in=gains, mlp_in=gains, shards=2)
    (folder / "model-00001-of-00003.safetensors").write_bytes(b"broken")
    with pytest.raises(UserError, match="not a readable safetensors file"):
        read_checkpoint(folder)
