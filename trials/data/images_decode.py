"""Decoding and resizing images for the ViT's image sources (`trials.data.images`).

Files: PNG, JPEG, BMP, GIF, WebP and TIFF through Pillow (an optional dependency: a one-line error says
so when it is missing); binary PPM / PGM without it. Resizing follows torchvision's `Resize(int)` and
`CenterCrop`, the transforms DeiT's evaluation uses: the shorter side becomes `side` and the longer one
`int(side * long / short)`, bicubic; a centre crop starts at `round((H - size) / 2)`. With Pillow the
resize is Pillow's own bicubic (what torchvision runs on a PIL image, so the evaluation view equals
DeiT's exactly); without it, torch's antialiased bicubic, which differs from Pillow's by a level or two
of 255. `RESIZER` names the one in use and is part of every cache key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from trials.errors import TrialInputError

PIL_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
NETPBM_SUFFIXES = (".ppm", ".pgm", ".pnm")
IMAGE_SUFFIXES = PIL_SUFFIXES + NETPBM_SUFFIXES


def _pillow_or_none() -> Any:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def resizer() -> str:
    """The resize implementation of this process (a cache key part): Pillow's bicubic when installed."""
    return "pil-bicubic" if _pillow_or_none() is not None else "torch-bicubic-aa"


def _pillow() -> Any:
    image_module = _pillow_or_none()
    if image_module is None:
        raise TrialInputError(
            "data.path: decoding PNG/JPEG images needs Pillow, which is not installed: pip install pillow "
            "(or convert the images to binary .ppm/.pgm, or to arrays in an .npz file)"
        )
    return image_module


def to_grey(images: np.ndarray) -> np.ndarray:
    """RGB uint8 `[N, H, W, 3]` -> luminance `[N, H, W, 1]` (ITU-R 601 weights)."""
    grey = images.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    return np.clip(grey + 0.5, 0, 255).astype(np.uint8)[..., None]


def with_channels(img: np.ndarray, channels: int) -> np.ndarray:
    """uint8 `[H, W, C]` (C 1 or 3) as `[H, W, channels]`: grey repeated, or RGB to luminance."""
    if img.shape[2] == channels:
        return img
    if channels == 1:
        return to_grey(img[None])[0]
    return np.repeat(img, 3, axis=2)


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


def decode_image(path: Path, channels: int) -> np.ndarray:
    """uint8 `[H, W, channels]` of one image file, at its own size."""
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
    return with_channels(img, channels)


def shorter_side_size(height: int, width: int, side: int) -> tuple[int, int]:
    """(height, width) after resizing the shorter side to `side` (torchvision's `Resize(side)` rule)."""
    if width <= height:
        return int(side * height / width), side
    return side, int(side * width / height)


def centre_offsets(height: int, width: int, size: int) -> tuple[int, int]:
    """(top, left) of the centre `size` x `size` crop (torchvision's `CenterCrop` rounding)."""
    return int(round((height - size) / 2.0)), int(round((width - size) / 2.0))


def resize_shorter(img: np.ndarray, side: int) -> np.ndarray:
    """uint8 `[H, W, C]` with its shorter side resized to `side` (bicubic; see the module docstring)."""
    height, width, channels = img.shape
    new_h, new_w = shorter_side_size(height, width, side)
    if (new_h, new_w) == (height, width):
        return img
    image_module = _pillow_or_none()
    if image_module is not None:
        pil = image_module.fromarray(np.ascontiguousarray(img[..., 0] if channels == 1 else img))
        out = np.asarray(pil.resize((new_w, new_h), image_module.BICUBIC))
        return out[..., None] if out.ndim == 2 else out
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.array(img)).permute(2, 0, 1)[None].float()
    x = F.interpolate(x, size=(new_h, new_w), mode="bicubic", antialias=True, align_corners=False)
    return x[0].round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()


def load_resized(path: Path, side: int, channels: int) -> np.ndarray:
    """One image file decoded and resized to shorter side `side`: uint8 `[h, w, channels]`."""
    return resize_shorter(decode_image(path, channels), side)


def eval_side(size: int, crop_pct: float) -> int:
    """The shorter side an evaluation image is resized to before its centre `size` crop: timm's
    `floor(size / crop_pct)` (256 for 224 at DeiT's 0.875)."""
    return math.floor(size / crop_pct)


def resize_square(images: np.ndarray, size: int, crop_pct: float = 1.0) -> np.ndarray:
    """uint8 `[N, H, W, C]` -> `[N, size, size, C]`: the evaluation view of each image (shorter side to
    `eval_side(size, crop_pct)`, bicubic, then the centre crop). Unchanged when already `size` x `size`
    and `crop_pct` is 1."""
    side = eval_side(size, crop_pct)
    out = np.empty((len(images), size, size, images.shape[3]), dtype=np.uint8)
    for i, img in enumerate(images):
        resized = resize_shorter(np.asarray(img), side)
        top, left = centre_offsets(resized.shape[0], resized.shape[1], size)
        out[i] = resized[top : top + size, left : left + size]
    return out
