"""Synthetic gains with planted depth structure, and writers for checkpoints in real naming layouts.

Exposed as fixtures (`planted`, `ckpt`) because test modules are imported in importlib mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

KINDS = ("rising", "falling", "steady", "rigid", "noise")
GOLDEN_ANGLE = 2 * np.pi * (1 - 1 / ((1 + 5**0.5) / 2))  # ≈ 2.39996 rad


def rotate_pairs(gain: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Rotate channel pairs (2j, 2j+1) of `gain` by `angles[j]` (LayerRoPE's pairing)."""
    z = (gain[0::2] + 1j * gain[1::2]) * np.exp(1j * angles)
    out = np.empty_like(gain)
    out[0::2], out[1::2] = z.real, z.imag
    return out


def planted_gains(kind: str, n_layers: int = 24, d: int = 64, seed: int = 0) -> np.ndarray:
    """(L, d) gains with one planted structure.

    - rising / falling: a fixed random gain scaled by l^(+0.5) / l^(-0.5), 2% channel noise;
    - steady: the fixed gain turned a little further at every layer (pairs rotate by 0.05·l rad):
      a smooth drift of direction at constant magnitude;
    - rigid: the same rotation applied from each layer to the next with a large step (the golden
      angle, in every pair): a rigid rotation whose layers land around a ring out of depth order;
    - noise: independent gains 1 + 0.1·N(0, 1), no depth structure at all.
    """
    rng = np.random.default_rng(seed)
    depth = np.arange(1, n_layers + 1)
    base = 1.0 + 0.3 * rng.standard_normal(d)
    if kind in ("rising", "falling"):
        exponent = 0.5 if kind == "rising" else -0.5
        jitter = 1.0 + 0.02 * rng.standard_normal((n_layers, d))
        return base[None, :] * depth[:, None] ** exponent * jitter
    if kind in ("steady", "rigid"):
        step = 0.05 if kind == "steady" else GOLDEN_ANGLE
        rows = [rotate_pairs(base, np.full(d // 2, step * l)) for l in depth]
        return np.array(rows) + 0.005 * rng.standard_normal((n_layers, d))
    if kind == "noise":
        return 1.0 + 0.1 * rng.standard_normal((n_layers, d))
    raise ValueError(kind)


def layerrope_gains(gamma: np.ndarray, n_layers: int, a_mag: float, b_mag: float, a_rot: float, b_rot: float,
                    base: float = 100.0) -> np.ndarray:
    """LayerRoPE's (L, d) output from the formula in the reference (numpy, independent of models/)."""
    d = gamma.shape[0]
    freq = base ** (-2.0 * np.arange(d // 2) / d)
    rows = []
    for l in range(1, n_layers + 1):
        theta = np.exp(a_rot + b_rot * np.log(l))
        rows.append(np.exp(a_mag + b_mag * np.log(l)) * rotate_pairs(gamma, theta * freq))
    return np.array(rows)


def _config(folder: Path, config: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))


def _tensor(array: np.ndarray, dtype: str = "float32"):
    import torch

    return torch.tensor(np.asarray(array), dtype=getattr(torch, dtype))


def write_llama(folder: Path, attn_in: np.ndarray, mlp_in: np.ndarray, *, dtype: str = "float32",
                shards: int = 1, model_type: str = "llama", garbage_shard: bool = False) -> Path:
    """A LLaMA-naming safetensors folder (model.layers.N.{input,post_attention}_layernorm.weight)
    with a few projection tensors around them; `shards` > 1 spreads the layers over `shards` files
    plus one embeddings-only file, listed in model.safetensors.index.json.
    `garbage_shard` adds a shard that holds only the embeddings and is not a valid file."""
    from safetensors.torch import save_file

    n_layers, d = attn_in.shape
    tensors = {"model.embed_tokens.weight": _tensor(np.zeros((16, d)), dtype)}
    for i in range(n_layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = _tensor(attn_in[i], dtype)
        tensors[p + "post_attention_layernorm.weight"] = _tensor(mlp_in[i], dtype)
        tensors[p + "self_attn.q_proj.weight"] = _tensor(np.eye(d), dtype)
        tensors[p + "mlp.down_proj.weight"] = _tensor(np.ones((d, 8)), dtype)
    tensors["model.norm.weight"] = _tensor(np.ones(d), dtype)
    _config(folder, {"model_type": model_type, "num_hidden_layers": n_layers, "hidden_size": d})
    if shards == 1 and not garbage_shard:
        save_file(tensors, str(folder / "model.safetensors"))
        return folder
    names = [n for n in tensors if n != "model.embed_tokens.weight"]
    groups = [names[i::shards] for i in range(shards)]
    total = shards + 1  # the last shard holds only the embeddings
    weight_map = {}
    for k, group in enumerate(groups):
        file = f"model-{k + 1:05d}-of-{total:05d}.safetensors"
        save_file({n: tensors[n] for n in group}, str(folder / file))
        weight_map.update({n: file for n in group})
    embed_file = f"model-{total:05d}-of-{total:05d}.safetensors"
    if garbage_shard:
        (folder / embed_file).write_bytes(b"not a safetensors file")
    else:
        save_file({"model.embed_tokens.weight": tensors["model.embed_tokens.weight"]}, str(folder / embed_file))
    weight_map["model.embed_tokens.weight"] = embed_file
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def write_bert_bin(folder: Path, attn_out: np.ndarray, mlp_out: np.ndarray, *, old_names: bool = False) -> Path:
    """A BERT-naming pytorch_model.bin (bert.encoder.layer.N.attention.output.LayerNorm / output.LayerNorm),
    with biases and dense weights; `old_names` uses the TF-era LayerNorm.gamma/beta."""
    import torch

    n_layers, d = attn_out.shape
    weight, bias = ("gamma", "beta") if old_names else ("weight", "bias")
    state = {"bert.embeddings.LayerNorm." + weight: _tensor(np.ones(d))}
    for i in range(n_layers):
        p = f"bert.encoder.layer.{i}."
        state[p + "attention.self.query.weight"] = _tensor(np.eye(d))
        state[p + f"attention.output.LayerNorm.{weight}"] = _tensor(attn_out[i])
        state[p + f"attention.output.LayerNorm.{bias}"] = _tensor(np.zeros(d))
        state[p + "intermediate.dense.weight"] = _tensor(np.ones((8, d)))
        state[p + f"output.LayerNorm.{weight}"] = _tensor(mlp_out[i])
        state[p + f"output.LayerNorm.{bias}"] = _tensor(np.zeros(d))
    _config(folder, {"model_type": "bert", "num_hidden_layers": n_layers, "hidden_size": d})
    torch.save(state, str(folder / "pytorch_model.bin"))
    return folder


def write_named(folder: Path, tensors: dict[str, np.ndarray], config: dict) -> Path:
    """Any naming: the given 1-D/2-D arrays as model.safetensors plus config.json."""
    from safetensors.torch import save_file

    _config(folder, config)
    save_file({k: _tensor(v) for k, v in tensors.items()}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def planted() -> SimpleNamespace:
    return SimpleNamespace(gains=planted_gains, kinds=KINDS, layerrope=layerrope_gains, rotate=rotate_pairs)


@pytest.fixture
def ckpt() -> SimpleNamespace:
    return SimpleNamespace(llama=write_llama, bert_bin=write_bert_bin, named=write_named)
