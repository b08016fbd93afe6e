"""Image sources of the ViT family: a local image folder, arrays in an `.npz` file, and a built-in
procedural image set that needs no download.

- `images` with `path` a **folder**: one subfolder per class (sorted names are the class ids, as
  ImageNet's `train/`), images anywhere below it. PNG, JPEG, BMP, GIF, WebP and TIFF are decoded with
  Pillow (an optional dependency: `pip install pillow`; a one-line error says so when it is missing);
  binary PPM / PGM (`.ppm`, `.pgm`, `.pnm`) are read without it. Validation: `val_path` (a folder with
  the same class subfolders), else a deterministic hash split of the files by relative path
  (`val_fraction`).
- `images` with `path` an **`.npz`** file: `x` (or `images`) `[N, H, W, C]`, `[N, C, H, W]` or `[N, H, W]`
  (uint8 0-255, or floats in [0, 1]) and `y` (or `labels`) `[N]` integer classes; validation from
  `val_path` (another `.npz`), else `x_val` / `y_val` in the same file, else a hash split by index.
- `builtin_images`: `builtin_classes` (10) classes x `builtin_per_class` (1000) procedurally drawn
  images (see `render_shapes`), deterministic for `data.seed`; the last `val_fraction` is held out.
  Drawn once per resolution (about 1 s for 10,000 images of 16 px) and kept in the cache folder.

Every image is served as uint8 `[H, W, C]` at the model's resolution: decoded once, the shorter side
resized to `image_size` (bilinear with antialiasing) and centre-cropped to a square. Decoded folders
are written once to the cache folder (`trials.data.base.cache_root()`) and memory-mapped afterwards;
the cache key is every file's (relative path, size), the resolution and the channels, so an edited
folder is decoded again. The fingerprint names the content (class names, relative paths, sizes, or
the `.npz` file's SHA-256; the generator version and settings for the built-in set), not the resolution.

Training order: epochs of seeded permutations of the training images; image `s` of the stream is a
pure function of (seed, s), so the position is one integer and resuming is exact. Held-out images are
the validation set in order, the same for every seed, learning rate and member.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from trials.config import DataConfig
from trials.data.base import seed_words
from trials.data.cache import cache_root, digest, in_val_split, write_atomic
from trials.data.unigram import UnigramEntropy, class_entropy
from trials.errors import TrialInputError

PIL_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
NETPBM_SUFFIXES = (".ppm", ".pgm", ".pnm")
IMAGE_SUFFIXES = PIL_SUFFIXES + NETPBM_SUFFIXES
BUILTIN_VERSION = 1
BUILTIN_CLASS_NAMES = ("disk", "square", "triangle", "ring", "cross", "bar", "stripes", "checker", "pair", "frame")
STATS_SAMPLE = 10_000  # images used for the per-channel mean and std


@dataclass(frozen=True)
class ImageArrays:
    """Decoded images at one resolution: uint8 `[N, H, W, C]` and int64 labels `[N]`, and the
    per-channel mean and standard deviation of the training images (on the [0, 1] scale)."""

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]


@lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed_words(seed, epoch, n)).permutation(n)


class ImageBatchStream:
    """Training images in epochs of seeded permutations; `state()` is the exact position.

    With `repeats` > 1 (DeiT's repeated augmentation) an epoch's order is timm's RepeatAugSampler's
    instead (`trials.deit.repeated_order`): each image `repeats` times in a row, 1/repeats of the images
    per epoch. With `prefetch` (default) the next batch is read on a background thread while the current
    one trains (reading a large batch from a memory-mapped cache takes a while); a batch is a pure
    function of its position, so prefetching never changes what is served."""

    def __init__(self, arrays: ImageArrays, batch_size: int, seed: int, *, prefetch: bool = True, repeats: int = 1) -> None:
        self.arrays, self.batch_size, self.seed, self.repeats = arrays, batch_size, seed, repeats
        self.n = len(arrays.train_y)
        if self.n < 1:
            raise TrialInputError("data: no training images")
        self.epoch_length = self.n if repeats == 1 else len(self.epoch_order(0))
        self.position = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="images") if prefetch else None
        self._ahead: tuple[int, Future[tuple[np.ndarray, np.ndarray]]] | None = None

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The image indices of epoch `epoch`, in order."""
        if self.repeats == 1:
            return _epoch_order(self.seed, epoch, self.n)
        from trials.deit import repeated_order  # timm (the images extra): only with repeated augmentation

        return repeated_order(self.seed, epoch, self.n, self.repeats)

    def indices(self, first: int, count: int) -> np.ndarray:
        """Image indices of stream positions `first .. first + count - 1`."""
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            epoch, index = divmod(first + i, self.epoch_length)
            out[i] = self.epoch_order(epoch)[index]
        return out

    def read(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        """The batch starting at stream position `first`: uint8 images `[B, H, W, C]`, int64 labels `[B]`."""
        idx = self.indices(first, self.batch_size)
        order = np.argsort(idx)  # sorted reads from a memory map, then back to the stream's order
        x = np.asarray(self.arrays.train_x[idx[order]])[np.argsort(order)]
        return x, np.asarray(self.arrays.train_y[idx], dtype=np.int64)

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """The next batch (see `read`)."""
        ahead, self._ahead = self._ahead, None
        batch = ahead[1].result() if ahead is not None and ahead[0] == self.position else self.read(self.position)
        self.position += self.batch_size
        if self._pool is not None:
            self._ahead = (self.position, self._pool.submit(self.read, self.position))
        return batch

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"kind": "images", "images": self.position, "seed": self.seed, "n": self.n}
        if self.repeats != 1:
            state["repeats"] = self.repeats
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        if (state.get("kind") != "images" or state.get("seed") != self.seed or state.get("n") != self.n
                or state.get("repeats", 1) != self.repeats):
            raise TrialInputError(f"data position {state} does not belong to this image stream (seed {self.seed}, {self.n} images)")
        self.position = int(state["images"])


class ImageSource(ABC):
    """One labelled image set. `vocab` is the number of classes (the ViT's output size)."""

    vocab: int
    fingerprint: str
    description: str
    class_names: tuple[str, ...]

    def __init__(self) -> None:
        self._arrays: dict[tuple[int, int], ImageArrays] = {}

    def arrays(self, image_size: int, channels: int) -> ImageArrays:
        """The decoded images at `image_size` x `image_size` with `channels` channels (cached)."""
        key = (image_size, channels)
        if key not in self._arrays:
            if channels not in (1, 3):
                raise TrialInputError(f"model.extra.channels: image data has 1 (grey) or 3 (RGB) channels, got {channels}")
            arrays = self._load(image_size, channels)
            if len(arrays.val_y) == 0:
                raise TrialInputError(f"{self.description}: no validation images; give data.val_path or a larger data.val_fraction")
            self._arrays[key] = arrays
        return self._arrays[key]

    @abstractmethod
    def _load(self, image_size: int, channels: int) -> ImageArrays: ...

    @abstractmethod
    def train_labels(self) -> np.ndarray:
        """The class of every training image, without decoding any image."""

    def unigram_entropy(self) -> UnigramEntropy:
        """The chance loss: the entropy of the training labels' class frequencies."""
        return class_entropy(self.fingerprint, self.train_labels())

    def train_stream(self, batch_size: int, seed: int, image_size: int, channels: int, repeats: int = 1) -> ImageBatchStream:
        return ImageBatchStream(self.arrays(image_size, channels), batch_size, seed, repeats=repeats)

    def eval_batches(self, n_batches: int, batch_size: int, image_size: int, channels: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The first `n_batches * batch_size` validation images in order (all of them if fewer), in batches."""
        arrays = self.arrays(image_size, channels)
        count = min(n_batches * batch_size, len(arrays.val_y))
        return [
            (np.array(arrays.val_x[i : min(i + batch_size, count)]), np.array(arrays.val_y[i : min(i + batch_size, count)], dtype=np.int64))
            for i in range(0, count, batch_size)
        ]


# ---- opening a source --------------------------------------------------------------------------------

_opened: dict[str, ImageSource] = {}


def image_source(cfg: DataConfig) -> ImageSource:
    """The image source `cfg` names (folders and files are scanned now and decoded on first use)."""
    if cfg.source == "builtin_images":
        key = f"builtin:{cfg.builtin_classes}:{cfg.builtin_per_class}:{cfg.seed}:{cfg.val_fraction}"
        if key not in _opened:
            _opened[key] = BuiltinImages(cfg.builtin_classes, cfg.builtin_per_class, cfg.seed, cfg.val_fraction)
        return _opened[key]
    if cfg.source != "images":
        raise TrialInputError(f"data.source {cfg.source!r} is not an image source (images, builtin_images)")
    if not cfg.path:
        raise TrialInputError("data.path: required for source 'images' (an image folder or an .npz file)")
    path = Path(os.path.expanduser(cfg.path))
    if path.is_dir():
        return FolderImages(path, cfg.val_path, cfg.val_fraction)
    if path.is_file() and path.suffix == ".npz":
        return NpzImages(path, cfg.val_path, cfg.val_fraction)
    if path.is_file():
        raise TrialInputError(f"data.path: {cfg.path}: an image source is a folder (one subfolder per class) or an .npz file")
    raise TrialInputError(f"data.path: {cfg.path}: no such file or folder")


def class_count(cfg: DataConfig) -> int:
    """The number of classes of an image source (for `model.vocab: auto`), without decoding images."""
    return image_source(cfg).vocab


def channel_stats(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std (on [0, 1]) of up to STATS_SAMPLE evenly spaced images of `x` `[N, H, W, C]`."""
    if len(x) == 0:
        raise TrialInputError("data: no training images")
    idx = np.unique(np.linspace(0, len(x) - 1, min(len(x), STATS_SAMPLE)).round().astype(np.int64))
    sample = np.asarray(x[idx], dtype=np.float64) / 255.0
    mean = sample.mean(axis=(0, 1, 2))
    std = np.maximum(sample.std(axis=(0, 1, 2)), 1e-3)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


# ---- the built-in procedural set ------------------------------------------------------------------------


class BuiltinImages(ImageSource):
    """Procedurally drawn shapes and textures (`render_shapes`), generated in memory for each resolution."""

    def __init__(self, classes: int, per_class: int, seed: int, val_fraction: float) -> None:
        super().__init__()
        if not 2 <= classes <= len(BUILTIN_CLASS_NAMES):
            raise TrialInputError(f"data.builtin_classes must be between 2 and {len(BUILTIN_CLASS_NAMES)}, got {classes}")
        self.classes, self.per_class, self.seed, self.val_fraction = classes, per_class, seed, val_fraction
        self.vocab = classes
        self.class_names = BUILTIN_CLASS_NAMES[:classes]
        total = classes * per_class
        self.n_val = max(1, round(total * val_fraction))
        if self.n_val >= total:
            raise TrialInputError(f"data.val_fraction {val_fraction} leaves no training images among {total}")
        self.fingerprint = f"builtin_images:v{BUILTIN_VERSION}:c{classes}:n{per_class}:seed{seed}:val{val_fraction:g}"
        self.description = f"built-in shapes and textures ({classes} classes x {per_class} images)"

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng(seed_words(self.seed, BUILTIN_VERSION, self.classes, self.per_class))

    def _labels(self, rng: np.random.Generator) -> np.ndarray:
        """Every image's class, in order: the generator's first draw (the images are drawn after it)."""
        return rng.permutation(np.repeat(np.arange(self.classes), self.per_class))

    def train_labels(self) -> np.ndarray:
        return self._labels(self._rng())[: self.classes * self.per_class - self.n_val]

    def _load(self, image_size: int, channels: int) -> ImageArrays:
        """Drawn once per resolution and kept in the cache folder (a new trial process loads it in milliseconds)."""
        folder = cache_root() / "images" / f"builtin-{digest(self.fingerprint, image_size, channels)}"
        names = ("train_x", "train_y", "val_x", "val_y")
        if (folder / "meta.json").is_file():
            try:
                loaded = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in names}
                meta = json.loads((folder / "meta.json").read_text())
                return ImageArrays(**loaded, mean=tuple(meta["mean"]), std=tuple(meta["std"]))
            except (OSError, ValueError, KeyError):
                pass  # a damaged entry: draw again
        total = self.classes * self.per_class
        rng = self._rng()
        labels = self._labels(rng)
        images = render_shapes(labels, image_size, rng)
        if channels == 1:
            images = to_grey(images)
        cut = total - self.n_val
        mean, std = channel_stats(images[:cut])
        arrays = ImageArrays(images[:cut], labels[:cut].astype(np.int64), images[cut:], labels[cut:].astype(np.int64), mean, std)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name in names:
                tmp = folder / f".{name}.{os.getpid()}.npy"
                np.save(tmp, getattr(arrays, name))
                os.replace(tmp, folder / f"{name}.npy")
            write_atomic(folder / "meta.json", json.dumps({"mean": mean, "std": std, "fingerprint": self.fingerprint}).encode())
        except OSError:
            pass  # a read-only cache: draw again next time
        return arrays


def _rotate(u: np.ndarray, v: np.ndarray, cx: np.ndarray, cy: np.ndarray, angle: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Image coordinates `[H, W]` -> each image's local frame `[n, H, W]` (centred, turned, in units of `scale`)."""
    c, s = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    du, dv = u[None] - cx[:, None, None], v[None] - cy[:, None, None]
    return (c * du + s * dv) / scale[:, None, None], (-s * du + c * dv) / scale[:, None, None]


def _shape_sdf(label: int, x: np.ndarray, y: np.ndarray, freq: np.ndarray) -> np.ndarray:
    """Signed distance (negative inside) of class `label` in local coordinates, or a texture coverage - 0.5."""
    r = np.hypot(x, y)
    ax, ay = np.abs(x), np.abs(y)
    if label == 0:  # disk
        return r - 1.0
    if label == 1:  # square
        return np.maximum(ax, ay) - 0.8
    if label == 2:  # triangle
        normals = [(math.cos(a), math.sin(a)) for a in (math.pi / 2, math.pi * 7 / 6, math.pi * 11 / 6)]
        return np.max(np.stack([nx * x + ny * y for nx, ny in normals]), axis=0) - 0.5
    if label == 3:  # ring
        return np.abs(r - 0.72) - 0.24
    if label == 4:  # cross
        return np.minimum(np.maximum(ax - 1.0, ay - 0.3), np.maximum(ax - 0.3, ay - 1.0))
    if label == 5:  # bar
        return np.maximum(ax - 1.0, ay - 0.32)
    if label == 6:  # stripes inside a disk
        inside = r - 1.0
        stripes = -np.sin(freq[:, None, None] * math.pi * x)
        return np.maximum(inside, stripes * 0.2)
    if label == 7:  # checkerboard inside a disk
        inside = r - 1.0
        checker = -np.sin(freq[:, None, None] * math.pi * x) * np.sin(freq[:, None, None] * math.pi * y)
        return np.maximum(inside, checker * 0.2)
    if label == 8:  # two disks
        return np.minimum(np.hypot(x - 0.55, y) - 0.42, np.hypot(x + 0.55, y) - 0.42)
    return np.abs(np.maximum(ax, ay) - 0.72) - 0.18  # 9: frame (a hollow square)


def render_shapes(labels: np.ndarray, size: int, rng: np.random.Generator, chunk: int = 2048) -> np.ndarray:
    """uint8 RGB images `[n, size, size, 3]`, one per label (class ids 0..9, see BUILTIN_CLASS_NAMES).

    Each image: a smooth background (random colour plus a random linear gradient), one shape or
    texture of its class at a random position, scale (0.28-0.5 of the half-width) and rotation, in a
    random colour at least 0.25 away in brightness from the background, a random distractor blob in
    half of the images, and Gaussian pixel noise (std 0.03-0.10). Shapes are anti-aliased over one
    pixel. Deterministic for the generator's state.
    """
    n = len(labels)
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    centres = (np.arange(size) + 0.5) / size * 2.0 - 1.0
    v, u = np.meshgrid(centres, centres, indexing="ij")  # v: rows (down), u: columns
    pixel = 2.0 / size
    for start in range(0, n, chunk):
        lab = labels[start : start + chunk]
        m = len(lab)
        scale = rng.uniform(0.45, 0.75, m) * (1.0 - (lab == 8) * 0.2)
        cx, cy = rng.uniform(-0.3, 0.3, m), rng.uniform(-0.3, 0.3, m)
        angle = rng.uniform(0.0, 2 * math.pi, m)
        freq = rng.uniform(1.6, 2.6, m)
        bg = rng.uniform(0.0, 1.0, (m, 3))
        fg = rng.uniform(0.0, 1.0, (m, 3))
        brightness_gap = fg.mean(axis=1) - bg.mean(axis=1)
        too_close = np.abs(brightness_gap) < 0.25
        shift = np.where(bg.mean(axis=1) > 0.5, -0.45, 0.45)
        fg[too_close] = np.clip(bg[too_close] + shift[too_close, None] + rng.uniform(-0.1, 0.1, (int(too_close.sum()), 3)), 0.0, 1.0)
        gradient = rng.uniform(-0.15, 0.15, (m, 2))
        x, y = _rotate(u, v, cx, cy, angle, scale)
        coverage = np.empty((m, size, size))
        for label in np.unique(lab):
            rows = lab == label
            sdf = _shape_sdf(int(label), x[rows], y[rows], freq[rows])
            coverage[rows] = np.clip(0.5 - sdf * scale[rows, None, None] / pixel, 0.0, 1.0)
        background = bg[:, None, None, :] + (gradient[:, 0, None, None] * u + gradient[:, 1, None, None] * v)[..., None]
        img = background * (1.0 - coverage[..., None]) + fg[:, None, None, :] * coverage[..., None]
        blob = rng.uniform(0.0, 1.0, m) < 0.5
        bx, by, br = rng.uniform(-0.9, 0.9, m), rng.uniform(-0.9, 0.9, m), rng.uniform(0.06, 0.14, m)
        blob_cov = np.clip(0.5 - (np.hypot(u[None] - bx[:, None, None], v[None] - by[:, None, None]) - br[:, None, None]) / pixel, 0, 1)
        blob_cov *= blob[:, None, None]
        img = img * (1.0 - blob_cov[..., None]) + rng.uniform(0.0, 1.0, (m, 1, 1, 3)) * blob_cov[..., None]
        img += rng.normal(0.0, 1.0, img.shape) * rng.uniform(0.02, 0.08, (m, 1, 1, 1))
        out[start : start + m] = np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return out


def to_grey(images: np.ndarray) -> np.ndarray:
    """RGB uint8 `[N, H, W, 3]` -> luminance `[N, H, W, 1]` (ITU-R 601 weights)."""
    grey = images.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    return np.clip(grey + 0.5, 0, 255).astype(np.uint8)[..., None]


# ---- decoding and resizing ----------------------------------------------------------------------------


def read_netpbm(path: Path) -> np.ndarray:
    """A binary PGM (P5) or PPM (P6) file with maxval <= 255 as uint8 `[H, W, C]`."""
    data = path.read_bytes()
    tokens: list[bytes] = []
    pos = 0
    while len(tokens) < 4:
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while end < len(data) and not data[end : end + 1].isspace():
            end += 1
        if end == pos:
            raise TrialInputError(f"{path}: truncated PPM/PGM header")
        tokens.append(data[pos:end])
        pos = end
    magic, width, height, maxval = tokens[0], int(tokens[1]), int(tokens[2]), int(tokens[3])
    if magic not in (b"P5", b"P6") or not 0 < maxval <= 255:
        raise TrialInputError(f"{path}: only binary 8-bit PGM (P5) / PPM (P6) files are read without Pillow")
    channels = 3 if magic == b"P6" else 1
    pixels = np.frombuffer(data, dtype=np.uint8, count=width * height * channels, offset=pos + 1)
    img = pixels.reshape(height, width, channels)
    return img if maxval == 255 else (img.astype(np.uint16) * 255 // maxval).astype(np.uint8)


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise TrialInputError(
            "data.path: decoding PNG/JPEG images needs Pillow, which is not installed: pip install pillow "
            "(or convert the images to binary .ppm/.pgm, or to arrays in an .npz file)"
        ) from None
    return Image


def decode_image(path: Path, channels: int) -> np.ndarray:
    """uint8 `[H, W, channels]` of one image file."""
    if path.suffix.lower() in NETPBM_SUFFIXES:
        img = read_netpbm(path)
    else:
        image_module = _pillow()
        try:
            with image_module.open(path) as im:
                img = np.asarray(im.convert("RGB" if channels == 3 else "L"))
        except OSError as exc:
            raise TrialInputError(f"{path}: cannot decode this image ({exc})") from None
    if img.ndim == 2:
        img = img[..., None]
    if img.shape[2] == channels:
        return img
    if channels == 1:
        return to_grey(img[None])[0]
    return np.repeat(img, 3, axis=2)


def resize_square(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 `[N, H, W, C]` (one shape) -> `[N, size, size, C]`: shorter side to `size` (bilinear,
    antialiased), then a centre crop. Unchanged when already `size` x `size`."""
    import torch
    import torch.nn.functional as F

    _, height, width, _ = images.shape
    if height == width == size:
        return images
    scale = size / min(height, width)
    new_h, new_w = max(size, round(height * scale)), max(size, round(width * scale))
    x = torch.from_numpy(np.array(images)).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", antialias=True, align_corners=False)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    x = x[:, :, top : top + size, left : left + size]
    return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def _decode_resized(path: Path, size: int, channels: int) -> np.ndarray:
    return resize_square(decode_image(path, channels)[None], size)[0]


# ---- folders ----------------------------------------------------------------------------------------------


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
    """A folder with one subfolder per class; decoded once into the cache at each resolution."""

    def __init__(self, root: Path, val_path: str | None, val_fraction: float) -> None:
        super().__init__()
        self.root = root
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

    def _load(self, image_size: int, channels: int) -> ImageArrays:
        folder = cache_root() / "images" / f"folder-{digest(self.signature, image_size, channels)}"
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            self._build(folder, image_size, channels)
        meta = json.loads(meta_path.read_text())
        shape = (image_size, image_size, channels)

        def mapped(name: str, count: int) -> np.ndarray:
            if count == 0:
                return np.empty((0, *shape), dtype=np.uint8)
            return np.memmap(folder / name, dtype=np.uint8, mode="r", shape=(count, *shape))

        return ImageArrays(
            mapped("train_x.u8", meta["train"]), np.load(folder / "train_y.npy"),
            mapped("val_x.u8", meta["val"]), np.load(folder / "val_y.npy"),
            tuple(meta["mean"]), tuple(meta["std"]),
        )

    def _build(self, folder: Path, image_size: int, channels: int) -> None:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent trials on one machine: one decodes, the others wait
            if (folder / "meta.json").is_file():
                return
            workers = max(1, min(16, os.cpu_count() or 1))
            counts = {}
            for split, items in (("train", self.train), ("val", self.val)):
                out_path = folder / f"{split}_x.u8"
                tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
                if items:
                    out = np.memmap(tmp, dtype=np.uint8, mode="w+", shape=(len(items), image_size, image_size, channels))
                    with ThreadPoolExecutor(workers) as pool:  # Pillow and torch release the GIL
                        for i, img in enumerate(pool.map(lambda it: _decode_resized(it[0], image_size, channels), items)):
                            out[i] = img
                    out.flush()
                    del out
                    os.replace(tmp, out_path)
                np.save(folder / f"{split}_y.npy", np.array([label for _, label in items], dtype=np.int64))
                counts[split] = len(items)
            train = np.memmap(folder / "train_x.u8", dtype=np.uint8, mode="r", shape=(counts["train"], image_size, image_size, channels))
            mean, std = channel_stats(train)
            meta = {"train": counts["train"], "val": counts["val"], "mean": mean, "std": std, "classes": list(self.class_names),
                    "image_size": image_size, "channels": channels, "source": str(self.root)}
            write_atomic(folder / "meta.json", json.dumps(meta, indent=2).encode())


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

    def _load(self, image_size: int, channels: int) -> ImageArrays:
        def convert(x: np.ndarray) -> np.ndarray:
            if x.shape[-1] != channels:
                x = to_grey(x) if channels == 1 else np.repeat(x, 3, axis=3)
            return resize_square(x, image_size) if len(x) else np.empty((0, image_size, image_size, channels), np.uint8)

        train_x = convert(self.x)
        mean, std = channel_stats(train_x)
        return ImageArrays(train_x, self.y, convert(self.vx), self.vy, mean, std)
