"""A prepared token corpus (written by `sweeper data prepare`, read as `source: tokens`).

Layout of the folder:

    manifest.json   what the tokens are (below); written when the token files are complete
    train.bin       training tokens: a flat array of `dtype` token ids, documents back to back,
                    each followed by the tokenizer's end-of-document token (when it has one)
    val.bin         held-out tokens, the same layout

`manifest.json` (format `layerrope-sweeper/tokens`, version 1) holds: `tokenizer` (`name`,
`fingerprint`, `vocab`: the ids text can produce, which `model.vocab` must reach, as for every
source; `full_vocab`: with the special ids no text produces, such as T5's 100 sentinels; `eos`),
`dtype` (uint8 / uint16 / uint32, the smallest that holds the vocabulary), `max_token` (the largest
id in the files, below `vocab`), `train` and `val` (`file`, `tokens`, `documents`, `sha256` of the file's bytes),
`source` (what was read: dataset or files, split, text column, limits), `fingerprint` (the tokenizer's
and the token files' hashes: two corpora with the same fingerprint hold the same tokens), and
`created`, `seconds`, `workers`. A trial checks each file's size against the manifest (O(1)) and
refuses a folder without a manifest, so an interrupted prepare is never read.

Training order (`PermutedWindowStream`): epochs; each cuts the training tokens into windows of
`seq_len + 1` at a random offset and visits them in a seeded permutation (`IndexPermutation`,
computed per index: no permutation array however large the corpus). Sequence `s` of the stream is a
pure function of (seed, seq_len, s): the position is one integer, resuming costs nothing, and two
seeds see two orders. Evaluation batches are spread evenly over `val.bin`, the same for every seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from trials.data.base import ArrayTokenSource, BatchStream, seed_words
from trials.data.cache import open_tokens
from trials.data.permutation import IndexPermutation
from trials.errors import TrialInputError

FORMAT = "layerrope-sweeper/tokens"
VERSION = 1
MANIFEST = "manifest.json"
PROGRESS = ".prepare-progress.json"  # an unfinished prepare's state (see trials.data.prepare)
SPLITS = ("train", "val")
DTYPES = ("uint8", "uint16", "uint32")


def prepared_manifest(path: Path) -> Path | None:
    """The manifest a `data.path` names: a folder's `manifest.json`, a `.json` file itself, or the
    `manifest.json` beside a token file that it lists. None: not a prepared corpus."""
    if path.is_dir():
        return path / MANIFEST
    if path.suffix == ".json":
        return path
    beside = path.parent / MANIFEST
    if path.is_file() and beside.is_file():
        try:
            files = {json.loads(beside.read_text()).get(split, {}).get("file") for split in SPLITS}
        except (OSError, ValueError, AttributeError):
            return None
        if path.name in files:
            return beside
    return None


def _unfinished(folder: Path) -> str:
    progress = folder / PROGRESS
    if not progress.is_file():
        return ""
    try:
        state = json.loads(progress.read_text())
        done = f" ({int(state['train_tokens']):,} training tokens so far)"
    except (OSError, ValueError, KeyError, TypeError):
        done = ""
    return f"; its `sweeper data prepare` has not finished{done}: rerun the same command to complete it"


def read_manifest(manifest: Path, field: str = "data.path") -> dict[str, Any]:
    """The manifest, checked: format, dtype, vocabulary, and each token file present with its size."""
    folder = manifest.parent
    if not manifest.is_file():
        raise TrialInputError(
            f"{field}: {folder}: no {MANIFEST}, so not a prepared token corpus{_unfinished(folder)}"
            if folder.is_dir() else f"{field}: {manifest}: no such file"
        )
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        raise TrialInputError(f"{field}: {manifest}: not a readable manifest ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TrialInputError(f"{field}: {manifest}: not a manifest of `sweeper data prepare` (format is not {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise TrialInputError(f"{field}: {manifest}: manifest version {meta.get('version')!r}; this sweeper reads version {VERSION}")
    try:
        vocab = int(meta["tokenizer"]["vocab"])
        max_token = int(meta["max_token"])
        dtype = str(meta["dtype"])
        fingerprint = str(meta["fingerprint"])
        splits = {s: (str(meta[s]["file"]), int(meta[s]["tokens"])) for s in SPLITS}
    except (KeyError, TypeError, ValueError) as exc:
        raise TrialInputError(f"{field}: {manifest}: manifest field {exc} missing or malformed") from None
    if dtype not in DTYPES:
        raise TrialInputError(f"{field}: {manifest}: dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    if vocab < 1 or vocab > np.iinfo(dtype).max + 1:
        raise TrialInputError(f"{field}: {manifest}: tokenizer.vocab {vocab} does not fit dtype {dtype}")
    if not 0 <= max_token < vocab:
        raise TrialInputError(f"{field}: {manifest}: max_token {max_token} is not an id of the tokenizer (vocab {vocab})")
    itemsize = np.dtype(dtype).itemsize
    for split, (name, tokens) in splits.items():
        path = folder / name
        if not path.is_file():
            raise TrialInputError(f"{field}: {path}: missing (listed in {manifest}){_unfinished(folder)}")
        size = path.stat().st_size
        if size != tokens * itemsize:
            raise TrialInputError(
                f"{field}: {path}: {size} bytes, but {manifest} lists {tokens} {dtype} tokens ({tokens * itemsize} bytes); "
                f"the file was changed or cut short: prepare the corpus again"
            )
        if tokens == 0:
            raise TrialInputError(f"{field}: {path}: no {split} tokens")
    meta["_folder"] = str(folder)
    meta["_fingerprint"] = fingerprint
    return meta


class PermutedWindowStream(BatchStream):
    """Epochs of non-overlapping windows at a seeded offset, in a seeded permutation (O(1) per index)."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, *, name: str) -> None:
        self.tokens = tokens
        self.batch_size = batch_size
        self.window = seq_len + 1
        self.seed = seed
        self.n_windows = (len(tokens) - (self.window - 1)) // self.window  # whole windows at any offset
        if self.n_windows < 1:
            raise TrialInputError(
                f"{name}: {len(tokens)} training tokens, fewer than one sequence of {self.window} "
                f"(model.seq_len + 1); prepare more data or use a shorter seq_len"
            )
        self.position = 0  # sequences consumed
        self._epochs: dict[int, tuple[int, IndexPermutation]] = {}
        self._columns = np.arange(self.window, dtype=np.int64)

    def _epoch(self, epoch: int) -> tuple[int, IndexPermutation]:
        if epoch not in self._epochs:
            words = seed_words(self.seed, epoch, self.window)
            offset = int(np.random.default_rng(words).integers(0, self.window))
            self._epochs = {epoch: (offset, IndexPermutation(self.n_windows, words))}  # one epoch at a time
        return self._epochs[epoch]

    def starts(self, first: int, count: int) -> np.ndarray:
        """Token offsets of sequences `first .. first + count - 1` of the stream."""
        sequences = np.arange(first, first + count, dtype=np.int64)
        epochs, index = np.divmod(sequences, self.n_windows)
        out = np.empty(count, dtype=np.int64)
        for epoch in np.unique(epochs):
            offset, perm = self._epoch(int(epoch))
            here = epochs == epoch
            out[here] = offset + perm(index[here]) * self.window
        return out

    def next_batch(self) -> np.ndarray:
        starts = self.starts(self.position, self.batch_size)
        self.position += self.batch_size
        order = np.argsort(starts)  # ascending reads from the memory map, then back to the stream's order
        rows = np.asarray(self.tokens[starts[order][:, None] + self._columns], dtype=np.int64)
        out = np.empty_like(rows)
        out[order] = rows
        return out

    def state(self) -> dict[str, Any]:
        return {"kind": "permuted", "sequences": self.position, "seed": self.seed, "window": self.window,
                "windows": self.n_windows}

    def load_state(self, state: dict[str, Any]) -> None:
        mine = {"kind": "permuted", "seed": self.seed, "window": self.window, "windows": self.n_windows}
        if any(state.get(k) != v for k, v in mine.items()):
            raise TrialInputError(f"data position {state} does not belong to this stream ({mine})")
        self.position = int(state["sequences"])


class PreparedTokenSource(ArrayTokenSource):
    """The train and validation token files of a prepared corpus, memory-mapped."""

    def __init__(self, meta: dict[str, Any], path_given: str) -> None:
        folder = Path(meta["_folder"])
        dtype = meta["dtype"]
        super().__init__(
            open_tokens(folder / meta["train"]["file"], dtype),
            open_tokens(folder / meta["val"]["file"], dtype),
            vocab=int(meta["tokenizer"]["vocab"]),
            fingerprint=meta["_fingerprint"],
            description=f"prepared corpus {path_given} ({meta['tokenizer'].get('name')}, {meta['train']['tokens']:,} tokens)",
        )
        self.manifest = meta

    def train_stream(self, batch_size: int, seq_len: int, seed: int) -> BatchStream:
        return PermutedWindowStream(self.train, batch_size, seq_len, seed, name=self.description)
