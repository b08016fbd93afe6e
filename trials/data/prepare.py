"""Tokenize a corpus once into a prepared token folder (`sweeper data prepare`; layout and manifest
in `trials.data.prepared`).

Sources: a Hugging Face dataset (`hf`: a hub name, streamed or not, or a local folder, opened as
`trials.data.hf` opens it) or local `text` / `jsonl` / `parquet` files (read as `trials.data.local`
reads them). Tokenizer: a `tokenizer.json`, a folder holding one, a hub name, or byte-level.

Pipeline: the main process reads documents in their stored order, in chunks of `chunk_docs`
documents, and assigns each to train or validation (a validation split or `val_path` when there
is one, else a hash of the document, as the trials' own sources do); `workers` processes (spawned,
one tokenizer thread each) tokenize chunks; the main process appends the results in chunk order.
The output therefore does not depend on the number of workers. Reading stops after the chunk that
brings the training tokens to `max_tokens` (validation: `val_tokens`).

Crash safety and resume: tokens go to hidden `.train.bin.partial` / `.val.bin.partial` files.
Every `checkpoint_s` seconds the partial files are fsynced and `.prepare-progress.json` records
the reader's position (a chunk boundary) and the token counts. Rerunning the same command after a
kill truncates the partial files to the recorded counts, re-hashes what they hold, repositions the
reader (local files: by file and document; map-style datasets: by index; streamed datasets: with
`IterableDataset.state_dict()`) and continues; the result is the same as an uninterrupted run. At the
end: fsync, the progress file marked finished, `manifest.json` written atomically, then the partial
files renamed to `train.bin` / `val.bin`. A trial reads only a folder whose manifest lists files
of the right sizes, so no state of an interrupted prepare is ever read as a corpus.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from trials.config import DataConfig
from trials.data.cache import digest, in_val_split, write_atomic
from trials.data.local import _documents, _stat_signature, resolve_files
from trials.data.prepared import FORMAT, MANIFEST, PROGRESS, VERSION, read_manifest
from trials.data.tokenizer import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer
from trials.errors import TrialInputError

SOURCES = ("hf", "text", "jsonl", "parquet")
FINAL = {"train": "train.bin", "val": "val.bin"}
PARTIAL = {"train": ".train.bin.partial", "val": ".val.bin.partial"}


@dataclass(frozen=True)
class PrepareSettings:
    """What to read and how to tokenize it (the fields mirror `DataConfig`'s)."""

    out: Path
    source: str  # hf | text | jsonl | parquet
    path: str | None = None  # local sources: a file, a folder or a glob
    val_path: str | None = None  # local sources: validation files (else a hash split by document)
    text_column: str = "text"
    dataset: str | None = None  # hf: hub name or local folder
    subset: str | None = None
    split: str = "train"
    val_split: str | None = "validation"  # hf: None or missing in the dataset: a hash split
    streaming: bool = True
    tokenizer: str | None = None  # None or "bytes": byte-level
    val_fraction: float = 0.05  # hash split: the share of documents held out
    max_tokens: int | None = None  # stop after the chunk that reaches this many training tokens
    val_tokens: int | None = None  # the same for validation tokens
    workers: int = 1
    chunk_docs: int = 1024
    checkpoint_s: float = 30.0
    overwrite: bool = False  # replace a prepared corpus made with other settings
    restart: bool = False  # discard an unfinished prepare made with other settings


@dataclass
class Progress:
    """Counts after the last chunk written (what the progress callback and the progress file see)."""

    tokens: dict[str, int] = field(default_factory=lambda: {"train": 0, "val": 0})
    documents: dict[str, int] = field(default_factory=lambda: {"train": 0, "val": 0})
    phase: int = 0  # index into the reading phases (validation split first, then training)
    position: dict[str, Any] = field(default_factory=dict)  # the reader's position in that phase
    resumed: bool = False  # continued from an interrupted run's progress file


# ---- reading ---------------------------------------------------------------------------------


@dataclass
class Chunk:
    texts: list[str]
    val: np.ndarray  # bool per document: held out
    position: dict[str, Any]  # the reader's position after this chunk


class Phase:
    """One pass over one set of documents, each assigned to a split."""

    name: str
    fixed: str | None  # "train" / "val": every document of this phase; None: hash split
    identity: Any

    def chunks(self, position: dict[str, Any], size: int) -> Iterator[Chunk]:
        raise NotImplementedError

    def check(self) -> None:
        """Read the first document (a wrong column or an unreadable file fails before anything is written)."""
        next(iter(self.chunks({}, 1)), None)


class LocalPhase(Phase):
    def __init__(self, name: str, source: str, files: list[Path], common: str, text_column: str, fixed: str | None,
                 val_fraction: float) -> None:
        self.name, self.source, self.files, self.common = name, source, files, common
        self.text_column, self.fixed, self.val_fraction = text_column, fixed, val_fraction
        self.identity = _stat_signature(files)

    def chunks(self, position: dict[str, Any], size: int) -> Iterator[Chunk]:
        texts: list[str] = []
        held: list[bool] = []
        first_file, skip = int(position.get("file", 0)), int(position.get("doc", 0))
        for f in range(first_file, len(self.files)):
            path = self.files[f]
            rel = os.path.relpath(path.resolve(), self.common)
            docs = _documents(path, self.source, self.text_column, False)
            for i, text in enumerate(docs):
                if f == first_file and i < skip:
                    continue
                texts.append(text)  # type: ignore[arg-type]
                key = rel if self.source == "text" else f"{rel}:{i}"
                held.append(self.fixed == "val" if self.fixed else in_val_split(key, self.val_fraction))
                if len(texts) == size:
                    yield Chunk(texts, np.array(held), {"file": f, "doc": i + 1})
                    texts, held = [], []
        if texts:
            yield Chunk(texts, np.array(held), {"file": len(self.files), "doc": 0})


class HFPhase(Phase):
    def __init__(self, name: str, ds: Any, identity: str, column: str, fixed: str | None, val_fraction: float) -> None:
        self.name, self.ds, self.identity, self.column = name, ds, identity, column
        self.fixed, self.val_fraction = fixed, val_fraction
        names = getattr(ds, "column_names", None)
        if names is not None and column not in names:
            raise TrialInputError(f"--text-column: the dataset has no column {column!r} (columns: {', '.join(names)})")
        self.map_style = hasattr(ds, "__len__") and hasattr(ds, "__getitem__")

    def _text(self, value: Any) -> str:
        if not isinstance(value, str):
            raise TrialInputError(f"--text-column: {self.column!r} is not a text column (got {type(value).__name__})")
        return value

    def _chunk(self, texts: list[str], position: dict[str, Any]) -> Chunk:
        held = [self.fixed == "val" if self.fixed else in_val_split(t, self.val_fraction) for t in texts]
        return Chunk(texts, np.array(held), position)

    def chunks(self, position: dict[str, Any], size: int) -> Iterator[Chunk]:
        if self.map_style:
            n, start = len(self.ds), int(position.get("index", 0))
            for lo in range(start, n, size):
                rows = self.ds[lo : min(n, lo + size)][self.column]
                yield self._chunk([self._text(t) for t in rows], {"index": min(n, lo + size)})
            return
        ds, skip = self.ds, 0
        if position.get("state") is not None:
            ds.load_state_dict(position["state"])
        elif position.get("count"):
            skip = int(position["count"])  # a dataset without state_dict(): read past the documents done
        count = int(position.get("count", 0))
        has_state = hasattr(ds, "state_dict")
        texts: list[str] = []
        for i, row in enumerate(iter(ds)):
            if i < skip:
                continue
            texts.append(self._text(row.get(self.column)))
            count += 1
            if len(texts) == size:
                yield self._chunk(texts, {"count": count, "state": ds.state_dict() if has_state else None})
                texts = []
        if texts:
            yield self._chunk(texts, {"count": count, "state": ds.state_dict() if has_state else None})


def _phases(s: PrepareSettings) -> tuple[list[Phase], dict[str, Any]]:
    """The reading phases (validation first when it is a separate set) and the manifest's `source`."""
    if s.source == "hf":
        from trials.data.hf import _identity, _import_datasets, _open_split

        if not s.dataset:
            raise TrialInputError("--dataset: required for --source hf (a hub name such as allenai/c4, or a local folder)")
        cfg = DataConfig(source="hf", dataset=s.dataset, subset=s.subset, split=s.split, val_split=s.val_split,
                         streaming=s.streaming, text_column=s.text_column)
        datasets = _import_datasets()
        train = _open_split(datasets, cfg, s.split, required=True)
        assert train is not None
        val = _open_split(datasets, cfg, s.val_split, required=False) if s.val_split else None
        phases: list[Phase] = []
        if val is not None:
            phases.append(HFPhase("validation", val[0], _identity(val[0]), s.text_column, "val", s.val_fraction))
        phases.append(HFPhase("train", train[0], train[1], s.text_column, "train" if val else None, s.val_fraction))
        described = {"kind": "hf", "dataset": s.dataset, "subset": s.subset, "split": s.split,
                     "val_split": s.val_split if val else None, "streaming": s.streaming, "identity": train[1]}
    else:
        if not s.path:
            raise TrialInputError(f"--path: required for --source {s.source} (a file, a folder or a glob)")
        train_files = resolve_files(s.path, s.source, "--path")
        val_files = resolve_files(s.val_path, s.source, "--val-path") if s.val_path else []
        common = os.path.commonpath([str(p.resolve().parent) for p in train_files + val_files])
        phases = []
        if val_files:
            phases.append(LocalPhase("validation", s.source, val_files, common, s.text_column, "val", s.val_fraction))
        phases.append(LocalPhase("train", s.source, train_files, common, s.text_column, "train" if val_files else None,
                                 s.val_fraction))
        described = {"kind": s.source, "path": s.path, "val_path": s.val_path, "files": len(train_files) + len(val_files),
                     "bytes": sum(p.stat().st_size for p in train_files + val_files)}
    described["text_column"] = s.text_column if s.source != "text" else None
    described["validation"] = "separate" if len(phases) == 2 else f"hash split, val_fraction {s.val_fraction:g}"
    return phases, described


# ---- tokenizing (in worker processes) --------------------------------------------------------

_worker_tokenizer: Tokenizer | None = None


def _tokenizer_payload(tokenizer: Tokenizer) -> tuple[str, str | None]:
    return tokenizer.name, tokenizer.tokenizer.to_str() if isinstance(tokenizer, HFTokenizer) else None


def _init_worker(name: str, payload: str | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle: it checkpoints, then stops us
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker: --workers bounds the CPUs used
    os.environ["RAYON_NUM_THREADS"] = "1"
    global _worker_tokenizer
    if payload is None:
        _worker_tokenizer = ByteTokenizer()
    else:
        from tokenizers import Tokenizer as RawTokenizer

        _worker_tokenizer = HFTokenizer(RawTokenizer.from_str(payload), name=name)


def _encode(tokenizer: Tokenizer, texts: list[str], val: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(train tokens, val tokens, train documents, val documents) of one chunk, in document order."""
    encoded = tokenizer.encode_batch(texts)
    empty = np.empty(0, dtype=tokenizer.dtype)
    train = [e for e, v in zip(encoded, val) if not v]
    held = [e for e, v in zip(encoded, val) if v]
    return (np.concatenate(train) if train else empty, np.concatenate(held) if held else empty, len(train), len(held))


def _encode_in_worker(texts: list[str], val: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    assert _worker_tokenizer is not None
    return _encode(_worker_tokenizer, texts, val)


# ---- writing ---------------------------------------------------------------------------------


class _Output:
    """The two partial token files, their running SHA-256 and the progress file."""

    def __init__(self, out: Path, dtype: np.dtype, resume_tokens: dict[str, int] | None) -> None:
        self.out, self.dtype = out, dtype
        self.files: dict[str, Any] = {}
        self.hashes = {split: hashlib.sha256() for split in FINAL}
        self.max_token = -1  # the largest id written: the model's vocabulary must exceed it
        for split in FINAL:
            path = out / PARTIAL[split]
            if resume_tokens is None:
                fh = open(path, "wb")
            else:  # back to the last checkpoint (a kill may have left more), and hash what is kept
                keep = resume_tokens[split] * dtype.itemsize
                if not path.is_file() or path.stat().st_size < keep:
                    raise TrialInputError(
                        f"--out: {path}: missing or shorter than the unfinished prepare recorded ({keep} bytes); "
                        f"pass --restart to start again"
                    )
                fh = open(path, "r+b")
                fh.truncate(keep)
                while block := fh.read(1 << 24):
                    self.hashes[split].update(block)
                    self.max_token = max(self.max_token, int(np.frombuffer(block, dtype=dtype).max()))
                fh.seek(0, os.SEEK_END)
            self.files[split] = fh

    def write(self, split: str, tokens: np.ndarray) -> None:
        if len(tokens):
            self.max_token = max(self.max_token, int(tokens.max()))
        data = np.ascontiguousarray(tokens, dtype=self.dtype).tobytes()
        self.files[split].write(data)
        self.hashes[split].update(data)

    def sync(self) -> None:
        for fh in self.files.values():
            fh.flush()
            os.fsync(fh.fileno())

    def close(self) -> None:
        for fh in self.files.values():
            fh.close()


def settings_key(s: PrepareSettings, tokenizer: Tokenizer, phases: list[Phase]) -> str:
    """Equal for two runs that must produce the same files (so one may resume the other)."""
    return digest(VERSION, s.source, s.text_column, [(p.name, p.fixed, p.identity) for p in phases], tokenizer.fingerprint,
                  tokenizer.dtype.name, None if len(phases) == 2 else s.val_fraction, s.max_tokens, s.val_tokens, s.chunk_docs)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _claim_folder(s: PrepareSettings, key: str) -> tuple[str, dict[str, Any] | None]:
    """What to do with `out`: ("done", manifest), ("finish", progress), ("resume", progress) or ("new", None).
    Refuses (TrialInputError) to replace anything made with other settings unless told to."""
    out = s.out
    if out.exists() and not out.is_dir():
        raise TrialInputError(f"--out: {out}: a file, not a folder")
    manifest = _read_json(out / MANIFEST)
    progress = _read_json(out / PROGRESS)
    if progress is not None and progress.get("key") == key:
        return ("finish" if progress.get("finished") else "resume"), progress
    if manifest is not None and progress is None:
        if manifest.get("settings_key") == key:
            try:
                read_manifest(out / MANIFEST, "--out")
                return "done", manifest
            except TrialInputError as exc:  # the same settings, but a damaged folder
                if not s.overwrite:
                    raise TrialInputError(f"{exc.message}; pass --overwrite to prepare it again") from None
        elif not s.overwrite:
            raise TrialInputError(
                f"--out: {out} already holds a prepared corpus made with other settings (fingerprint "
                f"{manifest.get('fingerprint')}); choose another folder, or pass --overwrite to replace it"
            )
    if progress is not None and not s.restart:
        raise TrialInputError(
            f"--out: {out} holds an unfinished prepare made with other settings ({int(progress.get('train_tokens', 0)):,} "
            f"training tokens so far); rerun that command to finish it, or pass --restart to discard it"
        )
    others = [name for name in (MANIFEST, *FINAL.values()) if (out / name).exists()]
    if others and manifest is None and not s.overwrite:
        raise TrialInputError(f"--out: {out} holds {', '.join(others)} not written by a prepare; choose another folder or pass --overwrite")
    return "new", None


def _clear(out: Path) -> None:
    """Remove a previous corpus or unfinished prepare: the manifest first, so nothing half-removed is ever read."""
    for name in (MANIFEST, PROGRESS, *FINAL.values(), *PARTIAL.values()):
        (out / name).unlink(missing_ok=True)


# ---- the run ---------------------------------------------------------------------------------


def prepare(s: PrepareSettings, on_progress: Callable[[Progress], None] | None = None) -> tuple[dict[str, Any], str]:
    """Prepare `s.out`, or finish / resume a prepare of the same settings there. Returns the manifest and
    what was done: "prepared", "resumed", "finished" (only the last renames were left) or "already" (nothing)."""
    tokenizer = load_tokenizer(s.tokenizer, field="--tokenizer")
    phases, described = _phases(s)
    key = settings_key(s, tokenizer, phases)
    action, found = _claim_folder(s, key)
    if action == "done":
        assert found is not None
        return found, "already"
    for phase in phases if action == "new" else []:
        phase.check()
    created = not s.out.exists()
    s.out.mkdir(parents=True, exist_ok=True)
    if action == "new":
        _clear(s.out)
    state = Progress()
    if found is not None:
        state.tokens = {split: int(found["tokens"][split]) for split in FINAL}
        state.documents = {split: int(found["documents"][split]) for split in FINAL}
        state.phase, state.position, state.resumed = int(found["phase"]), dict(found["position"]), True
    started_wall = time.time() - (float(found.get("seconds", 0.0)) if found else 0.0)
    if action == "finish":
        assert found is not None
        return _finish(s, found), "finished"
    output = _Output(s.out, tokenizer.dtype, state.tokens if found is not None else None)
    finished = False
    try:
        try:
            _run(s, tokenizer, phases, output, state, key, started_wall, on_progress)
            _require_both_splits(state)
        except TrialInputError:
            # Bad input (a malformed line, too little data): fixing it changes the settings, so nothing
            # here could be resumed. Leave the folder as it was before.
            output.close()
            _clear(s.out)
            if created:
                s.out.rmdir()
            finished = True
            raise
        output.sync()
        record = _progress_record(key, state, started_wall, finished=True)
        record["sha256"] = {split: output.hashes[split].hexdigest() for split in FINAL}
        record["manifest"] = _manifest(s, tokenizer, described, key, state, record["sha256"], output.max_token,
                                       time.time() - started_wall)
        write_atomic(s.out / PROGRESS, json.dumps(record, indent=1).encode())
        finished = True
    finally:
        if not finished:
            _checkpoint_quietly(output, key, state, started_wall)
        output.close()
    return _finish(s, record), ("resumed" if state.resumed else "prepared")


def _run(s: PrepareSettings, tokenizer: Tokenizer, phases: list[Phase], output: _Output, state: Progress, key: str,
         started_wall: float, on_progress: Callable[[Progress], None] | None) -> None:
    pool = None
    parallelism = os.environ.get("TOKENIZERS_PARALLELISM")
    if s.workers > 1:
        pool = ProcessPoolExecutor(
            max_workers=s.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker, initargs=_tokenizer_payload(tokenizer),
        )
    else:  # tokenize here, on this thread only (the library would use every core)
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    last_checkpoint = time.monotonic()
    try:
        while state.phase < len(phases):
            phase = phases[state.phase]
            pending: deque[tuple[Chunk, Future[Any] | tuple[Any, ...]]] = deque()
            chunks = phase.chunks(state.position, s.chunk_docs)
            stop = False

            def write_next() -> bool:
                """Write the oldest pending chunk; True when this phase (or the whole run) should stop."""
                chunk, work = pending.popleft()
                train, val, n_train, n_val = work.result() if isinstance(work, Future) else work
                val_open = s.val_tokens is None or state.tokens["val"] < s.val_tokens
                output.write("train", train)
                if val_open:
                    output.write("val", val)
                    state.tokens["val"] += len(val)
                    state.documents["val"] += n_val
                state.tokens["train"] += len(train)
                state.documents["train"] += n_train
                state.position = chunk.position
                if on_progress is not None:
                    on_progress(state)
                if s.max_tokens is not None and state.tokens["train"] >= s.max_tokens:
                    state.phase = len(phases)  # the whole run is done
                    return True
                return phase.fixed == "val" and s.val_tokens is not None and state.tokens["val"] >= s.val_tokens

            for chunk in chunks:
                if pool is None:
                    pending.append((chunk, _encode(tokenizer, chunk.texts, chunk.val)))
                else:
                    pending.append((chunk, pool.submit(_encode_in_worker, chunk.texts, chunk.val)))
                while pending and (len(pending) > 2 * max(1, s.workers) or pool is None):
                    stop = write_next()
                    if stop:
                        break
                if stop:
                    break
                if time.monotonic() - last_checkpoint >= s.checkpoint_s:
                    _checkpoint(output, key, state, started_wall)
                    last_checkpoint = time.monotonic()
            while pending and not stop:
                stop = write_next()
            for _, work in pending:  # read ahead past the stopping point: dropped
                if isinstance(work, Future):
                    work.cancel()
            if state.phase < len(phases):
                state.phase += 1
                state.position = {}
            _checkpoint(output, key, state, started_wall)
            last_checkpoint = time.monotonic()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            pool = None
    finally:
        if pool is not None:  # an error or an interrupt: what the workers are doing is not needed any more
            _terminate(pool)
        if s.workers == 1:
            if parallelism is None:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = parallelism


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop the workers now (a chunk takes seconds to tokenize; its result would be dropped anyway)."""
    processes = list(getattr(pool, "_processes", None) or {})  # terminate_workers() from Python 3.14 on
    pool.shutdown(wait=False, cancel_futures=True)
    for pid in processes:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _require_both_splits(state: Progress) -> None:
    if state.tokens["train"] == 0 or state.tokens["val"] == 0:
        missing = "training" if state.tokens["train"] == 0 else "validation"
        hint = "a --val-path / --val-split or a larger --val-fraction" if missing == "validation" else "more data"
        raise TrialInputError(f"--path/--dataset: no {missing} tokens ({sum(state.documents.values())} documents); give {hint}")


def _progress_record(key: str, state: Progress, started_wall: float, *, finished: bool) -> dict[str, Any]:
    return {
        "key": key, "finished": finished, "phase": state.phase, "position": state.position,
        "tokens": state.tokens, "documents": state.documents, "train_tokens": state.tokens["train"],
        "seconds": time.time() - started_wall,
    }


def _checkpoint(output: _Output, key: str, state: Progress, started_wall: float) -> None:
    """Make the partial files durable, then record how far they go (never the other way round)."""
    output.sync()
    write_atomic(output.out / PROGRESS, json.dumps(_progress_record(key, state, started_wall, finished=False)).encode())


def _checkpoint_quietly(output: _Output, key: str, state: Progress, started_wall: float) -> None:
    """On an error or an interrupt: record the position reached if the disk lets us (else the last checkpoint stands)."""
    try:
        _checkpoint(output, key, state, started_wall)
    except OSError:
        pass


def _manifest(s: PrepareSettings, tokenizer: Tokenizer, described: dict[str, Any], key: str, state: Progress,
              sha: dict[str, str], max_token: int, seconds: float) -> dict[str, Any]:
    content = hashlib.sha256(f"{sha['train']}:{sha['val']}".encode()).hexdigest()[:16]
    described = {**described, "max_tokens": s.max_tokens, "val_tokens": s.val_tokens, "chunk_docs": s.chunk_docs}
    return {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": f"prepared:{tokenizer.fingerprint}:sha256-{content}",
        "tokenizer": {"name": tokenizer.name, "fingerprint": tokenizer.fingerprint, "vocab": tokenizer.vocab,
                      "full_vocab": getattr(tokenizer, "full_vocab", tokenizer.vocab), "eos": tokenizer.eos},
        "dtype": tokenizer.dtype.name,
        "max_token": max_token,
        "train": {"file": FINAL["train"], "tokens": state.tokens["train"], "documents": state.documents["train"],
                  "sha256": sha["train"]},
        "val": {"file": FINAL["val"], "tokens": state.tokens["val"], "documents": state.documents["val"], "sha256": sha["val"]},
        "source": described,
        "settings_key": key,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "workers": s.workers,
    }


def _finish(s: PrepareSettings, record: dict[str, Any]) -> dict[str, Any]:
    """The manifest first (atomic), then the token files under their final names, then the progress file goes."""
    manifest = record["manifest"]
    write_atomic(s.out / MANIFEST, json.dumps(manifest, indent=2).encode())
    for split in ("val", "train"):
        partial = s.out / PARTIAL[split]
        if partial.exists():  # else renamed already, by the run that was killed after it
            os.replace(partial, s.out / FINAL[split])
    _fsync_dir(s.out)
    (s.out / PROGRESS).unlink(missing_ok=True)
    read_manifest(s.out / MANIFEST, "--out")
    return manifest
