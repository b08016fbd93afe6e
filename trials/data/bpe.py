"""A sweep's own tokenizer, trained once from its data (`data.tokenizer_train`).

Parcae trains its own byte-level BPE tokenizer of 32,768 ids on FineWeb-Edu and publishes it under no
name, so a sweep that follows its recipe names a local file (`data.tokenizer`) and, with
`data.tokenizer_train`, has the launch train it there when the file is missing: a byte-level BPE
(every byte is a piece, so no text is ever unknown) whose pre-tokenizer splits text as GPT-4's
tokenizer does (letters, 1-3 digit numbers, punctuation runs and whitespace apart; contractions kept),
over the first `documents` documents of the training split, held-out documents excluded. The end-of-document
token `<|endoftext|>` is id 0 and counts in `vocab`.

Training is deterministic for a given stream of documents (the `tokenizers` library's BPE trainer
breaks ties by the pieces' order), and the file is written atomically, so a launch killed while
training leaves no half file. Needs the `tokenizers` library (the `hf` extra).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from trials.config import TOKENIZER_TRAINABLE_SOURCES as TRAINABLE_SOURCES
from trials.config import DataConfig
from trials.data.tokenizer import HF_EXTRA_HINT, Tokenizer, load_tokenizer
from trials.errors import TrialInputError

EOS_TOKEN = "<|endoftext|>"
# GPT-4's pre-tokenization (the split pattern of its published encoding), written out here: contractions,
# words with an optional leading non-letter, numbers of at most three digits, punctuation runs, newlines, spaces.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BATCH_DOCUMENTS = 1000


def train_bpe(texts: Iterable[str], vocab: int, out: Path) -> Tokenizer:
    """Train a byte-level BPE of exactly `vocab` ids (the EOS token included) on `texts`, write it to `out`
    (atomically, as a `tokenizers` JSON file) and return it loaded as a trial would load it."""
    try:
        from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
        from tokenizers import Tokenizer as RawTokenizer
    except ImportError:
        raise TrialInputError(f"data.tokenizer_train: needs the `tokenizers` library; {HF_EXTRA_HINT}") from None
    tokenizer = RawTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    batches = _batched(texts)
    tokenizer.train_from_iterator(batches, trainer=trainer)
    got = tokenizer.get_vocab_size(with_added_tokens=True)
    if got != vocab:
        raise TrialInputError(f"data.tokenizer_train: the training documents give only {got} ids, fewer than "
                              f"vocab {vocab}; give more documents (data.tokenizer_train.documents) or a smaller vocab")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        tokenizer.save(tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return load_tokenizer(str(out))


def training_documents(cfg: DataConfig, documents: int) -> Iterator[str]:
    """The first `documents` documents of `cfg`'s training split in stored order, held-out ones excluded
    (the same held-out rule the trials apply)."""
    if cfg.source not in TRAINABLE_SOURCES:
        raise TrialInputError(f"data.tokenizer_train: trains on text; data.source {cfg.source!r} has none "
                              f"(allowed: {', '.join(TRAINABLE_SOURCES)})")
    if cfg.source == "hf":
        from trials.data.hf import training_texts

        texts = training_texts(cfg)
    else:
        from trials.data.local import training_texts as local_texts

        texts = local_texts(cfg)
    return itertools.islice(texts, documents)


def ensure_tokenizer(cfg: DataConfig) -> Tokenizer | None:
    """Train `cfg.tokenizer` from the data when `cfg.tokenizer_train` asks for it and the file is missing;
    None when there is nothing to train (no recipe, or the file exists)."""
    recipe = cfg.tokenizer_train
    if recipe is None or cfg.tokenizer is None:
        return None
    path = Path(os.path.expanduser(cfg.tokenizer))
    if path.exists():
        return None
    return train_bpe(training_documents(cfg, recipe.documents), recipe.vocab, path)


def _batched(texts: Iterable[str]) -> Iterator[list[str]]:
    it = iter(texts)
    while batch := list(itertools.islice(it, BATCH_DOCUMENTS)):
        yield batch
