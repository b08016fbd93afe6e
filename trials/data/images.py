"""Image sources of the ViT family: a local image folder, arrays in an `.npz` file, and a built-in
procedural image set that needs no download (`image_source` opens the one a `DataConfig` names).

The code is split by job; every public name is importable from here:

| module | what |
|---|---|
| `trials.data.images_base` | `ImageSource`: the interface of every source |
| `trials.data.images_store` | the cache: whole images at one shorter side (`ImageStore`), its format and key; `ImageArrays` (what a trial reads) and the views |
| `trials.data.images_decode` | decoding (Pillow; PPM / PGM without it), resizing, the centre crop |
| `trials.data.images_files` | `FolderImages` (a folder per class) and `NpzImages` |
| `trials.data.images_builtin` | `BuiltinImages` and `render_shapes` |
| `trials.data.images_stream` | `ImageBatchStream`: the seeded training order, exact resume |

Every image is kept whole with its shorter side resized (bicubic) to a side the trial chooses: the
training split at the training cache's side (DeiT's recipe: 256 for 224 px, `train.vision.cache_size`),
from which the random-resized-crop is taken; the held-out split at the evaluation resize,
`floor(image_size / crop_pct)`, whose centre `image_size` crop is the evaluation input. A trial
without a random crop trains on the same centre view of its training images. Decoded folders are
written once to the cache folder (`trials.data.base.cache_root()`) and memory-mapped afterwards.

Training order: epochs of seeded permutations of the training images; image `s` of the stream is a
pure function of (seed, s), so the position is one integer and resuming is exact. Held-out images are
the validation set in order, the same for every seed, learning rate and member.
"""

from __future__ import annotations

import os
from pathlib import Path

from trials.config import DataConfig
from trials.data.images_base import ImageSource
from trials.data.images_builtin import BUILTIN_CLASS_NAMES, BUILTIN_VERSION, BuiltinImages, render_shapes
from trials.data.images_decode import (
    IMAGE_SUFFIXES,
    NETPBM_SUFFIXES,
    PIL_SUFFIXES,
    decode_image,
    eval_side,
    read_netpbm,
    resize_shorter,
    resize_square,
    to_grey,
)
from trials.data.images_files import FolderImages, NpzImages
from trials.data.images_store import STATS_SAMPLE, STORE_FORMAT, ImageArrays, ImageStore, store_stats
from trials.data.images_stream import ImageBatchStream
from trials.errors import TrialInputError

__all__ = [
    "BUILTIN_CLASS_NAMES", "BUILTIN_VERSION", "IMAGE_SUFFIXES", "NETPBM_SUFFIXES", "PIL_SUFFIXES", "STATS_SAMPLE",
    "STORE_FORMAT", "BuiltinImages", "FolderImages", "ImageArrays", "ImageBatchStream", "ImageSource", "ImageStore",
    "NpzImages", "class_count", "decode_image", "eval_side", "image_source", "read_netpbm", "render_shapes",
    "resize_shorter", "resize_square", "store_stats", "to_grey",
]

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
