"""The built-in corpus's cost (`sweeper bench corpus`): its size, the first build into an empty cache, the
reopen a new process pays (one `stat` per file and a memory map), and a reopen within one process."""

from __future__ import annotations

import os
import tempfile
import time

from trials.data.builtin import builtin_source, forget_opened


def print_timings() -> None:
    """Build the corpus into a fresh cache folder, reopen it twice, and print the figures."""
    os.environ["LAYERROPE_SWEEPER_CACHE"] = tempfile.mkdtemp(prefix="corpus-bench-")
    t0 = time.perf_counter()
    src = builtin_source()
    t1 = time.perf_counter()
    forget_opened()
    src = builtin_source()
    t2 = time.perf_counter()
    src = builtin_source()
    t3 = time.perf_counter()
    print(f"fingerprint      {src.fingerprint}")
    print(f"corpus           {src.description}: {len(src.train):,} train + {len(src.val):,} val tokens")
    print(f"first build      {t1 - t0:.3f} s (read, hash, split, write cache)")
    print(f"new process      {t2 - t1:.3f} s (stat every file, memory-map the cache)")
    print(f"same process     {(t3 - t2) * 1e6:.1f} us")
