"""The built-in image set: `builtin_classes` (10) classes x `builtin_per_class` (1000) procedurally drawn
images of shapes and textures (`render_shapes`), deterministic for `data.seed`; the last `val_fraction`
of the drawing order is held out. Needs no download and no extra.

The drawing is in continuous coordinates, so an image drawn at a larger size is the same scene at a
higher resolution: a split cached at shorter side `side` is simply drawn at `side` (about 1 s for 10,000
images of 16 px), both splits at once, and kept in the cache folder (`trials.data.images_store`).
"""

from __future__ import annotations

import math

import numpy as np

from trials.data.base import seed_words
from trials.data.images_base import ImageSource
from trials.data.images_decode import to_grey
from trials.data.images_store import CachedSplit, StoreKey, cached_split, in_memory_split
from trials.errors import TrialInputError

BUILTIN_VERSION = 1
BUILTIN_CLASS_NAMES = ("disk", "square", "triangle", "ring", "cross", "bar", "stripes", "checker", "pair", "frame")


class BuiltinImages(ImageSource):
    """Procedurally drawn shapes and textures (`render_shapes`), drawn at each shorter side a trial asks for."""

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

    def _draw(self, side: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """Every image (train, then held out) at `side` x `side`, and the labels."""
        rng = self._rng()
        labels = self._labels(rng).astype(np.int64)
        images = render_shapes(labels, side, rng)
        return (to_grey(images) if channels == 1 else images), labels

    def _split(self, split: str, side: int, channels: int) -> CachedSplit:
        """Both splits at `side` come from one drawing and are cached together (a new trial process loads
        them in milliseconds); a read-only cache folder: drawn again in memory."""
        cut = self.classes * self.per_class - self.n_val
        drawn: list[tuple[np.ndarray, np.ndarray]] = []

        def part(name: str) -> tuple[np.ndarray, np.ndarray]:
            if not drawn:
                drawn.append(self._draw(side, channels))
            images, labels = drawn[0]
            rows = slice(0, cut) if name == "train" else slice(cut, None)
            return images[rows], labels[rows]

        out: dict[str, CachedSplit] = {}
        for name in ("train", "val"):
            key = StoreKey("builtin", self.fingerprint, name, side, channels, "drawn")
            count = cut if name == "train" else self.n_val
            try:
                out[name] = cached_split(key, count, lambda name=name: part(name), {"fingerprint": self.fingerprint})
            except OSError:
                images, labels = part(name)
                out[name] = in_memory_split(list(images), labels, channels)
        return out[split]


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
