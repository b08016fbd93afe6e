"""Reading per-layer norm gains from local checkpoints, loading only the norm tensors.

Three kinds of PATH:

- a Hugging Face model folder (`config.json` and safetensors — one file, or shards listed in
  `model.safetensors.index.json` — or PyTorch `.bin` files, one or sharded through
  `pytorch_model.bin.index.json`), or a single weights file. Safetensors are opened lazily and only
  the norm tensors are read; `.bin` files are loaded with `torch.load(weights_only=True,
  mmap=True)` (never unpickling arbitrary objects; memory-mapped, so a large file is not read
  whole), and only the shards holding norm tensors are opened;
- a folder exported by this project's trials (`config.json` with `"format": "layerrope-sweeper"`
  and `model.safetensors`): the model is rebuilt with `models.build_model` and its effective gains
  come from `model.layer_gains()` — LayerRoPE's per-layer gains exist only as a function of its
  shared γ and four scalars, so they cannot be read off the tensors;
- a folder holding such exports at any depth up to five (an `export_dir`, a sweep's `exports/`
  or the sweep directory): every member is read, or with `best` the member of each model
  configuration that finished ok with the lowest loss. A trial *checkpoint* folder (stacked
  members and optimizer state, without the model config) is refused with a pointer to the exports.

Bad input raises `sweeper.core.errors.UserError` (the CLI exits 2).
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sweeper.core.errors import UserError
from sweeper.core.ids import depth_label, is_point_id
from sweeper.analysis.gamma.layouts import (
    UnknownLayout,
    detect_layouts,
    model_type,
    sample_names,
)

PROJECT_FORMAT = "layerrope-sweeper"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class SiteGains:
    """The gains of one site: row i is the gain vector of the layer with 1-based depth `depth[i]`."""

    depth: np.ndarray  # (L,) int, 1-based
    gains: np.ndarray  # (L, d) float64, effective gains (after any (1 + w) convention)
    shared_with: str | None = None  # parallel blocks: the site that reads the same tensors


@dataclass(frozen=True)
class ModelGains:
    """The norm gains of one model (one layer stack of one checkpoint), by site."""

    name: str
    path: str
    source: str  # "safetensors" | "torch" | "layerrope-sweeper"
    layout: str
    model_type: str | None
    n_layers: int
    gain_transform: str  # "w" or "1 + w"
    sites: dict[str, SiteGains]
    notes: tuple[str, ...] = field(default=())
    meta: dict[str, Any] = field(default_factory=dict)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


class _TensorStore:
    """Tensor names of a set of weight files and lazy access to single tensors."""

    def __init__(self, files_by_name: dict[str, Path], torch_cache: dict[Path, dict[str, Any]]) -> None:
        self.files_by_name = files_by_name
        self._torch_cache = torch_cache  # .bin state dicts already opened while listing names
        self._safetensors: dict[Path, Any] = {}
        self.kinds = {"safetensors" if f.suffix == ".safetensors" else "torch" for f in files_by_name.values()}

    @property
    def names(self) -> list[str]:
        return list(self.files_by_name)

    def get(self, name: str) -> np.ndarray:
        import torch  # torch (seconds to import) only once a weight is read

        path = self.files_by_name[name]
        if path.suffix == ".safetensors":
            if path not in self._safetensors:
                self._safetensors[path] = _open_safetensors(path)
            tensor = self._safetensors[path].get_tensor(name)
        else:
            tensor = _torch_state_dict(path, self._torch_cache)[name]
        return tensor.detach().to(torch.float64).cpu().numpy()


def _open_safetensors(path: Path) -> Any:
    from safetensors import SafetensorError, safe_open  # (with torch, see `get`)

    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError) as exc:
        raise UserError(f"{path}: not a readable safetensors file ({exc})") from None


def _safetensors_names(path: Path) -> list[str]:
    return list(_open_safetensors(path).keys())


def _torch_state_dict(path: Path, cache: dict[Path, dict[str, Any]]) -> dict[str, Any]:
    if path in cache:
        return cache[path]
    import torch  # (see `get`)

    try:
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            obj = torch.load(str(path), map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except pickle.UnpicklingError as exc:
        raise UserError(
            f"{path}: refused to load: it holds objects other than tensors, and only weights_only "
            f"loading is safe ({str(exc).splitlines()[0]})"
        ) from None
    except Exception as exc:  # noqa: BLE001 -- a damaged file fails in zipfile, pickle or torch itself
        raise UserError(f"{path}: not a readable PyTorch weights file ({exc})") from None
    # Trainers often wrap the state dict: {"state_dict": {...}, "epoch": 3}, {"model": {...}}, {"module": {...}}.
    while isinstance(obj, dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
        inner = next((obj[k] for k in ("state_dict", "model", "module") if isinstance(obj.get(k), dict)), None)
        if inner is None:
            break
        obj = inner
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)} if isinstance(obj, dict) else {}
    if not tensors:
        raise UserError(f"{path}: expected a state dict of tensors")
    cache[path] = tensors
    return tensors


def _index_files(index_path: Path) -> dict[str, Path]:
    weight_map = _read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UserError(f"{index_path}: no `weight_map` in the shard index")
    files = {name: index_path.parent / str(shard) for name, shard in weight_map.items()}
    missing = sorted({str(f) for f in files.values() if not f.is_file()})
    if missing:
        raise UserError(f"{index_path}: shard(s) listed but missing: {', '.join(missing[:3])}")
    return files


def _weight_files(folder: Path, cache: dict[Path, dict[str, Any]]) -> dict[str, Path]:
    """Tensor name -> file, for the weights of a model folder."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            return _index_files(folder / index)
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (folder / single).is_file():
            return _file_names(folder / single, cache)
    candidates = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    safetensors = [p for p in candidates if p.suffix == ".safetensors"]
    chosen = safetensors or candidates
    if not chosen:
        raise UserError(
            f"{folder}: no weights found (looked for model.safetensors[.index.json], "
            f"pytorch_model.bin[.index.json], *.safetensors, *.bin, *.pt, *.pth)"
        )
    files: dict[str, Path] = {}
    for path in chosen:
        for name, file in _file_names(path, cache).items():
            files.setdefault(name, file)
    return files


def _file_names(path: Path, cache: dict[Path, dict[str, Any]]) -> dict[str, Path]:
    if path.suffix == ".safetensors":
        return {name: path for name in _safetensors_names(path)}
    if path.suffix in (".bin", ".pt", ".pth"):
        return {name: path for name in _torch_state_dict(path, cache)}
    raise UserError(f"{path}: not a weights file (expected {', '.join(WEIGHT_SUFFIXES)})")


_GENERIC_FOLDERS = frozenset({"model", "models", "final", "checkpoint", "weights", "0"})


def _display_name(path: Path) -> str:
    """The folder's name (with its parent's when generic, e.g. `pkg/model`); a file adds its own name."""
    path = path.resolve()
    folder = path if path.is_dir() else path.parent
    name = f"{folder.parent.name}/{folder.name}" if folder.name in _GENERIC_FOLDERS else folder.name
    return name if path.is_dir() else f"{name}/{path.name}"


def read_hf(path: Path) -> list[ModelGains]:
    """Norm gains of a Hugging Face folder (or a single weights file), one entry per layer stack."""
    folder = path if path.is_dir() else path.parent
    has_config = (folder / "config.json").is_file()
    config = _read_json(folder / "config.json") if has_config else {}
    torch_cache: dict[Path, dict[str, Any]] = {}
    if path.is_dir():
        files = _weight_files(path, torch_cache)
    elif path.name.endswith(".index.json"):
        files = _index_files(path)
    else:
        files = _file_names(path, torch_cache)
    store = _TensorStore(files, torch_cache)
    mtype = model_type(config)
    try:
        stacks = detect_layouts(store.names, config)
    except UnknownLayout as exc:
        raise UserError(
            f"{path}: unknown checkpoint layout{f' (model_type {mtype})' if mtype else ''}: no per-layer "
            f"norm gains under a known naming among its {len(exc.names)} tensors, which include:",
            details=[f"  tensor {n}" for n in sample_names(exc.names)]
            + ["the known per-layer norm names are listed by `sweeper gamma --help`"],
        ) from None
    base_name = _display_name(path)
    source = "safetensors" if store.kinds == {"safetensors"} else "torch"
    extra_notes: tuple[str, ...] = () if has_config else (
        "no config.json beside the weights: family conventions such as Gemma's (1 + w) gains were not applied",
    )
    results = []
    for stack in stacks:
        shared = stack.shared_sites()
        loaded: dict[str, np.ndarray] = {}
        sites: dict[str, SiteGains] = {}
        for site, layers in stack.sites.items():
            rows = []
            for tensor_name in layers.values():
                if tensor_name not in loaded:
                    loaded[tensor_name] = _gain_vector(store, tensor_name)
                rows.append(loaded[tensor_name])
            gains = _stack_rows(path, site, rows, list(layers.values()))
            if stack.zero_centered:
                gains = 1.0 + gains
            sites[site] = SiteGains(np.array([i + 1 for i in layers], dtype=np.int64), gains, shared.get(site))
        label = base_name if len(stacks) == 1 else f"{base_name} [{stack.stack}]"
        results.append(
            ModelGains(
                name=label, path=str(path), source=source, layout=stack.rule.name, model_type=mtype,
                n_layers=stack.n_layers, gain_transform="1 + w" if stack.zero_centered else "w",
                sites=sites, notes=stack.notes + extra_notes, meta={"stack": stack.stack},
            )
        )
    return results


def _gain_vector(store: _TensorStore, name: str) -> np.ndarray:
    vector = store.get(name)
    if vector.ndim != 1:
        raise UserError(f"tensor {name}: expected a 1-D norm gain, found shape {tuple(vector.shape)}")
    return vector


def _stack_rows(path: Path, site: str, rows: list[np.ndarray], names: list[str]) -> np.ndarray:
    sizes = {r.shape[0] for r in rows}
    if len(sizes) != 1:
        raise UserError(f"{path}: site {site}: gain sizes differ across layers ({sorted(sizes)}; e.g. {names[0]})")
    return np.stack(rows).astype(np.float64)


def is_project_export(folder: Path) -> bool:
    config = folder / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("format") == PROJECT_FORMAT
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def _model_layer_gains(model_dict: dict[str, Any], weights: Path) -> dict[str, np.ndarray]:
    """Rebuild the project's model, load one member's weights, return `layer_gains()` as (L, d) arrays."""
    try:
        from models import ModelConfig, build_model  # torch (see `get`)
    except ImportError as exc:
        raise UserError(f"{weights.parent}: reading this project's checkpoints needs models.build_model ({exc})") from None
    import torch  # (see `get`)
    from safetensors.torch import load_file

    try:
        cfg = ModelConfig.from_dict(model_dict)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{weights.parent}/config.json: `model` is not a valid ModelConfig ({exc})") from None
    try:
        model = build_model(cfg, stack=1, seed=0)
    except ValueError as exc:
        raise UserError(f"{weights.parent}/config.json: cannot build the model ({exc})") from None
    try:
        model.load_member_state_dict(0, load_file(str(weights)))
    except (ValueError, RuntimeError, KeyError) as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"{weights}: weights do not fit the model in config.json ({first})") from None
    with torch.no_grad():
        gains = model.layer_gains()
    return {site: value[0].detach().to(torch.float64).cpu().numpy() for site, value in gains.items()}


def read_project_export(folder: Path) -> ModelGains:
    """The effective per-layer gains of one exported member of this project's trials."""
    config = _read_json(folder / "config.json")
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise UserError(f"{folder}: a {PROJECT_FORMAT} export needs model.safetensors")
    model_dict = config.get("model")
    if not isinstance(model_dict, dict):
        raise UserError(f"{folder}/config.json: `model` (the ModelConfig) is missing")
    per_site = _model_layer_gains(model_dict, weights)
    if not per_site:
        raise UserError(f"{folder}: the model reports no per-layer gains (scheme {model_dict.get('scheme')!r})")
    scheme = str(model_dict.get("scheme", "?"))
    depth = int(model_dict.get("depth", 0))
    sites = {}
    for site, gains in per_site.items():
        gains = np.asarray(gains, dtype=np.float64)
        present = ~np.isnan(gains).all(axis=1)  # a site that exists only in some layers (Mix-LN) is NaN elsewhere
        if present.any():
            sites[site] = SiteGains(np.flatnonzero(present) + 1, gains[present])
    n_layers = max(g.shape[0] for g in per_site.values())
    lr = config.get("lr")
    point_id = config.get("point_id")
    if is_point_id(point_id):
        label = str(point_id)  # a sweep's point id names method, size, seed and LR
    else:
        label = f"{scheme} {depth_label(depth)}" + (f" lr={float(lr):.3g}" if isinstance(lr, (int, float)) else "")
    notes = ["effective gains from model.layer_gains()"]
    if scheme == "layerrope":
        notes.append("LayerRoPE: each layer's gain is the shared γ scaled by exp(a_mag + b_mag ln l) and rotated pairwise")
    if config.get("outcome") not in (None, "ok"):
        notes.append(f"trial outcome: {config['outcome']} (these are its last weights)")
    return ModelGains(
        name=label, path=str(folder), source=PROJECT_FORMAT, layout=f"layerrope-sweeper ({scheme})",
        model_type=scheme, n_layers=n_layers, gain_transform="w", sites=sites, notes=tuple(notes),
        meta={k: config[k] for k in ("lr", "point_id", "outcome", "loss", "steps", "seed") if k in config},
    )


def _member_order(folder: Path) -> tuple[str, float, str]:
    """Exports grouped by the folder above their trial (a sweep cell), then by learning rate."""
    lr = _read_json(folder / "config.json").get("lr")
    return str(folder.parent.parent), float(lr) if isinstance(lr, (int, float)) else math.inf, str(folder)


def find_exports(folder: Path, max_depth: int = 5) -> list[Path]:
    """This project's export folders under `folder` (an export_dir, a sweep's `exports/`, a sweep directory)."""
    found: list[Path] = []
    frontier = [folder]
    for _ in range(max_depth):
        next_frontier = []
        for current in frontier:
            for child in current.iterdir():
                if not child.is_dir():
                    continue
                if is_project_export(child):
                    found.append(child)
                else:
                    next_frontier.append(child)
        frontier = next_frontier
    return sorted(found, key=_member_order)


def best_per_model(folders: list[Path]) -> list[Path]:
    """Per model configuration and seed (a sweep cell), the member that finished ok with the lowest loss."""
    best: dict[str, tuple[float, Path]] = {}
    for folder in folders:
        config = _read_json(folder / "config.json")
        loss = config.get("loss")
        if config.get("outcome", "ok") != "ok" or not isinstance(loss, (int, float)):
            continue
        key = json.dumps([config.get("model"), config.get("seed")], sort_keys=True)
        if key not in best or loss < best[key][0]:
            best[key] = (float(loss), folder)
    return sorted((folder for _, folder in best.values()), key=_member_order)


def _is_trial_checkpoint(folder: Path) -> bool:
    if (folder / "state.json").is_file() and (folder / "optimizer.safetensors").is_file():
        return True
    return any(child.is_dir() and child.name.startswith("step-") and (child / "state.json").is_file()
               for child in folder.iterdir())


def check_path(path: Path) -> None:
    """Fail fast (before any heavy import) on a path that cannot be a checkpoint."""
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    if path.is_file() and not (path.suffix in WEIGHT_SUFFIXES or path.name.endswith(".index.json")):
        raise UserError(f"{path}: not a weights file or model folder (expected a folder, {', '.join(WEIGHT_SUFFIXES)} or *.index.json)")


def read_checkpoint(path: Path, *, best: bool = False) -> list[ModelGains]:
    """Every model found at PATH (see the module docstring for what PATH may be).

    `best`: of this project's exports, keep per model configuration and seed only the member that
    finished ok with the lowest loss.
    """
    check_path(path)
    if path.is_dir():
        if is_project_export(path):
            return [read_project_export(path)]
        if _is_trial_checkpoint(path):
            raise UserError(
                f"{path}: a trial checkpoint (stacked members, optimizer state, no model config): point "
                f"sweeper gamma at the trial's export folder instead (run_trial(export_dir=...), a sweep's exports/)"
            )
        if not (path / "config.json").exists():
            exports = find_exports(path)
            if exports:
                chosen = best_per_model(exports) if best else exports
                if not chosen:
                    raise UserError(f"{path}: --best: none of its {len(exports)} exported members finished ok with a loss")
                return [read_project_export(folder) for folder in chosen]
    return read_hf(path)
