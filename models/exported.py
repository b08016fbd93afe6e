"""Load a model written by a sweep (`sweeper export`, a sweep's `weights/`, a trial's export folder).

A folder holds `model.safetensors` (one member's parameters, by name) and `config.json`, whose
`model` entry is the `ModelConfig` the network was built from:

    from models.exported import load_exported
    model, info = load_exported("exported/layerrope_L48_s0")   # a K = 1 StackedModel, eval mode
    logits = model(tokens)                                      # tokens [batch, seq] -> [1, batch, seq, vocab]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from models.build import build_model
from models.config import ModelConfig
from models.stacked import StackedModel


def read_config(folder: str | Path) -> dict[str, Any]:
    """The folder's config.json (ValueError naming what is missing)."""
    path = Path(folder) / "config.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable export config ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("model"), dict):
        raise ValueError(f"{path}: no `model` entry; not a layerrope-sweeper export")
    return info


def load_exported(folder: str | Path, *, device: torch.device | str | None = None) -> tuple[StackedModel, dict[str, Any]]:
    """(the network with the exported weights, in eval mode; the config.json entries: lr, point_id, loss...)."""
    from safetensors.torch import load_file  # the safetensors format, read with torch

    info = read_config(folder)
    cfg = ModelConfig.from_dict(info["model"])
    model = build_model(cfg, stack=1, device=device)
    model.load_member_state_dict(0, load_file(str(Path(folder) / "model.safetensors"), device=str(device or "cpu")))
    return model.eval(), info
