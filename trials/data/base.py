"""The data interface of a trial: a `TokenSource` gives a deterministic stream of training
batches with an exact, JSON-serialisable position, fixed evaluation batches, its vocabulary
size and a fingerprint.

A batch is an int64 array `[batch_size, seq_len + 1]`: inputs are `[:, :-1]`, targets `[:, 1:]`.

`ArrayTokenSource` serves every source whose tokens fit in a flat (memory-mapped) array:
the built-in corpus, local files after tokenization, pre-tokenized binaries and the
synthetic source. Its training order is a sequence of epochs; each epoch cuts the train
tokens into windows of `seq_len + 1` at a random offset and visits them in a random
permutation (no window twice per epoch). Sequence `s` of the stream is a pure function of
(seed, seq_len, s), so the position is one integer and resuming is exact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from trials.data.unigram import UnigramEntropy, exact_tokens
from trials.errors import TrialInputError


class BatchStream(ABC):
    """Training batches in a fixed order; `state()` is the exact position (JSON-safe)."""

    @abstractmethod
    def next_batch(self) -> np.ndarray:
        """The next `[batch_size, seq_len + 1]` int64 batch."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The position after the last batch returned, enough to continue exactly."""

    @abstractmethod
    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a position returned by `state()`."""


class TokenSource(ABC):
    """One corpus: training batches deterministic for a seed, fixed held-out batches."""

    vocab: int  # the tokenizer's vocabulary size: the model's vocab must be at least this
    fingerprint: str  # identifies the exact tokens (corpus, tokenizer, split); stored with every result
    description: str  # one line for humans

    @abstractmethod
    def train_stream(self, batch_size: int, seq_len: int, seed: int) -> BatchStream:
        """The training batches for `seed` (the same seed gives the same order)."""

    @abstractmethod
    def eval_batches(self, n_batches: int, batch_size: int, seq_len: int) -> list[np.ndarray]:
        """Held-out batches, identical for every seed, learning rate and member."""

    @abstractmethod
    def unigram_entropy(self) -> UnigramEntropy:
        """The loss of predicting every token by its training frequency (`trials.data.unigram`)."""


def seed_words(*values: int) -> list[int]:
    """Non-negative 32-bit words for `np.random.SeedSequence` from any Python ints."""
    words: list[int] = []
    for v in values:
        v = int(v)
        words.extend([v & 0xFFFFFFFF, (v >> 32) & 0xFFFFFFFF, 1 if v < 0 else 0])
    return words


class ArrayBatchStream(BatchStream):
    """Epochs of shuffled, non-overlapping windows of a flat token array."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, *, name: str) -> None:
        self.tokens = tokens
        self.batch_size = batch_size
        self.window = seq_len + 1
        self.seed = seed
        # Any offset in [0, window) must leave n_windows full windows.
        self.n_windows = (len(tokens) - (self.window - 1)) // self.window
        if self.n_windows < 1:
            raise TrialInputError(
                f"{name}: {len(tokens)} training tokens, fewer than one sequence of {self.window} "
                f"(model.seq_len + 1); use more data or a shorter seq_len"
            )
        self.position = 0  # sequences consumed
        self._epoch = -1
        self._offset = 0
        self._perm: np.ndarray = np.empty(0, dtype=np.int64)

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            rng = np.random.default_rng(seed_words(self.seed, epoch, self.window))
            self._offset = int(rng.integers(0, self.window))
            self._perm = rng.permutation(self.n_windows)
            self._epoch = epoch

    def starts(self, first: int, count: int) -> np.ndarray:
        """Token offsets of sequences `first .. first + count - 1` of the stream."""
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            epoch, index = divmod(first + i, self.n_windows)
            self._set_epoch(epoch)
            out[i] = self._offset + int(self._perm[index]) * self.window
        return out

    def next_batch(self) -> np.ndarray:
        starts = self.starts(self.position, self.batch_size)
        self.position += self.batch_size
        return np.stack([np.asarray(self.tokens[s : s + self.window], dtype=np.int64) for s in starts])

    def state(self) -> dict[str, Any]:
        return {"kind": "array", "sequences": self.position, "seed": self.seed, "window": self.window}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "array" or state.get("window") != self.window or state.get("seed") != self.seed:
            raise TrialInputError(
                f"data position {state} does not belong to this stream (seed {self.seed}, window {self.window})"
            )
        self.position = int(state["sequences"])


class ArrayTokenSource(TokenSource):
    """A source whose train and validation tokens are flat arrays (usually memory-mapped)."""

    def __init__(self, train: np.ndarray, val: np.ndarray, *, vocab: int, fingerprint: str, description: str) -> None:
        self.train = train
        self.val = val
        self.vocab = vocab
        self.fingerprint = fingerprint
        self.description = description

    def train_stream(self, batch_size: int, seq_len: int, seed: int) -> BatchStream:
        return ArrayBatchStream(self.train, batch_size, seq_len, seed, name=self.description)

    def eval_batches(self, n_batches: int, batch_size: int, seq_len: int) -> list[np.ndarray]:
        window = seq_len + 1
        if len(self.val) < window:
            raise TrialInputError(
                f"{self.description}: {len(self.val)} validation tokens, fewer than one sequence of {window}; "
                f"use more data, a larger data.val_fraction or a shorter seq_len"
            )
        count = n_batches * batch_size
        # Evenly spread over the whole validation set, the same for every seed.
        starts = np.linspace(0, len(self.val) - window, count).round().astype(np.int64)
        rows = np.stack([np.asarray(self.val[s : s + window], dtype=np.int64) for s in starts])
        return [rows[i * batch_size : (i + 1) * batch_size] for i in range(n_batches)]

    def unigram_entropy(self) -> UnigramEntropy:
        """Exact: every training token counted (once per fingerprint; then read from the cache)."""
        return exact_tokens(self.fingerprint, self.train, self.vocab)
