"""The interface every image source implements (`ImageSource`): what it gives a trial (`ImageArrays`,
`trials.data.images_store`), the training stream and the evaluation batches; the sources themselves
are in `trials.data.images_builtin` and `trials.data.images_files`.

A source keeps each split whole, at a shorter side chosen by the trial (`trials.data.images_store`):

- the training images at `train_side` (DeiT's recipe: 256 for a 224 px model, from which the
  random-resized-crop is taken);
- the held-out images at `eval_side(image_size, crop_pct)` (DeiT: 224 / 0.875 = 256).

The *view* of a stored image is its centre `image_size` square: the evaluation input (timm's and DeiT's
evaluation transform: resize the shorter side to `floor(image_size / crop_pct)`, bicubic, centre crop),
and the training input of a recipe without a random crop. With the defaults (`crop_pct` 1, `train_side`
the evaluation side) a view is the image's shorter side resized to the model's resolution and centre-
cropped, as before format 2 of the cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from trials.data.images_decode import eval_side
from trials.data.images_store import CachedSplit, ImageArrays
from trials.data.images_stream import ImageBatchStream
from trials.data.unigram import UnigramEntropy, class_entropy
from trials.errors import TrialInputError


class ImageSource(ABC):
    """One labelled image set. `vocab` is the number of classes (the ViT's output size)."""

    vocab: int
    fingerprint: str
    description: str
    class_names: tuple[str, ...]

    def __init__(self) -> None:
        self._splits: dict[tuple[str, int, int], CachedSplit] = {}

    def split(self, split: str, side: int, channels: int) -> CachedSplit:
        """Split `split` ("train" / "val") whole at shorter side `side` (cached; see `_split`)."""
        if channels not in (1, 3):
            raise TrialInputError(f"model.extra.channels: image data has 1 (grey) or 3 (RGB) channels, got {channels}")
        key = (split, side, channels)
        if key not in self._splits:
            self._splits[key] = self._split(split, side, channels)
        return self._splits[key]

    @abstractmethod
    def _split(self, split: str, side: int, channels: int) -> CachedSplit:
        """Split `split` with every image resized to shorter side `side` (decoded, or read from the cache)."""

    @abstractmethod
    def train_labels(self) -> np.ndarray:
        """The class of every training image, without decoding any image."""

    def arrays(self, image_size: int, channels: int, *, crop_pct: float = 1.0, train_side: int | None = None) -> ImageArrays:
        """The images a trial at resolution `image_size` reads: the held-out ones at the evaluation side
        `floor(image_size / crop_pct)`, the training ones at `train_side` (None: the evaluation side)."""
        val_side = eval_side(image_size, crop_pct)
        train_side = val_side if train_side is None else train_side
        if train_side < image_size:
            raise TrialInputError(f"train.vision.cache_size: {train_side} is smaller than the model's image_size {image_size}")
        val = self.split("val", val_side, channels)
        if len(val.labels) == 0:
            raise TrialInputError(f"{self.description}: no validation images; give data.val_path or a larger data.val_fraction")
        train = self.split("train", train_side, channels)
        return ImageArrays(train.store, train.labels, val.store, val.labels, train.mean, train.std, image_size)

    def unigram_entropy(self) -> UnigramEntropy:
        """The chance loss: the entropy of the training labels' class frequencies."""
        return class_entropy(self.fingerprint, self.train_labels())

    def train_stream(self, batch_size: int, seed: int, image_size: int, channels: int, repeats: int = 1, *,
                     crop_pct: float = 1.0, train_side: int | None = None, whole: bool = False) -> ImageBatchStream:
        """The training stream (`ImageBatchStream`); `whole`: serve whole images rather than views."""
        arrays = self.arrays(image_size, channels, crop_pct=crop_pct, train_side=train_side)
        return ImageBatchStream(arrays, batch_size, seed, repeats=repeats, whole=whole)

    def eval_batches(self, n_batches: int, batch_size: int, image_size: int, channels: int, *,
                     crop_pct: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
        """The evaluation views of the first `n_batches * batch_size` held-out images in order (all of
        them if fewer), in batches of uint8 `[B, S, S, C]` and int64 labels."""
        val = self.split("val", eval_side(image_size, crop_pct), channels)
        if len(val.labels) == 0:
            raise TrialInputError(f"{self.description}: no validation images; give data.val_path or a larger data.val_fraction")
        count = min(n_batches * batch_size, len(val.labels))
        return [
            (val.store.centre(range(i, min(i + batch_size, count)), image_size), np.array(val.labels[i : min(i + batch_size, count)], dtype=np.int64))
            for i in range(0, count, batch_size)
        ]
