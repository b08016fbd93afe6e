"""The model-family registry: one entry per family of `models.config.Family`, unknown names refused with
the allowed list, settings validated with defaults, capabilities that agree with the networks, and no
torch imported by the registry or the counting."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from typing import get_args

import pytest
import torch

import models.families
from models import build_model, count_params, named_config
from models.config import Family, ModelConfig
from models.families.llama import LlamaSettings
from models.families.looped import LoopSettings
from models.families.vit import ViTSettings
from models.family import FamilySpec, families, family_names, family_of, get_family
from models.stacked import StackedModel
from trials.fused_loss import fused_applies

TINY = {"llama": "micro", "looped": "parcae-tiny", "vit": "vit-tiny"}


def test_every_family_is_registered_once_under_its_name():
    modules = [m.name for m in pkgutil.iter_modules(models.families.__path__) if not m.name.startswith("_")]
    assert family_names() == get_args(Family) == ("llama", "looped", "vit")
    assert sorted(modules) == sorted(family_names())  # one module per family
    entries = families()
    assert [f.name for f in entries] == list(family_names())
    assert len({id(f) for f in entries}) == len(entries)
    for name in family_names():
        entry = get_family(name)
        assert isinstance(entry, FamilySpec) and entry.name == name and entry.options.family == name
        assert family_of(named_config(TINY[name])) is entry


@pytest.mark.parametrize("name", ["gpt", "Llama", "", None])
def test_unknown_family_is_refused_with_the_allowed_names(name):
    with pytest.raises(ValueError, match=r"unknown model family .* \(allowed: llama, looped, vit\)$"):
        get_family(name)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(allowed: llama, looped, vit\)$"):
        count_params(ModelConfig(family=name))  # type: ignore[arg-type]


def test_registry_and_counting_import_no_torch():
    code = (
        "import json, sys\n"
        "from models.family import families\n"
        "from models import count_params, flops_per_token, named_configs\n"
        "from models.counting import count_params\n"
        "n = [count_params(c)['total'] for c in named_configs().values()]\n"
        "f = [flops_per_token(c) for c in named_configs().values()]\n"
        "print(json.dumps({'families': [e.name for e in families()], 'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"families": ["llama", "looped", "vit"], "torch": False}


def test_options_have_defaults_and_are_validated():
    blocks = ("mlp", "qk_norm", "value_embeddings", "tie_embeddings", "init")
    assert LlamaSettings.keys() == blocks and get_family("llama").options is LlamaSettings
    assert LoopSettings.keys()[:3] == ("prelude", "core", "coda") and LoopSettings.keys()[-5:] == blocks
    assert LoopSettings.defaults()["mean_loops"] == 8.0 and ViTSettings.defaults()["image_size"] == 32
    assert LlamaSettings.defaults() == {"mlp": "swiglu", "qk_norm": False, "value_embeddings": False,
                                        "tie_embeddings": False, "init": "normal"}
    get_family("llama").validate_extra({})
    with pytest.raises(ValueError, match=r"^model.extra for the llama family: unknown key\(s\) a, b \(allowed: mlp, qk_norm, "):
        get_family("llama").validate_extra({"b": 1, "a": 2})
    with pytest.raises(ValueError, match=r"unknown key\(s\) depth \(allowed: prelude, core, coda, mean_loops"):
        get_family("looped").validate_extra({"depth": 3})
    with pytest.raises(ValueError, match="image_size 30 is not a multiple of patch_size 4"):
        get_family("vit").validate_extra({"image_size": 30})
    # the looped blocks: checked against the depth when given, else the depth they imply
    get_family("looped").validate_extra({"prelude": 1, "core": 3, "coda": 1})
    with pytest.raises(ValueError, match=r"1\+3\+1 = 5 blocks, but depth is 6"):
        get_family("looped").validate_extra({"prelude": 1, "core": 3, "coda": 1}, depth=6)
    assert get_family("looped").axis_shape({"core": 3}, 12) == (7, {"max_loops": 32, "core": 3, "mean_loops": 12,
                                                                   "eval_loops": 12})
    assert get_family("llama").axis_shape({}, 48) == (48, {})


def test_scheme_defaults_only_for_schemes_with_the_option():
    cfg = named_config("vit-tiny", scheme="layerrope")
    assert get_family("vit").scheme_options(cfg) == {"mag_slope_init": 0.0, "write_gains": False}
    assert get_family("vit").scheme_options(named_config("vit-tiny")) == {}  # pre has neither option
    looped = named_config("parcae-tiny", scheme="layerrope", scheme_options={"mag_slope_init": -0.5})
    assert get_family("looped").scheme_options(looped) == {"mag_slope_init": -0.5}  # the method's wins
    assert get_family("llama").scheme_options(named_config("micro", scheme="layerrope")) == {}


@pytest.mark.parametrize("name", ["llama", "looped", "vit"])
def test_capabilities_agree_with_the_network(name):
    entry, cfg = get_family(name), named_config(TINY[name])
    model = build_model(cfg, stack=1)
    assert isinstance(model, StackedModel) and type(model) is entry.network_class()
    assert model.num_params() == count_params(cfg)["total"]
    assert fused_applies(model) == entry.fused_loss
    assert hasattr(model, "training_loops") == entry.samples_loops
    assert entry.requires_image_data == (entry.data_kind == "images") == entry.classifies_sequences
    if entry.requires_image_data:  # one prediction per image, its tokens the patches and the class token
        settings = entry.settings(cfg)
        images = torch.zeros(2, settings.channels, settings.image_size, settings.image_size)
        assert model(images).shape == (1, 2, cfg.vocab)
        assert entry.tokens_per_sample(cfg) == settings.tokens == cfg.seq_len
    else:
        assert entry.tokens_per_sample(cfg) == cfg.seq_len
        assert model(torch.zeros(2, 8, dtype=torch.long)).shape == (1, 2, 8, cfg.vocab)
