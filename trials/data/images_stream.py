"""The order in which a trial reads its training images: epochs of seeded permutations.

Image `s` of the stream is a pure function of (seed, s), so the position is one integer and resuming is
exact. A batch is served as views (the centre `image_size` squares, uint8 `[B, S, S, C]`) or, for a
recipe that takes its own random crop, as the whole stored images (a list of uint8 `[h, w, C]`).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np

from trials.data.base import seed_words
from trials.data.images_store import ImageArrays
from trials.errors import TrialInputError

Batch = tuple[np.ndarray | list[np.ndarray], np.ndarray]


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

    def __init__(self, arrays: ImageArrays, batch_size: int, seed: int, *, prefetch: bool = True, repeats: int = 1,
                 whole: bool = False) -> None:
        self.arrays, self.batch_size, self.seed, self.repeats, self.whole = arrays, batch_size, seed, repeats, whole
        self.n = len(arrays.train_y)
        if self.n < 1:
            raise TrialInputError("data: no training images")
        self.epoch_length = self.n if repeats == 1 else len(self.epoch_order(0))
        self.position = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="images") if prefetch else None
        self._ahead: tuple[int, Future[Batch]] | None = None

    def serve_whole(self, whole: bool) -> None:
        """Serve whole images (True) or views from now on (drops a batch read ahead in the other form)."""
        if whole != self.whole:
            self.whole, self._ahead = whole, None

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

    def read(self, first: int, whole: bool | None = None) -> Batch:
        """The batch starting at stream position `first`: the images (views `[B, S, S, C]`, or with
        `whole` (default: the stream's) the whole stored images, a list) and int64 labels `[B]`."""
        idx = self.indices(first, self.batch_size)
        whole = self.whole if whole is None else whole
        images = self.arrays.train.images(idx) if whole else self.arrays.train_view(idx)
        return images, np.asarray(self.arrays.train_y[idx], dtype=np.int64)

    def next_batch(self) -> Batch:
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
