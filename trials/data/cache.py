"""The on-disk cache shared by the data sources that tokenize once: where it lives, cache keys, atomic
writes, the validation split of documents by key, and memory-mapped token files.

Below `trials.data.base` and `trials.data.unigram`, which both use it.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from trials.storage import Storage

_SHARED: list[Storage] = []  # the sweep's storage while a trial of it runs in this process (`shared_cache`)


def use_shared_cache(storage: Storage | None) -> None:
    """Share computed figures (the unigram entropy) through the sweep's storage while its trials run here:
    `sweeper launch` publishes them there before the first trial, so no node scans the corpus again."""
    _SHARED[:] = [storage] if storage is not None else []


def shared_cache() -> Storage | None:
    return _SHARED[0] if _SHARED else None


def shared_cache_path(storage: Storage, name: str) -> str:
    """Where a cache file is shared in the storage (the driver publishes, trials read)."""
    return storage.path("cache", name)


def cache_root() -> Path:
    """Where tokenized corpora are cached: $LAYERROPE_SWEEPER_CACHE, else $XDG_CACHE_HOME or ~/.cache."""
    env = os.environ.get("LAYERROPE_SWEEPER_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "layerrope-sweeper"


def digest(*parts: object) -> str:
    """A short stable hash of a few values (cache keys)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\x00")
    return h.hexdigest()[:24]


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see either nothing or all of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def split_position(key: str) -> float:
    """A deterministic, content-independent position in [0, 1) for a document or unit (by its key)."""
    h = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0**64


def in_val_split(key: str, val_fraction: float) -> bool:
    """A deterministic, content-independent assignment of a document (by its key) to the validation split."""
    return split_position(key) < val_fraction


@lru_cache(maxsize=64)
def _memmap(path: str, dtype: str, size: int, mtime_ns: int) -> np.ndarray:
    del size, mtime_ns  # part of the cache key only
    if os.path.getsize(path) == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def open_tokens(path: Path, dtype: str) -> np.ndarray:
    """A read-only memory map of a token file (reused within a process)."""
    st = path.stat()
    return _memmap(str(path), dtype, st.st_size, st.st_mtime_ns)
