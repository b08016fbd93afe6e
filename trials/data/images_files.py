"""Image sources read from files: a folder of images (one subfolder per class) and arrays in an `.npz`.

- A **folder**: one subfolder per class (sorted names are the class ids, as ImageNet's `train/`), images
  anywhere below it (`trials.data.images_decode` reads them). Validation: `val_path` (a folder with the
  same class subfolders), else a deterministic hash split of the files by relative path (`val_fraction`).
  Each split is decoded once per shorter side into the cache folder and memory-mapped afterwards
  (`trials.data.images_store`); the cache key holds the source's signature: every file's (split,
  relative path, size, label) and the class names, so an edited folder is decoded again.
- An **`.npz`** file: `x` (or `images`) `[N, H, W, C]`, `[N, C, H, W]` or `[N, H, W]` (uint8 0-255, or
  floats in [0, 1]) and `y` (or `labels`) `[N]` integer classes; validation from `val_path` (another
  `.npz`), else `x_val` / `y_val` in the same file, else a hash split by index. Resized in memory.

The fingerprint names the content (class names, relative paths and sizes, or the `.npz` file's SHA-256),
not the resolution.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from trials.data.cache import digest, in_val_split
from trials.data.images_base import ImageSource
from trials.data.images_decode import IMAGE_SUFFIXES, load_resized, resize_shorter, resizer, with_channels
from trials.data.images_store import CachedSplit, StoreKey, cached_split, in_memory_split, parallel_map
from trials.errors import TrialInputError


def _class_files(root: Path, field: str) -> dict[str, list[Path]]:
    classes: dict[str, list[Path]] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        files = sorted(
            Path(dirpath) / name
            for dirpath, _, names in os.walk(entry)
            for name in names
            if not name.startswith(".") and name.lower().endswith(IMAGE_SUFFIXES)
        )
        if files:
            classes[entry.name] = files
    if len(classes) < 2:
        raise TrialInputError(
            f"{field}: {root}: an image folder needs at least two class subfolders holding images "
            f"({', '.join(IMAGE_SUFFIXES)}); found {len(classes)}"
        )
    return classes


class FolderImages(ImageSource):
    """A folder with one subfolder per class; each split decoded once into the cache at each shorter side."""

    def __init__(self, root: Path, val_path: str | None, val_fraction: float) -> None:
        super().__init__()
        self.root = self.val_root = root
        train_classes = _class_files(root, "data.path")
        self.class_names = tuple(train_classes)
        self.vocab = len(self.class_names)
        ids = {name: i for i, name in enumerate(self.class_names)}
        self.train: list[tuple[Path, int]] = []
        self.val: list[tuple[Path, int]] = []
        if val_path:
            val_root = Path(os.path.expanduser(val_path))
            if not val_root.is_dir():
                raise TrialInputError(f"data.val_path: {val_path}: not a folder (give the validation image folder)")
            val_classes = _class_files(val_root, "data.val_path")
            unknown = sorted(set(val_classes) - set(ids))
            if unknown:
                raise TrialInputError(f"data.val_path: class folder(s) {', '.join(unknown[:5])} are not among data.path's classes")
            self.train = [(p, ids[c]) for c, files in train_classes.items() for p in files]
            self.val = [(p, ids[c]) for c, files in val_classes.items() for p in files]
            roots = {"train": root, "val": val_root}
            self.val_root = val_root
        else:
            for c, files in train_classes.items():
                for p in files:
                    (self.val if in_val_split(p.relative_to(root).as_posix(), val_fraction) else self.train).append((p, ids[c]))
            roots = {"train": root, "val": root}
        if not self.train:
            raise TrialInputError(f"data.val_fraction {val_fraction}: leaves no training images in {root}")
        listing = [
            (split, p.relative_to(roots[split]).as_posix(), p.stat().st_size, label)
            for split, items in (("train", self.train), ("val", self.val))
            for p, label in items
        ]
        self.signature = digest(self.class_names, listing)
        split = "val_path" if val_path else f"val{val_fraction:g}"
        self.fingerprint = f"images:folder:{len(self.train)}+{len(self.val)}:{self.signature}:{split}"
        self.description = f"image folder {root} ({self.vocab} classes, {len(self.train)} train + {len(self.val)} val images)"

    def train_labels(self) -> np.ndarray:
        return np.array([label for _, label in self.train], dtype=np.int64)

    def _split(self, split: str, side: int, channels: int) -> CachedSplit:
        """Decoded once per (split, side, channels) into the cache and memory-mapped afterwards."""
        items = self.train if split == "train" else self.val
        key = StoreKey("folder", self.signature, split, side, channels, resizer())
        info = {"classes": list(self.class_names), "source": str(self.root if split == "train" else self.val_root)}

        def produce() -> tuple[Iterable[np.ndarray], np.ndarray]:
            images = parallel_map(lambda item: load_resized(item[0], side, channels), items)
            return images, np.array([label for _, label in items], dtype=np.int64)

        return cached_split(key, len(items), produce, info)


# ---- .npz arrays -----------------------------------------------------------------------------------------


def _npz_arrays(path: Path, field: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise TrialInputError(f"{field}: {path}: not a readable .npz file ({exc})") from None


def _pick(arrays: dict[str, np.ndarray], names: tuple[str, ...], field: str, path: Path) -> np.ndarray:
    for name in names:
        if name in arrays:
            return arrays[name]
    raise TrialInputError(f"{field}: {path}: no array named {' or '.join(names)} (found: {', '.join(sorted(arrays)) or 'none'})")


def _as_uint8_nhwc(x: np.ndarray, field: str, path: Path) -> np.ndarray:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise TrialInputError(f"{field}: {path}: images must be [N, H, W, C], [N, C, H, W] or [N, H, W], got shape {x.shape}")
    if x.shape[-1] not in (1, 3) and x.shape[1] in (1, 3):
        x = np.transpose(x, (0, 2, 3, 1))
    if x.shape[-1] not in (1, 3):
        raise TrialInputError(f"{field}: {path}: images need 1 or 3 channels, got shape {x.shape}")
    if x.dtype == np.uint8:
        return x
    if np.issubdtype(x.dtype, np.floating):
        if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or not np.isfinite(x).all()):
            raise TrialInputError(f"{field}: {path}: float images must lie in [0, 1]")
        return np.clip(x * 255.0 + 0.5, 0, 255).astype(np.uint8)
    raise TrialInputError(f"{field}: {path}: images must be uint8 or floats in [0, 1], got {x.dtype}")


class NpzImages(ImageSource):
    """Arrays in an `.npz` file (resized and converted in memory at each resolution)."""

    def __init__(self, path: Path, val_path: str | None, val_fraction: float) -> None:
        super().__init__()
        arrays = _npz_arrays(path, "data.path")
        x = _as_uint8_nhwc(_pick(arrays, ("x", "images"), "data.path", path), "data.path", path)
        y = _pick(arrays, ("y", "labels"), "data.path", path)
        if val_path:
            vpath = Path(os.path.expanduser(val_path))
            varrays = _npz_arrays(vpath, "data.val_path")
            vx = _as_uint8_nhwc(_pick(varrays, ("x", "images"), "data.val_path", vpath), "data.val_path", vpath)
            vy = _pick(varrays, ("y", "labels"), "data.val_path", vpath)
        elif "x_val" in arrays and "y_val" in arrays:
            vx, vy = _as_uint8_nhwc(arrays["x_val"], "data.path", path), arrays["y_val"]
        else:
            held = np.array([in_val_split(f"{path.name}:{i}", val_fraction) for i in range(len(y))], dtype=bool)
            x, vx, y, vy = x[~held], x[held], y[~held], y[held]
        for name, labels, images in (("y", y, x), ("y_val", vy, vx)):
            if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
                raise TrialInputError(f"data.path: {path}: {name} must be integer labels [N] matching the images (got {labels.dtype} {labels.shape})")
            if len(labels) and labels.min() < 0:
                raise TrialInputError(f"data.path: {path}: {name} holds negative class ids")
        if len(y) == 0:
            raise TrialInputError(f"data.path: {path}: no training images")
        self.x, self.y, self.vx, self.vy = x, y.astype(np.int64), vx, vy.astype(np.int64)
        self.vocab = int(max(self.y.max(), self.vy.max() if len(self.vy) else 0)) + 1
        self.class_names = tuple(str(i) for i in range(self.vocab))
        sha = hashlib.sha256()
        for part in (path, Path(os.path.expanduser(val_path)) if val_path else None):
            if part is not None:
                with open(part, "rb") as fh:
                    while block := fh.read(1 << 20):
                        sha.update(block)
        split = "val_path" if val_path else ("x_val" if "x_val" in arrays else f"val{val_fraction:g}")
        self.fingerprint = f"images:npz:sha256-{sha.hexdigest()[:16]}:{split}"
        self.description = f"image arrays {path.name} ({self.vocab} classes, {len(self.y)} train + {len(self.vy)} val images)"

    def train_labels(self) -> np.ndarray:
        return self.y

    def _split(self, split: str, side: int, channels: int) -> CachedSplit:
        """Resized in memory (no cache folder: the arrays are in memory already)."""
        x, y = (self.x, self.y) if split == "train" else (self.vx, self.vy)
        images = [resize_shorter(with_channels(img, channels), side) for img in x]
        return in_memory_split(images, y, channels)
