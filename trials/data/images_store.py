"""The image cache: whole images of one split at one shorter side, in memory or memory-mapped on disk,
and what a trial reads from it (`ImageArrays`).

An `ImageStore` holds N uint8 images of one channel count whose shorter side is `side` and whose longer
side keeps the image's aspect ratio (sizes vary): one flat buffer, the images one after the other in
row-major `[h, w, C]` order, and their shapes `[N, 2]` (h, w). Nothing is cropped away: a training
crop can reach any part of the image, and the evaluation view is the centre crop of it.

On disk (format `STORE_FORMAT`, one folder per split, under `cache_root()/images/`):

- `x.u8`: the flat buffer; `shapes.npy`: int32 `[N, 2]`; `y.npy`: int64 labels `[N]`;
- `meta.json` (written last, atomically): `format`, `split`, `side`, `channels`, `count`, `bytes`,
  `resizer`, the per-channel `mean` / `std` of the images' centre `side` x `side` squares (on [0, 1]),
  and what was decoded (`source`, `classes`).

The folder's name is a digest of (format, the source's content signature, split, side, channels,
resizer), so a cache of another format, resolution or resize implementation is never looked up; and a
folder is used only when its `meta.json` says this format and matches the files (count, byte size,
shapes): anything else, such as the format-1 caches of 224 px centre crops, is rebuilt, with a line on
stderr saying why.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trials.data.cache import cache_root, digest, write_atomic
from trials.data.images_decode import centre_offsets
from trials.errors import TrialInputError

STORE_FORMAT = 2  # 1: images resized and centre-cropped to the model's resolution, one folder for both splits
STATS_SAMPLE = 10_000  # images used for the per-channel mean and std
BUILD_CHUNK = 1024  # images decoded per round while building (bounds the memory of a build)


class ImageStore:
    """Images of varying size in one flat uint8 buffer (see the module docstring)."""

    def __init__(self, data: np.ndarray, shapes: np.ndarray, channels: int) -> None:
        self.data, self.channels = data, channels
        self.shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 2)
        self.offsets = np.zeros(len(self.shapes) + 1, dtype=np.int64)
        np.cumsum(self.shapes[:, 0] * self.shapes[:, 1] * channels, out=self.offsets[1:])
        if self.offsets[-1] != len(data):
            raise ValueError(f"image store: {len(data)} bytes for images that need {int(self.offsets[-1])}")

    @classmethod
    def from_images(cls, images: Sequence[np.ndarray], channels: int) -> "ImageStore":
        """A store in memory holding copies of `images` (each uint8 `[h, w, channels]`)."""
        shapes = np.array([img.shape[:2] for img in images], dtype=np.int64).reshape(-1, 2)
        data = np.concatenate([np.ascontiguousarray(img, dtype=np.uint8).reshape(-1) for img in images]) if len(images) else np.empty(0, np.uint8)
        return cls(data, shapes, channels)

    @classmethod
    def from_array(cls, images: np.ndarray) -> "ImageStore":
        """A store in memory over uint8 `[N, H, W, C]` (all one size)."""
        n, height, width, channels = images.shape
        return cls(np.ascontiguousarray(images).reshape(-1), np.tile([height, width], (n, 1)), channels)

    def __len__(self) -> int:
        return len(self.shapes)

    def image(self, i: int) -> np.ndarray:
        """Image `i`, uint8 `[h, w, C]` (a view of the buffer)."""
        height, width = self.shapes[i]
        return self.data[self.offsets[i] : self.offsets[i + 1]].reshape(height, width, self.channels)

    def images(self, idx: Iterable[int]) -> list[np.ndarray]:
        """Copies of images `idx`, in that order (read in sorted order: a memory map reads forward)."""
        idx = np.asarray(list(idx) if not isinstance(idx, np.ndarray) else idx, dtype=np.int64)
        out: list[np.ndarray] = [np.empty(0, np.uint8)] * len(idx)
        for pos in np.argsort(idx, kind="stable"):
            out[pos] = np.array(self.image(int(idx[pos])))
        return out

    def centre(self, idx: Iterable[int], size: int) -> np.ndarray:
        """The centre `size` x `size` crops of images `idx`: uint8 `[B, size, size, C]`."""
        idx = np.asarray(list(idx) if not isinstance(idx, np.ndarray) else idx, dtype=np.int64)
        out = np.empty((len(idx), size, size, self.channels), dtype=np.uint8)
        for pos in np.argsort(idx, kind="stable"):
            img = self.image(int(idx[pos]))
            if min(img.shape[:2]) < size:
                raise ValueError(f"image store: image {int(idx[pos])} of shape {img.shape[:2]} is smaller than a {size} px crop")
            top, left = centre_offsets(img.shape[0], img.shape[1], size)
            out[pos] = img[top : top + size, left : left + size]
        return out


def store_stats(store: ImageStore) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std (on [0, 1]) of the centre squares (shorter side x shorter side) of up to
    STATS_SAMPLE evenly spaced images of `store`."""
    if len(store) == 0:
        raise TrialInputError("data: no training images")
    idx = np.unique(np.linspace(0, len(store) - 1, min(len(store), STATS_SAMPLE)).round().astype(np.int64))
    total = np.zeros(store.channels)
    total_sq = np.zeros(store.channels)
    count = 0
    for i in idx:
        img = store.image(int(i))
        side = min(img.shape[:2])
        top, left = centre_offsets(img.shape[0], img.shape[1], side)
        pixels = img[top : top + side, left : left + side].reshape(-1, store.channels).astype(np.float64) / 255.0
        total += pixels.sum(axis=0)
        total_sq += (pixels * pixels).sum(axis=0)
        count += len(pixels)
    mean = total / count
    std = np.maximum(np.sqrt(np.maximum(total_sq / count - mean * mean, 0.0)), 1e-3)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


@dataclass(frozen=True)
class StoreKey:
    """What a cached store holds: a split of a source at one shorter side and channel count."""

    kind: str  # "folder" / "builtin": the folder name's prefix
    signature: str  # the source's content signature
    split: str  # "train" / "val"
    side: int
    channels: int
    resizer: str

    def folder(self) -> Path:
        key = digest(STORE_FORMAT, self.signature, self.split, self.side, self.channels, self.resizer)
        return cache_root() / "images" / f"{self.kind}-{self.split}-{key}"


@dataclass(frozen=True)
class CachedSplit:
    """One split read back from the cache: the store, its labels and its statistics."""

    store: ImageStore
    labels: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]


def _stale(folder: Path, key: StoreKey, count: int) -> str | None:
    """Why the cache folder cannot be used as it is (None: it can)."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return "no readable meta.json"
    if meta.get("format") != STORE_FORMAT:
        return f"format {meta.get('format', 1)}, not {STORE_FORMAT} (images at their shorter side, uncropped)"
    expected = {"split": key.split, "side": key.side, "channels": key.channels, "count": count, "resizer": key.resizer}
    wrong = [f"{name} {meta.get(name)!r} (expected {value!r})" for name, value in expected.items() if meta.get(name) != value]
    if wrong:
        return ", ".join(wrong)
    try:
        size = (folder / "x.u8").stat().st_size
        shapes = np.load(folder / "shapes.npy", mmap_mode="r")
    except (OSError, ValueError):
        return "x.u8 or shapes.npy missing or unreadable"
    if size != meta.get("bytes") or len(shapes) != count or int((shapes[:, 0].astype(np.int64) * shapes[:, 1]).sum()) * key.channels != size:
        return "x.u8 and shapes.npy do not match meta.json"
    return None


def _open(folder: Path, key: StoreKey, count: int) -> CachedSplit:
    meta = json.loads((folder / "meta.json").read_text())
    shapes = np.load(folder / "shapes.npy")
    data = np.memmap(folder / "x.u8", dtype=np.uint8, mode="r") if meta["bytes"] else np.empty(0, np.uint8)
    return CachedSplit(ImageStore(data, shapes, key.channels), np.load(folder / "y.npy"), tuple(meta["mean"]), tuple(meta["std"]))


def _notice(folder: Path, reason: str) -> None:
    print(f"image cache {folder}: rebuilding ({reason})", file=sys.stderr, flush=True)


def _write(folder: Path, key: StoreKey, images: Iterable[np.ndarray], labels: np.ndarray, info: dict[str, Any]) -> None:
    """Write a store into `folder` (the caller holds its lock): images streamed to `x.u8`, then the
    shapes, labels, statistics and, last, `meta.json`."""
    for name in ("meta.json", "x.u8", "shapes.npy", "y.npy"):  # a stale entry: meta.json first, so readers never trust it
        (folder / name).unlink(missing_ok=True)
    tmp = folder / f".x.u8.{os.getpid()}.tmp"
    shapes: list[tuple[int, int]] = []
    with open(tmp, "wb") as fh:
        for img in images:
            if img.ndim != 3 or img.shape[2] != key.channels or min(img.shape[:2]) != key.side:
                raise ValueError(f"image store: an image of shape {img.shape} in a store of shorter side {key.side}, {key.channels} channels")
            fh.write(np.ascontiguousarray(img, dtype=np.uint8).tobytes())
            shapes.append((img.shape[0], img.shape[1]))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / "x.u8")
    shape_array = np.array(shapes, dtype=np.int32).reshape(-1, 2)
    np.save(folder / "shapes.npy", shape_array)
    np.save(folder / "y.npy", np.asarray(labels, dtype=np.int64))
    nbytes = (folder / "x.u8").stat().st_size
    data = np.memmap(folder / "x.u8", dtype=np.uint8, mode="r") if nbytes else np.empty(0, np.uint8)
    mean, std = store_stats(ImageStore(data, shape_array, key.channels)) if len(shapes) else ((), ())
    meta = {"format": STORE_FORMAT, "split": key.split, "side": key.side, "channels": key.channels, "count": len(shapes),
            "bytes": nbytes, "resizer": key.resizer, "mean": mean, "std": std, **info}
    write_atomic(folder / "meta.json", json.dumps(meta, indent=2).encode())


def cached_split(key: StoreKey, count: int, produce: Callable[[], tuple[Iterable[np.ndarray], np.ndarray]],
                 info: dict[str, Any]) -> CachedSplit:
    """The split `key` names, from the cache, built first when missing or stale (see the module
    docstring). `produce()` gives the images (an iterable, consumed once, in order) and their labels.
    Concurrent trials on one machine: one builds under the folder's lock, the others wait and read it."""
    folder = key.folder()
    if _stale(folder, key, count) is None:
        return _open(folder, key, count)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reason = _stale(folder, key, count)
        if reason is not None:
            if any(p.name != ".lock" for p in folder.iterdir()):
                _notice(folder, reason)
            for old in ("train_x.u8", "val_x.u8", "train_y.npy", "val_y.npy"):  # format 1's files, if any
                (folder / old).unlink(missing_ok=True)
            images, labels = produce()
            _write(folder, key, images, labels, info)
    return _open(folder, key, count)


def in_memory_split(images: Sequence[np.ndarray], labels: np.ndarray, channels: int) -> CachedSplit:
    """A split that is not cached on disk (`.npz` arrays): the store and its statistics in memory."""
    store = ImageStore.from_images(images, channels)
    mean, std = store_stats(store) if len(store) else ((), ())
    return CachedSplit(store, np.asarray(labels, dtype=np.int64), mean, std)


def parallel_map(fn: Callable[[Any], np.ndarray], items: Sequence[Any]) -> Iterable[np.ndarray]:
    """`fn` over `items` on a thread pool (Pillow and torch release the GIL), results in order, a chunk
    of BUILD_CHUNK items at a time."""
    workers = max(1, min(16, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(items), BUILD_CHUNK):
            yield from pool.map(fn, items[start : start + BUILD_CHUNK])


@dataclass(frozen=True)
class ImageArrays:
    """A source's images as one trial reads them (see the module docstring): whole images per split,
    labels, the model's resolution, and the per-channel mean and std of the training images (their
    centre squares, on [0, 1]: the `dataset` normalisation)."""

    train: ImageStore
    train_y: np.ndarray
    val: ImageStore
    val_y: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int

    @classmethod
    def from_arrays(cls, train_x: np.ndarray, train_y: np.ndarray, val_x: np.ndarray, val_y: np.ndarray,
                    mean: tuple[float, ...] | None = None, std: tuple[float, ...] | None = None) -> "ImageArrays":
        """In memory, from uint8 `[N, S, S, C]` arrays already at the model's resolution `S` (tests, small
        sets); `mean` / `std` computed when not given."""
        train = ImageStore.from_array(train_x)
        if mean is None or std is None:
            mean, std = store_stats(train)
        return cls(train, np.asarray(train_y, np.int64), ImageStore.from_array(val_x), np.asarray(val_y, np.int64),
                   tuple(mean), tuple(std), int(train_x.shape[1]))

    @property
    def channels(self) -> int:
        return self.train.channels

    def train_view(self, idx: Iterable[int]) -> np.ndarray:
        """The views of training images `idx`: uint8 `[B, S, S, C]`."""
        return self.train.centre(idx, self.image_size)

    def val_view(self, start: int, stop: int) -> np.ndarray:
        """The views of held-out images `start .. stop - 1`: uint8 `[B, S, S, C]`."""
        return self.val.centre(range(start, stop), self.image_size)
