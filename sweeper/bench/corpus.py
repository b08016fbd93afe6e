"""The built-in corpus (`sweeper bench corpus`): its size, the first build into an empty cache, the reopen a
new process pays (one `stat` per file and a memory map), a reopen within one process, and how much of each
held-out side has a near-twin in training, under the by-unit split and under a by-file split of the same
fraction.

Near-twins: each held-out file is compared with every training file by the Jaccard similarity of their sets
of stripped lines (lines of at least `MIN_LINE` bytes; lines found in more than `MAX_FILES_PER_LINE` files,
such as `import os`, carry no identity and are ignored); a file has a near-twin when its best similarity is
at least `THRESHOLD`. The figure is the share of the side's bytes in such files."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from trials.data.builtin import builtin_source, forget_opened, split_side, stdlib_files, stdlib_root
from trials.data.cache import in_val_split

MIN_LINE = 8
MAX_FILES_PER_LINE = 200
THRESHOLD = 0.5


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
    print_near_twins()


def line_sets(files: list[tuple[str, Path]]) -> dict[str, set[bytes]]:
    """Each file's set of stripped lines of at least `MIN_LINE` bytes, as 8-byte hashes."""
    return {rel: {hashlib.blake2b(line.strip(), digest_size=8).digest() for line in path.read_bytes().splitlines()
                  if len(line.strip()) >= MIN_LINE} for rel, path in files}


def best_twins(sets: dict[str, set[bytes]], held: list[str], train: list[str]) -> dict[str, tuple[float, str | None]]:
    """For each held-out file, its highest line-set Jaccard similarity to a training file, and that file."""
    frequency = Counter(h for lines in sets.values() for h in lines)
    index: dict[bytes, list[str]] = defaultdict(list)
    for rel in train:
        for h in sets[rel]:
            if frequency[h] <= MAX_FILES_PER_LINE:
                index[h].append(rel)
    out: dict[str, tuple[float, str | None]] = {}
    for rel in held:
        shared: Counter[str] = Counter()
        for h in sets[rel]:
            shared.update(index.get(h, ()))
        out[rel] = max(((n / (len(sets[rel]) + len(sets[other]) - n), other) for other, n in shared.items()),
                       default=(0.0, None))
    return out


def twin_share(twins: dict[str, tuple[float, str | None]], sizes: dict[str, int], threshold: float = THRESHOLD) -> float:
    total = sum(sizes[rel] for rel in twins)
    return sum(sizes[rel] for rel, (j, _) in twins.items() if j >= threshold) / total if total else 0.0


def print_near_twins(val_fraction: float = 0.05) -> None:
    """The held-out sides' sizes and near-twin shares: by file (each file by a hash of its path) and by unit."""
    files = stdlib_files(stdlib_root())
    sizes = {rel: path.stat().st_size for rel, path in files}
    sets = line_sets(files)
    rules = {
        "by file": {rel: ("val" if in_val_split(rel, val_fraction) else "train") for rel, _ in files},
        "by unit": {rel: split_side(rel, val_fraction) for rel, _ in files},
    }
    print(f"near-twins       line-set Jaccard >= {THRESHOLD} against a training file (lines >= {MIN_LINE} bytes, "
          f"in <= {MAX_FILES_PER_LINE} files)")
    for rule, side_of in rules.items():
        train = [rel for rel, side in side_of.items() if side == "train"]
        left_out = [rel for rel, side in side_of.items() if side is None]
        if left_out:
            print(f"{rule:<16} left out: {len(left_out)} files, {sum(sizes[r] for r in left_out):,} bytes")
        for held in ("val", "test"):
            members = [rel for rel, side in side_of.items() if side == held]
            if not members:
                continue
            twins = best_twins(sets, members, train)
            in_encodings = {rel: v for rel, v in twins.items() if rel.startswith("encodings/")}
            print(f"{rule:<16} {held}: {len(members)} files, {sum(sizes[r] for r in members):,} bytes; with a near-twin: "
                  f"{twin_share(twins, sizes):.1%} of the bytes (>= 0.8: {twin_share(twins, sizes, 0.8):.1%}); "
                  f"encodings/: {sum(sizes[r] for r in in_encodings) / sum(sizes[r] for r in members):.1%} of the bytes")
