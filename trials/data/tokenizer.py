"""Tokenizers: byte-level (vocab 256, no dependency) or a Hugging Face `tokenizers` tokenizer
(a local `tokenizer.json`, a folder holding one, or a hub name when the sweep asks for it).

Documents are joined with an end-of-document token: byte 0 (NUL, which never occurs in
text sources) for byte-level data, the tokenizer's own EOS token otherwise (none if it has none).

A Hugging Face tokenizer's `vocab` is the number of ids text can produce: its last ids are left out
when they are special tokens added for other tasks, such as the T5 tokenizer's 100 sentinels
`<extra_id_0..99>` (ids 32000-32099, used only by span corruption): the study trains on its 32,000
pieces with a 32,000-row embedding, as the Curse-of-Depth code does with `t5-base`. Such a token
would only come from its literal text (`<extra_id_5>` written in a document); it is dropped there.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from trials.errors import TrialInputError

HF_EXTRA_HINT = "install the optional extra: pip install 'layerrope-sweeper[hf]'"
_EOS_CANDIDATES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "[SEP]", "<|eos|>")


class Tokenizer(ABC):
    vocab: int
    eos: int | None
    fingerprint: str  # changes whenever the token ids of some text would change
    name: str

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.vocab <= 256 else np.uint16 if self.vocab <= 65536 else np.uint32)

    @abstractmethod
    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text, end-of-document token appended when the tokenizer has one."""

    @abstractmethod
    def encode_plain(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text alone, no end-of-document token (a passage and its prefix, `trials.lambada`)."""


class ByteTokenizer(Tokenizer):
    vocab = 256
    eos = 0
    fingerprint = "bytes"
    name = "bytes"

    def encode_bytes(self, data: bytes) -> np.ndarray:
        return np.frombuffer(data + b"\x00", dtype=np.uint8)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode_bytes(t.encode("utf-8", errors="replace")) for t in texts]

    def encode_plain(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8", errors="replace"), dtype=np.uint8) for t in texts]


class HFTokenizer(Tokenizer):
    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self.eos = next((i for t in _EOS_CANDIDATES if (i := tokenizer.token_to_id(t)) is not None), None)
        self.full_vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
        self.vocab = text_vocab(tokenizer, self.full_vocab, self.eos)
        self.fingerprint = "tok-" + hashlib.sha256(tokenizer.to_str().encode()).hexdigest()[:16]
        if self.vocab < self.full_vocab:  # ids at and above `vocab` are dropped: other ids than before
            self.fingerprint += f"-text{self.vocab}"

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        tail = [self.eos] if self.eos is not None else []
        return [np.asarray(ids + tail, dtype=self.dtype) for ids in self._ids(texts)]

    def encode_plain(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=self.dtype) for ids in self._ids(texts)]

    def _ids(self, texts: list[str]) -> list[list[int]]:
        out = []
        for enc in self.tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = enc.ids
            if self.vocab < self.full_vocab and max(ids, default=0) >= self.vocab:
                ids = [i for i in ids if i < self.vocab]
            out.append(list(ids))
        return out


def text_vocab(tokenizer: Any, full_vocab: int, eos: int | None) -> int:
    """`full_vocab` less the trailing ids that are special added tokens (other than the EOS token)."""
    special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
    vocab = full_vocab
    while vocab - 1 in special and vocab - 1 != eos:
        vocab -= 1
    return vocab


def load_tokenizer(spec: str | None, *, field: str = "data.tokenizer") -> Tokenizer:
    """`None` gives byte-level; else a tokenizer.json, a folder with one, or a hub name (needs network)."""
    if spec is None or spec == "bytes":
        return ByteTokenizer()
    try:
        from tokenizers import Tokenizer as RawTokenizer
    except ImportError:
        raise TrialInputError(f"{field}: {spec!r} needs the `tokenizers` library; {HF_EXTRA_HINT}") from None
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
        path = path / "tokenizer.json"
        if not path.is_file():
            raise TrialInputError(f"{field}: {spec}: a folder without tokenizer.json")
    if path.is_file():
        try:
            return HFTokenizer(RawTokenizer.from_file(str(path)), name=spec)
        except Exception as exc:  # the library raises a bare Exception on bad JSON
            raise TrialInputError(f"{field}: {path}: not a tokenizers JSON file ({exc})") from None
    if spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1:
        raise TrialInputError(f"{field}: {spec}: no such file or folder")
    try:
        return HFTokenizer(RawTokenizer.from_pretrained(spec), name=spec)
    except Exception as exc:
        raise TrialInputError(
            f"{field}: could not load {spec!r} from the Hugging Face hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); offline? save it once with "
            f"`tokenizer.save('tokenizer.json')` and give the file's path"
        ) from None
