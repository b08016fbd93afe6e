"""The built-in corpus: the running interpreter's own standard-library `.py` sources as bytes.

Needs no download. Files are split into train and validation by a hash of their relative
path (so the split of a file never depends on which other files exist). Each file is one
document, followed by a NUL byte. The fingerprint names the Python version and a SHA-256 of
every file's path and content, so numbers from different interpreters are never mixed silently.

The concatenated tokens are written once to the cache folder (see `base.cache_root`) and
memory-mapped afterwards. A cache entry is keyed by the interpreter, the split fraction and
the (path, size, mtime) of every file: reopening costs one `stat` per file (~20 ms for
~1800 files), not a re-read and re-hash of ~30 MB. Within one process (a reused Ray actor)
the opened source is kept and reopening is free.

`sweeper bench corpus` prints the corpus size and the build / reopen times.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import sysconfig
from pathlib import Path

from trials.data.base import ArrayTokenSource
from trials.data.cache import cache_root, digest, in_val_split, open_tokens, write_atomic
from trials.errors import TrialInputError

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
_opened: dict[tuple[str, float, str], ArrayTokenSource] = {}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[tuple[str, Path]]:
    """(relative posix path, absolute path) of every standard-library `.py` file, sorted."""
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for name in filenames:
            if name.endswith(".py"):
                full = Path(dirpath) / name
                out.append((full.relative_to(root).as_posix(), full))
    out.sort()
    return out


def python_version() -> str:
    return f"{platform.python_implementation().lower()}-{'.'.join(map(str, sys.version_info[:3]))}"


def builtin_source(val_fraction: float = 0.05) -> ArrayTokenSource:
    """The standard-library corpus, built into the cache on first use."""
    root = stdlib_root()
    key = (str(root), float(val_fraction), str(cache_root()))
    if key in _opened:
        return _opened[key]
    files = stdlib_files(root)
    if not files:
        raise TrialInputError(f"data.source builtin: no .py files under {root} (a Python without its sources?)")
    signature = [(rel, st.st_size, st.st_mtime_ns) for rel, path in files for st in [path.stat()]]
    folder = cache_root() / "corpus" / f"builtin-{digest(python_version(), str(root), val_fraction, signature)}"
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        _build(files, folder, val_fraction)
    meta = json.loads(meta_path.read_text())
    source = ArrayTokenSource(
        open_tokens(folder / "train.bin", "uint8"),
        open_tokens(folder / "val.bin", "uint8"),
        vocab=256,
        fingerprint=meta["fingerprint"],
        description=f"built-in corpus ({meta['files']} stdlib files of {python_version()})",
    )
    if len(source.train) != meta["train_tokens"] or len(source.val) != meta["val_tokens"]:
        # A damaged cache entry (e.g. a disk that filled up): rebuild it once.
        _build(files, folder, val_fraction)
        _opened.pop(key, None)
        return builtin_source(val_fraction)
    _opened[key] = source
    return source


def _build(files: list[tuple[str, Path]], folder: Path, val_fraction: float) -> None:
    content = hashlib.sha256()
    train: list[bytes] = []
    val: list[bytes] = []
    for rel, path in files:
        data = path.read_bytes()
        content.update(rel.encode() + b"\x00" + len(data).to_bytes(8, "little"))
        content.update(data)
        (val if in_val_split(rel, val_fraction) else train).append(data + b"\x00")
    if not train or not val:
        raise TrialInputError(
            f"data.val_fraction {val_fraction}: leaves no {'training' if not train else 'validation'} files "
            f"among {len(files)} stdlib files"
        )
    train_bytes, val_bytes = b"".join(train), b"".join(val)
    fingerprint = f"builtin:{python_version()}:sha256-{content.hexdigest()[:16]}:val{val_fraction:g}"
    write_atomic(folder / "train.bin", train_bytes)
    write_atomic(folder / "val.bin", val_bytes)
    meta = {
        "fingerprint": fingerprint,
        "files": len(files),
        "train_files": len(train),
        "val_files": len(val),
        "train_tokens": len(train_bytes),
        "val_tokens": len(val_bytes),
        "python": sys.version,
    }
    write_atomic(folder / "meta.json", json.dumps(meta, indent=2).encode())


def forget_opened() -> None:
    """Forget the sources opened in this process: the next `builtin_source()` reopens the cache as a new
    process would (`sweeper bench corpus` times both)."""
    _opened.clear()
