"""The loss of a model that learned only frequencies: the unigram entropy of the training tokens
(for the ViT's image data, the entropy of the class frequencies: the chance loss).

A language model that predicts every token by its frequency in the training data, whatever the
context, has an evaluation loss of about the unigram entropy `H = -sum_v p_v ln p_v` (in nats).
A run whose final evaluation loss is not meaningfully below it has learned nothing else: it is
`stalled` (see `trials.divergence.stall_reason`). The trial compares with the frequency-only loss on
its own evaluation batches (`UnigramEntropy.cross_entropy`): a handful of held-out batches can sit
0.05 nats above or below `H` (measured on the built-in corpus), as much as a margin, while a
stalled run sits within a few thousandths of the loss the frequencies give on the same batches.

- Flat-array sources (built-in corpus, local text / JSONL / Parquet, token files, synthetic):
  exact, from the counts of every training token; computed once and cached in the corpus cache,
  keyed by the corpus fingerprint (which names the content), so reopening costs one small read.
- Hugging Face sources: estimated from the first `HF_SAMPLE_TOKENS` training tokens in stored
  order (held-out documents skipped), with the Miller-Madow bias correction `(m - 1) / 2N`
  (m distinct tokens seen in N) for the token types a sample misses; the count is stated.
- Image sources: the class-frequency entropy of the training labels (exact, no image decoded).

Every source has `unigram_entropy()`; `trials.data.unigram_entropy(cfg)` opens the data a config
names and returns it (numpy only, no torch: the controller can call it on a planned data config).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from trials.data.cache import cache_root, digest, write_atomic

HF_SAMPLE_TOKENS = 1_000_000  # tokens a streamed source's estimate counts
_COUNT_CHUNK = 1 << 24  # tokens counted per chunk of a (memory-mapped) token array

Kind = Literal["tokens", "classes"]


@dataclass(frozen=True)
class UnigramEntropy:
    """The frequency-only loss of a data set, in nats, and how it was obtained."""

    nats: float
    counted: int  # training tokens (or labelled images) counted
    exact: bool  # True: every training token was counted; False: an estimate from the first `counted`
    kind: Kind  # "tokens": unigram entropy; "classes": class-frequency entropy (chance loss)
    fingerprint: str  # the data it was computed on
    counts: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.zeros(0, np.int64))  # per id

    def cross_entropy(self, targets: np.ndarray, vocab: int | None = None) -> float:
        """The mean loss on `targets` (ids) of predicting every id by its training frequency, smoothed
        by half a count per id of the vocabulary (an id never seen in training is not infinitely
        surprising): what a run that learned only frequencies scores on these targets."""
        size = max(len(self.counts), int(vocab or 0), int(np.max(targets)) + 1 if np.size(targets) else 0)
        counts = np.zeros(size, dtype=np.float64)
        counts[: len(self.counts)] = self.counts
        log_p = np.log(counts + 0.5) - math.log(counts.sum() + 0.5 * size)
        return float(-log_p[np.asarray(targets, dtype=np.int64)].mean())

    @property
    def name(self) -> str:
        return "unigram entropy" if self.kind == "tokens" else "class-frequency entropy (chance)"

    @property
    def learned(self) -> str:
        """What a model at this loss has learned."""
        return "token frequencies" if self.kind == "tokens" else "class frequencies"

    def describe(self) -> str:
        unit = "training tokens" if self.kind == "tokens" else "training labels"
        how = f"exact, {self.counted:,} {unit}" if self.exact else f"estimated from the first {self.counted:,} {unit}"
        return f"{self.name} {self.nats:.4f} nats ({how})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, without the counts."""
        return {"nats": self.nats, "counted": self.counted, "exact": self.exact, "kind": self.kind,
                "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any], counts: np.ndarray | None = None) -> "UnigramEntropy":
        return cls(nats=float(d["nats"]), counted=int(d["counted"]), exact=bool(d["exact"]), kind=d["kind"],
                   fingerprint=str(d["fingerprint"]),
                   counts=np.zeros(0, np.int64) if counts is None else np.asarray(counts, dtype=np.int64))


def entropy_nats(counts: np.ndarray | Iterable[int]) -> float:
    """Plug-in entropy `-sum p ln p` (nats) of a vector of counts (zeros ignored)."""
    c = np.asarray(list(counts) if not isinstance(counts, np.ndarray) else counts, dtype=np.float64)
    c = c[c > 0]
    total = c.sum()
    if total <= 0:
        raise ValueError("entropy of an empty sample")
    p = c / total
    return float(-(p * np.log(p)).sum())


def miller_madow(counts: np.ndarray) -> float:
    """Entropy estimate with the Miller-Madow bias correction: plug-in + (distinct - 1) / (2 N)."""
    n = int(counts.sum())
    return entropy_nats(counts) + (int((counts > 0).sum()) - 1) / (2.0 * n)


def token_counts(tokens: np.ndarray, vocab: int) -> np.ndarray:
    """How often each id in `[0, max(vocab, largest id + 1))` occurs in a flat token array (chunked:
    a memory-mapped file is never read into memory whole)."""
    counts = np.zeros(max(1, vocab), dtype=np.int64)
    for start in range(0, len(tokens), _COUNT_CHUNK):
        part = np.bincount(np.asarray(tokens[start : start + _COUNT_CHUNK]).astype(np.int64, copy=False))
        if len(part) > len(counts):
            counts = np.concatenate([counts, np.zeros(len(part) - len(counts), dtype=np.int64)])
        counts[: len(part)] += part
    return counts


def cached(fingerprint: str, compute: Callable[[], UnigramEntropy], *key: object) -> UnigramEntropy:
    """`compute()` once per data fingerprint (and `key`), kept in the corpus cache: the figures as
    JSON, the counts as `.npy` (written first: the JSON's presence means both are whole)."""
    stem = cache_root() / "corpus" / f"unigram-{digest(fingerprint, *key)}"
    meta, counts_path = stem.with_suffix(".json"), stem.with_suffix(".npy")
    if meta.is_file() and counts_path.is_file():
        try:
            found = UnigramEntropy.from_dict(json.loads(meta.read_text()), np.load(counts_path))
            if found.fingerprint == fingerprint and int(found.counts.sum()) == found.counted:
                return found
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry: compute again
    value = compute()
    try:
        buffer = io.BytesIO()
        np.save(buffer, value.counts)
        write_atomic(counts_path, buffer.getvalue())
        write_atomic(meta, json.dumps(value.to_dict()).encode())
    except OSError:
        pass  # a read-only or full cache: the value is still right
    return value


def exact_tokens(fingerprint: str, tokens: np.ndarray, vocab: int) -> UnigramEntropy:
    """The exact unigram entropy of a flat array of training tokens (cached by fingerprint)."""

    def compute() -> UnigramEntropy:
        counts = token_counts(tokens, vocab)
        return UnigramEntropy(entropy_nats(counts), int(counts.sum()), True, "tokens", fingerprint, counts)

    return cached(fingerprint, compute, "exact")


def estimated_tokens(fingerprint: str, chunks: Iterable[np.ndarray], vocab: int, limit: int = HF_SAMPLE_TOKENS) -> UnigramEntropy:
    """An estimate from the first `limit` tokens of `chunks` (cached by fingerprint and `limit`).
    Exact (and so marked) when the data holds fewer tokens than `limit`."""

    def compute() -> UnigramEntropy:
        counts = np.zeros(max(1, vocab), dtype=np.int64)
        seen, exhausted = 0, True
        for chunk in chunks:
            take = np.asarray(chunk[: limit - seen]).astype(np.int64, copy=False)
            part = np.bincount(take, minlength=len(counts))
            if len(part) > len(counts):
                counts = np.concatenate([counts, np.zeros(len(part) - len(counts), dtype=np.int64)])
            counts[: len(part)] += part
            seen += len(take)
            if seen >= limit:
                exhausted = False
                break
        if seen == 0:
            raise ValueError("no training tokens to count")
        nats = entropy_nats(counts) if exhausted else miller_madow(counts)
        return UnigramEntropy(nats, seen, exhausted, "tokens", fingerprint, counts)

    return cached(fingerprint, compute, "sample", limit)


def class_entropy(fingerprint: str, labels: np.ndarray) -> UnigramEntropy:
    """The chance loss of a classification set: the entropy of its training labels' frequencies."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64))
    return UnigramEntropy(entropy_nats(counts), int(counts.sum()), True, "classes", fingerprint, counts)
