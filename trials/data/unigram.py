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
  `sweeper launch` computes it on the driver and publishes it in the sweep's storage
  (`publish`); a trial on any node reads it from there (`trials.data.cache.shared_cache`) instead
  of scanning the training file again.
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
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from trials.data.cache import cache_root, digest, shared_cache, shared_cache_path, write_atomic
from trials.infra import StorageError
from trials.storage import Storage

SCAN_LOG_ENV = "LAYERROPE_SWEEPER_UNIGRAM_LOG"  # a test seam: one JSON line per computation (a scan of the data)

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


def _stem(fingerprint: str, *key: object) -> str:
    return f"unigram-{digest(fingerprint, *key)}"


def _load(meta: bytes, counts: bytes, fingerprint: str) -> UnigramEntropy | None:
    try:
        found = UnigramEntropy.from_dict(json.loads(meta), np.load(io.BytesIO(counts)))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged entry: compute again
    return found if found.fingerprint == fingerprint and int(found.counts.sum()) == found.counted else None


def _encoded(value: UnigramEntropy) -> tuple[bytes, bytes]:
    buffer = io.BytesIO()
    np.save(buffer, value.counts)
    return json.dumps(value.to_dict()).encode(), buffer.getvalue()


def _from_shared(storage: Storage, stem: str, fingerprint: str) -> UnigramEntropy | None:
    try:
        meta = storage.read_bytes(shared_cache_path(storage, f"{stem}.json"))
        counts = storage.read_bytes(shared_cache_path(storage, f"{stem}.npy"))
    except StorageError:
        return None  # the storage is unreachable now: count locally (the same numbers)
    return _load(meta, counts, fingerprint) if meta is not None and counts is not None else None


def publish(storage: Storage, value: UnigramEntropy, *key: object) -> None:
    """Put `value` in the sweep's storage, where the trials of every node read it (`cached`); the counts
    first: the JSON's presence means both are whole. Raises `StorageError`."""
    meta, counts = _encoded(value)
    stem = _stem(value.fingerprint, *key)
    storage.write_bytes(shared_cache_path(storage, f"{stem}.npy"), counts)
    storage.write_bytes(shared_cache_path(storage, f"{stem}.json"), meta)


def cached(fingerprint: str, compute: Callable[[], UnigramEntropy], *key: object) -> UnigramEntropy:
    """`compute()` once per data fingerprint (and `key`), kept in the corpus cache: the figures as
    JSON, the counts as `.npy` (written first: the JSON's presence means both are whole). While a
    sweep's trial runs, the sweep's storage is looked in before computing (`shared_cache`)."""
    stem = cache_root() / "corpus" / _stem(fingerprint, *key)
    meta, counts_path = stem.with_suffix(".json"), stem.with_suffix(".npy")
    if meta.is_file() and counts_path.is_file():
        try:
            found = _load(meta.read_bytes(), counts_path.read_bytes(), fingerprint)
        except OSError:
            found = None
        if found is not None:
            return found
    storage = shared_cache()
    value = _from_shared(storage, stem.name, fingerprint) if storage is not None else None
    if value is None:
        value = compute()
        if os.environ.get(SCAN_LOG_ENV):
            with open(os.environ[SCAN_LOG_ENV], "a") as log:
                log.write(json.dumps({"pid": os.getpid(), "time": time.time(), "fingerprint": fingerprint}) + "\n")
    try:
        meta_bytes, counts_bytes = _encoded(value)
        write_atomic(counts_path, counts_bytes)
        write_atomic(meta, meta_bytes)
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
