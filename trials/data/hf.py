"""Hugging Face datasets (the optional `hf` extra, imported only here and only when asked).

`data.dataset` is a hub name (e.g. `allenai/c4` with `subset: en`, read by streaming), a local
folder of data files, or a folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`.
Documents (`data.text_column`) are tokenized on the fly and packed back to back into
sequences of `seq_len + 1` tokens, an end-of-document token between documents.

Order: a map-style dataset is read in a seeded permutation per epoch; a streamed one through
`IterableDataset.shuffle(seed, buffer_size=data.shuffle_buffer)` per epoch. The position is
(epoch, index of the current document in that order, tokens of it already used), so resuming
skips documents without tokenizing them and continues exactly.

Evaluation uses the first sequences of `data.val_split` in its stored order; when the
dataset has no such split, documents are held out from `data.split` by a hash of their text
(`data.val_fraction`) and the training stream skips them.

The unigram entropy (`trials.data.unigram`) is estimated from the first training tokens in
stored order; the estimate states how many it counted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trials.config import DataConfig
from trials.data.base import BatchStream, TokenSource, seed_words
from trials.data.cache import in_val_split
from trials.data.tokenizer import HF_EXTRA_HINT, Tokenizer, load_tokenizer
from trials.data.unigram import HF_SAMPLE_TOKENS, UnigramEntropy, estimated_tokens
from trials.errors import TrialInputError

_ENCODE_BATCH = 64


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise TrialInputError(f"data.source 'hf' needs the `datasets` library; {HF_EXTRA_HINT}") from None
    return datasets


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no detail'}"


def _is_saved_to_disk(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in ("dataset_dict.json", "state.json"))


class _Split:
    """One split of the dataset, opened lazily, iterable in a seeded order from any document index."""

    def __init__(self, ds: Any, column: str, shuffle_buffer: int) -> None:
        self.ds = ds
        self.column = column
        self.shuffle_buffer = shuffle_buffer
        names = list(ds.column_names or []) if getattr(ds, "column_names", None) is not None else None
        if names is not None and column not in names:
            raise TrialInputError(f"data.text_column: the dataset has no column {column!r} (columns: {', '.join(names)})")
        self.map_style = hasattr(ds, "__len__") and hasattr(ds, "__getitem__")

    def texts(self, seed: int | None, epoch: int, start: int) -> Iterator[str]:
        """Documents from index `start` of epoch `epoch`'s order (`seed` None: stored order)."""
        if self.map_style:
            n = len(self.ds)
            order = np.arange(n) if seed is None else np.random.default_rng(seed_words(seed, epoch)).permutation(n)
            for i in range(start, n):
                yield self._text(self.ds[int(order[i])])
            return
        ds = self.ds
        if seed is not None:
            ds = ds.shuffle(seed=int(np.random.SeedSequence(seed_words(seed, epoch)).generate_state(1)[0]),
                            buffer_size=self.shuffle_buffer)
        for row in itertools.islice(iter(ds), start, None):
            yield self._text(row)

    def _text(self, row: dict[str, Any]) -> str:
        text = row.get(self.column)
        if not isinstance(text, str):
            raise TrialInputError(f"data.text_column: {self.column!r} is not a text column (got {type(text).__name__})")
        return text


class HFBatchStream(BatchStream):
    """Packs tokenized documents into fixed-length sequences; position = (epoch, document, offset)."""

    def __init__(self, source: "HFTokenSource", batch_size: int, seq_len: int, seed: int) -> None:
        self.source = source
        self.batch_size = batch_size
        self.window = seq_len + 1
        self.seed = seed
        self.epoch, self.doc, self.offset = 0, 0, 0  # the next unused token
        self._pending: deque[tuple[int, int, np.ndarray]] = deque()  # (epoch, doc, tokens) from the current one
        self._iter: Iterator[tuple[int, int, np.ndarray]] | None = None

    def _documents(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """(epoch, doc index, tokens) of every training document from the current position on."""
        epoch, start = self.epoch, self.doc
        while True:
            found = False
            texts = self.source.train.texts(self.seed, epoch, start)
            indexed = ((start + i, t) for i, t in enumerate(texts))
            while chunk := list(itertools.islice(indexed, _ENCODE_BATCH)):
                kept = [(i, t) for i, t in chunk if not self.source.is_held_out(t)]
                for (i, _), tokens in zip(kept, self.source.tokenizer.encode_batch([t for _, t in kept])):
                    found = True
                    yield epoch, i, tokens
            if not found and start == 0:
                raise TrialInputError(f"{self.source.description}: no training documents")
            epoch, start = epoch + 1, 0

    def next_batch(self) -> np.ndarray:
        if self._iter is None:
            self._iter = self._documents()
        need = self.batch_size * self.window
        out = np.empty(need, dtype=np.int64)
        filled = 0
        while filled < need:
            if not self._pending:
                self._pending.append(next(self._iter))
            epoch, doc, tokens = self._pending[0]
            take = min(need - filled, len(tokens) - self.offset)
            out[filled : filled + take] = tokens[self.offset : self.offset + take]
            filled += take
            self.epoch, self.doc, self.offset = epoch, doc, self.offset + take
            if self.offset >= len(tokens):
                self._pending.popleft()
                if not self._pending:
                    self._pending.append(next(self._iter))
                self.epoch, self.doc, self.offset = self._pending[0][0], self._pending[0][1], 0
        return out.reshape(self.batch_size, self.window)

    def state(self) -> dict[str, Any]:
        return {"kind": "docs", "epoch": self.epoch, "doc": self.doc, "offset": self.offset,
                "seed": self.seed, "window": self.window}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "docs" or state.get("seed") != self.seed or state.get("window") != self.window:
            raise TrialInputError(f"data position {state} does not belong to this stream")
        self.epoch, self.doc, self.offset = int(state["epoch"]), int(state["doc"]), int(state["offset"])
        self._pending.clear()
        self._iter = None


class HFTokenSource(TokenSource):
    def __init__(self, cfg: DataConfig, tokenizer: Tokenizer, train: _Split, val: _Split | None, ident: str) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.train = train
        self.val = val
        self.vocab = tokenizer.vocab
        val_name = f"split-{cfg.val_split}" if val is not None else f"holdout{cfg.val_fraction:g}"
        self.fingerprint = (
            f"hf:{cfg.dataset}:{cfg.subset or '-'}:{cfg.split}:{ident}:{tokenizer.fingerprint}:{cfg.text_column}:{val_name}"
        )
        self.description = f"Hugging Face dataset {cfg.dataset}" + (f" ({cfg.subset})" if cfg.subset else "")
        self._eval: dict[tuple[int, int, int], list[np.ndarray]] = {}

    def is_held_out(self, text: str) -> bool:
        return self.val is None and in_val_split(text, self.cfg.val_fraction)

    def train_stream(self, batch_size: int, seq_len: int, seed: int) -> BatchStream:
        return HFBatchStream(self, batch_size, seq_len, seed)

    def unigram_entropy(self) -> UnigramEntropy:
        """Estimated from the first `HF_SAMPLE_TOKENS` training tokens in stored order (cached)."""

        def chunks() -> Iterator[np.ndarray]:
            texts = (t for t in self.train.texts(None, 0, 0) if not self.is_held_out(t))
            while chunk := list(itertools.islice(texts, _ENCODE_BATCH)):
                yield from self.tokenizer.encode_batch(chunk)

        return estimated_tokens(self.fingerprint, chunks(), self.vocab, HF_SAMPLE_TOKENS)

    def eval_batches(self, n_batches: int, batch_size: int, seq_len: int) -> list[np.ndarray]:
        key = (n_batches, batch_size, seq_len)
        if key not in self._eval:
            window, need = seq_len + 1, n_batches * batch_size * (seq_len + 1)
            split = self.val if self.val is not None else self.train
            buf: list[np.ndarray] = []
            have = 0
            texts = (t for t in split.texts(None, 0, 0) if self.val is not None or self.is_held_out(t))
            while have < need and (chunk := list(itertools.islice(texts, _ENCODE_BATCH))):
                for tokens in self.tokenizer.encode_batch(chunk):
                    buf.append(tokens)
                    have += len(tokens)
            if have < need:
                raise TrialInputError(
                    f"{self.description}: {have} validation tokens, fewer than train.eval_batches x batch_size x "
                    f"(seq_len + 1) = {need}"
                )
            rows = np.concatenate(buf)[:need].astype(np.int64).reshape(n_batches * batch_size, window)
            self._eval[key] = [rows[i * batch_size : (i + 1) * batch_size] for i in range(n_batches)]
        return self._eval[key]


def _open_split(datasets: Any, cfg: DataConfig, split: str, *, required: bool) -> tuple[Any, str] | None:
    """(dataset, identity) of one split; None when an optional split does not exist."""
    name = os.path.expanduser(cfg.dataset or "")
    path = Path(name)
    if _is_saved_to_disk(path):
        try:
            ds = datasets.load_from_disk(str(path))
        except Exception as exc:
            raise TrialInputError(f"data.dataset: {cfg.dataset}: cannot load the saved dataset ({_first_line(exc)})") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                if required:
                    raise TrialInputError(f"data.split: {split!r} not in {cfg.dataset} (splits: {', '.join(ds)})")
                return None
            ds = ds[split]
        elif not required:
            return None  # a single saved Dataset is the training split only
        return (ds.to_iterable_dataset() if cfg.streaming else ds), _identity(ds)
    try:
        ds = datasets.load_dataset(name, cfg.subset, split=split, streaming=cfg.streaming)
        return ds, _identity(ds)
    except ValueError as exc:
        if not required and "split" in str(exc).lower():
            return None
        raise TrialInputError(f"data.dataset: {cfg.dataset}: {_first_line(exc)}") from None
    except Exception as exc:
        where = "the local folder" if path.exists() else "the Hugging Face hub (offline?)"
        raise TrialInputError(
            f"data.dataset: cannot open {cfg.dataset!r}{f' ({cfg.subset})' if cfg.subset else ''} from {where}: "
            f"{_first_line(exc)}; to work offline, save it once with `save_to_disk` and give the folder"
        ) from None


def _identity(ds: Any) -> str:
    """What identifies the data: the saved dataset's own fingerprint, else the hub's version and sizes."""
    fp = getattr(ds, "_fingerprint", None)
    if isinstance(fp, str):
        return f"fp-{fp[:16]}"
    info = getattr(ds, "info", None)
    splits = getattr(info, "splits", None) or {}
    sizes = {name: getattr(split, "num_examples", None) for name, split in splits.items()}
    parts = [str(getattr(info, "version", None)), json.dumps(sizes, sort_keys=True, default=str)]
    return "info-" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def training_texts(cfg: DataConfig) -> Iterator[str]:
    """The training split's documents in stored order, the held-out ones (`HFTokenSource.is_held_out`) left
    out when the dataset has no validation split; opens no tokenizer (`trials.data.bpe` trains one from these)."""
    if not cfg.dataset:
        raise TrialInputError("data.dataset: required for source 'hf' (a hub name such as allenai/c4, or a local folder)")
    datasets = _import_datasets()
    train = _open_split(datasets, cfg, cfg.split, required=True)
    assert train is not None
    has_val = bool(cfg.val_split) and _open_split(datasets, cfg, cfg.val_split, required=False) is not None  # type: ignore[arg-type]
    for text in _Split(train[0], cfg.text_column, cfg.shuffle_buffer).texts(None, 0, 0):
        if has_val or not in_val_split(text, cfg.val_fraction):
            yield text


_opened: dict[DataConfig, HFTokenSource] = {}


def hf_source(cfg: DataConfig) -> HFTokenSource:
    if not cfg.dataset:
        raise TrialInputError("data.dataset: required for source 'hf' (a hub name such as allenai/c4, or a local folder)")
    if cfg in _opened:
        return _opened[cfg]
    datasets = _import_datasets()
    tokenizer = load_tokenizer(cfg.tokenizer)
    train = _open_split(datasets, cfg, cfg.split, required=True)
    assert train is not None
    val = _open_split(datasets, cfg, cfg.val_split, required=False) if cfg.val_split else None
    source = HFTokenSource(
        cfg,
        tokenizer,
        _Split(train[0], cfg.text_column, cfg.shuffle_buffer),
        _Split(val[0], cfg.text_column, cfg.shuffle_buffer) if val is not None else None,
        train[1],
    )
    _opened[cfg] = source
    return source
