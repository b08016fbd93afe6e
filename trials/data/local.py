"""Local corpora: text files, JSONL or Parquet with a text column, and pre-tokenized binaries.

Text sources are tokenized once (byte-level unless `data.tokenizer` is given) into flat
token files in the cache folder, keyed by every input file's (path, size, mtime), the
tokenizer and the split; afterwards a trial memory-maps them. Validation tokens come from
`data.val_path` when given, else from a deterministic hash split by document (a text file is
one document; a JSONL line or a Parquet row is one document).

Pre-tokenized data (`source: tokens`): a folder written by `sweeper data prepare` (see
`trials.data.prepared`: a manifest, per-seed order over billions of tokens, O(1) resume), or raw
binaries: flat arrays of `uint16`/`uint32` token ids
(nanoGPT's `train.bin` convention); validation is `data.val_path` or the file's last
`val_fraction` of tokens. Their vocabulary is the largest id + 1.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trials.config import DataConfig
from trials.data.base import ArrayTokenSource
from trials.data.cache import cache_root, digest, in_val_split, open_tokens, write_atomic
from trials.data.prepared import PreparedTokenSource, prepared_manifest, read_manifest
from trials.data.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer
from trials.errors import TrialInputError

_EXTENSIONS = {"text": None, "jsonl": (".jsonl", ".json", ".ndjson"), "parquet": (".parquet",)}
_ENCODE_BATCH = 256


def resolve_files(spec: str, source: str, field: str) -> list[Path]:
    """The files a `path` names: one file, every matching file under a folder, or a glob."""
    expanded = os.path.expanduser(spec)
    if any(c in expanded for c in "*?["):
        files = [Path(p) for p in glob.glob(expanded, recursive=True) if os.path.isfile(p)]
    elif os.path.isdir(expanded):
        exts = _EXTENSIONS.get(source)
        files = [
            Path(dirpath) / name
            for dirpath, dirnames, names in os.walk(expanded)
            for name in names
            if not name.startswith(".") and (exts is None or name.endswith(exts))
        ]
    elif os.path.isfile(expanded):
        files = [Path(expanded)]
    else:
        raise TrialInputError(f"{field}: {spec}: no such file or folder")
    if not files:
        raise TrialInputError(f"{field}: {spec}: matches no {source} files")
    return sorted(files)


def _stat_signature(files: list[Path]) -> list[tuple[str, int, int]]:
    return [(str(p.resolve()), st.st_size, st.st_mtime_ns) for p in files for st in [p.stat()]]


def _documents(path: Path, source: str, text_column: str, as_bytes: bool) -> Iterator[str | bytes]:
    """The documents of one file, in order."""
    if source == "text":
        data = path.read_bytes()
        yield data if as_bytes else data.decode("utf-8", errors="replace")
    elif source == "jsonl":
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise TrialInputError(f"data.path: {path}:{lineno}: not JSON ({exc})") from None
                text = row.get(text_column) if isinstance(row, dict) else None
                if not isinstance(text, str):
                    raise TrialInputError(
                        f"data.text_column: {path}:{lineno}: no string field {text_column!r}"
                        + (f" (fields: {', '.join(sorted(row))})" if isinstance(row, dict) else "")
                    )
                yield text.encode("utf-8") if as_bytes else text
    elif source == "parquet":
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception as exc:
            raise TrialInputError(f"data.path: {path}: not a Parquet file ({exc})") from None
        names = pf.schema_arrow.names
        if text_column not in names:
            raise TrialInputError(f"data.text_column: {path}: no column {text_column!r} (columns: {', '.join(names)})")
        for batch in pf.iter_batches(columns=[text_column], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if text is None:
                    continue
                yield text.encode("utf-8") if as_bytes else str(text)
    else:  # pragma: no cover - guarded by DataConfig
        raise AssertionError(source)


class _TokenWriter:
    """Appends token arrays to a temporary file; `commit` renames it into place."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.dtype = dtype
        self.fh = open(self.tmp, "wb")
        self.count = 0

    def write(self, tokens: np.ndarray) -> None:
        self.fh.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        self.count += len(tokens)

    def discard(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)

    def commit(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        os.replace(self.tmp, self.path)


def _file_hash(path: Path, h: "hashlib._Hash") -> None:
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)


def text_source(cfg: DataConfig) -> ArrayTokenSource:
    """A `text`, `jsonl` or `parquet` source, tokenized into the cache on first use."""
    if not cfg.path:
        raise TrialInputError(f"data.path: required for source {cfg.source!r}")
    tokenizer = load_tokenizer(cfg.tokenizer)
    train_files = resolve_files(cfg.path, cfg.source, "data.path")
    val_files = resolve_files(cfg.val_path, cfg.source, "data.val_path") if cfg.val_path else []
    key = digest(
        cfg.source, _stat_signature(train_files), _stat_signature(val_files), cfg.text_column,
        tokenizer.fingerprint, None if val_files else cfg.val_fraction,
    )
    folder = cache_root() / "corpus" / f"{cfg.source}-{key}"
    if not (folder / "meta.json").is_file():
        _tokenize(cfg, tokenizer, train_files, val_files, folder)
    meta = json.loads((folder / "meta.json").read_text())
    return ArrayTokenSource(
        open_tokens(folder / "train.bin", meta["dtype"]),
        open_tokens(folder / "val.bin", meta["dtype"]),
        vocab=tokenizer.vocab,
        fingerprint=meta["fingerprint"],
        description=f"{cfg.source} corpus {cfg.path}",
    )


def _tokenize(cfg: DataConfig, tokenizer: Tokenizer, train_files: list[Path], val_files: list[Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    writers = {"train": _TokenWriter(folder / "train.bin", tokenizer.dtype), "val": _TokenWriter(folder / "val.bin", tokenizer.dtype)}
    try:
        content, docs = _fill(cfg, tokenizer, train_files, val_files, writers)
        for split, w in writers.items():
            if w.count == 0:
                raise TrialInputError(
                    f"data.path {cfg.path}: no {'validation' if split == 'val' else 'training'} tokens "
                    f"({docs} documents; give data.val_path or change data.val_fraction)"
                )
    except BaseException:
        for w in writers.values():
            w.discard()
        raise
    for w in writers.values():
        w.commit()
    split_name = "valfile" if val_files else f"val{cfg.val_fraction:g}"
    meta = {
        "fingerprint": f"{cfg.source}:{Path(cfg.path or '').name}:sha256-{content[:16]}:{tokenizer.fingerprint}"
        f":{cfg.text_column if cfg.source != 'text' else 'file'}:{split_name}",
        "dtype": tokenizer.dtype.name,
        "documents": docs,
        "train_tokens": writers["train"].count,
        "val_tokens": writers["val"].count,
        "tokenizer": tokenizer.name,
    }
    write_atomic(folder / "meta.json", json.dumps(meta, indent=2).encode())


def _fill(
    cfg: DataConfig, tokenizer: Tokenizer, train_files: list[Path], val_files: list[Path], writers: dict[str, _TokenWriter]
) -> tuple[str, int]:
    """Tokenize every document into the train / val writers; return (content hash, documents)."""
    content = hashlib.sha256()
    as_bytes = isinstance(tokenizer, ByteTokenizer)
    common = os.path.commonpath([str(p.resolve().parent) for p in train_files + val_files])
    docs = 0
    pending: dict[str, list[str]] = {"train": [], "val": []}

    def flush(split: str) -> None:
        for tokens in tokenizer.encode_batch(pending[split]):
            writers[split].write(tokens)
        pending[split].clear()

    for fixed_split, files in (("train", train_files), ("val", val_files)):
        for path in files:
            rel = os.path.relpath(path.resolve(), common)
            content.update(f"{fixed_split}:{rel}\x00".encode())
            _file_hash(path, content)
            for i, doc in enumerate(_documents(path, cfg.source, cfg.text_column, as_bytes)):
                docs += 1
                split = fixed_split
                if not val_files:
                    split = "val" if in_val_split(rel if cfg.source == "text" else f"{rel}:{i}", cfg.val_fraction) else "train"
                if as_bytes:
                    writers[split].write(ByteTokenizer().encode_bytes(doc))  # type: ignore[arg-type]
                else:
                    pending[split].append(doc)  # type: ignore[arg-type]
                    if len(pending[split]) >= _ENCODE_BATCH:
                        flush(split)
    for split in pending:
        flush(split)
    return content.hexdigest(), docs


def training_texts(cfg: DataConfig) -> Iterator[str]:
    """The training documents of a `text`, `jsonl` or `parquet` source in file order, the held-out ones left
    out by the rule `_fill` applies (a tokenizer trained on them never sees validation text)."""
    if not cfg.path:
        raise TrialInputError(f"data.path: required for source {cfg.source!r}")
    train_files = resolve_files(cfg.path, cfg.source, "data.path")
    val_files = resolve_files(cfg.val_path, cfg.source, "data.val_path") if cfg.val_path else []
    common = os.path.commonpath([str(p.resolve().parent) for p in train_files + val_files])
    for path in train_files:
        rel = os.path.relpath(path.resolve(), common)
        for i, doc in enumerate(_documents(path, cfg.source, cfg.text_column, False)):
            if val_files or not in_val_split(rel if cfg.source == "text" else f"{rel}:{i}", cfg.val_fraction):
                yield doc  # type: ignore[misc]


def _token_file(path_spec: str, dtype: str, field: str) -> tuple[Path, np.ndarray]:
    path = Path(os.path.expanduser(path_spec))
    if not path.is_file():
        raise TrialInputError(f"{field}: {path_spec}: no such file")
    itemsize = np.dtype(dtype).itemsize
    if path.stat().st_size % itemsize:
        raise TrialInputError(
            f"{field}: {path_spec}: {path.stat().st_size} bytes is not a whole number of {dtype} tokens "
            f"(check data.token_dtype)"
        )
    return path, open_tokens(path, dtype)


def _token_stats(path: Path, tokens: np.ndarray) -> dict[str, object]:
    """Largest id and content hash of a token file, computed once and cached by (path, size, mtime)."""
    st = path.stat()
    meta_path = cache_root() / "corpus" / f"tokens-{digest(str(path.resolve()), st.st_size, st.st_mtime_ns)}.json"
    if meta_path.is_file():
        return json.loads(meta_path.read_text())
    h = hashlib.sha256()
    _file_hash(path, h)
    top = 0
    for i in range(0, len(tokens), 1 << 24):
        top = max(top, int(tokens[i : i + (1 << 24)].max()))
    stats = {"max_token": top, "sha256": h.hexdigest()[:16], "tokens": int(len(tokens))}
    write_atomic(meta_path, json.dumps(stats).encode())
    return stats


def tokens_source(cfg: DataConfig) -> ArrayTokenSource:
    """A corpus prepared by `sweeper data prepare` (`data.path` its folder or manifest; see
    `trials.data.prepared`), else a pre-tokenized binary file with validation from `data.val_path`
    or its tail."""
    if not cfg.path:
        raise TrialInputError("data.path: required for source 'tokens' (a prepared corpus folder or a binary file of token ids)")
    manifest = prepared_manifest(Path(os.path.expanduser(cfg.path)))
    if manifest is not None:
        if cfg.val_path:
            raise TrialInputError(f"data.val_path: not used with a prepared corpus ({cfg.path} holds its validation tokens); leave it unset")
        return PreparedTokenSource(read_manifest(manifest), cfg.path)
    path, tokens = _token_file(cfg.path, cfg.token_dtype, "data.path")
    if len(tokens) == 0:
        raise TrialInputError(f"data.path: {cfg.path}: empty token file")
    stats = _token_stats(path, tokens)
    vocab = int(stats["max_token"]) + 1  # type: ignore[call-overload]
    if cfg.val_path:
        val_path, val = _token_file(cfg.val_path, cfg.token_dtype, "data.val_path")
        if len(val) == 0:
            raise TrialInputError(f"data.val_path: {cfg.val_path}: empty token file")
        val_stats = _token_stats(val_path, val)
        vocab = max(vocab, int(val_stats["max_token"]) + 1)  # type: ignore[call-overload]
        train, split = tokens, f"valfile-sha256-{val_stats['sha256']}"
    else:
        cut = len(tokens) - max(1, int(round(len(tokens) * cfg.val_fraction)))
        train, val, split = tokens[:cut], tokens[cut:], f"valtail{cfg.val_fraction:g}"
    return ArrayTokenSource(
        train,
        val,
        vocab=vocab,
        fingerprint=f"tokens:{path.name}:{cfg.token_dtype}:sha256-{stats['sha256']}:{split}",
        description=f"token file {cfg.path}",
    )
