"""Token sources of a trial, behind one interface (`TokenSource`, `BatchStream`).

`open_source(cfg)` picks the source named by `DataConfig.source`:
`builtin` (the interpreter's stdlib sources, bytes), `text` / `jsonl` / `parquet` (local files),
`tokens` (pre-tokenized binaries), `hf` (Hugging Face datasets, optional extra) and
`synthetic` (tests), and for the ViT `images` / `builtin_images` (`trials.data.images`, an
`ImageSource`: labelled images instead of tokens). Every source has a vocabulary size and a fingerprint that is stored with
each result, gives training batches in an order fixed by a seed with an exact position, and knows
the loss of a model that learned only its frequencies (`unigram_entropy()`, `trials.data.unigram`).
"""

from __future__ import annotations

from trials.config import DataConfig
from trials.data.base import ArrayTokenSource, BatchStream, TokenSource
from trials.data.cache import cache_root
from trials.data.unigram import UnigramEntropy
from trials.errors import TrialInputError

__all__ = ["ArrayTokenSource", "BatchStream", "TokenSource", "UnigramEntropy", "cache_root", "check_vocab", "open_source",
           "unigram_entropy"]


def open_source(cfg: DataConfig) -> TokenSource:
    """The token source for `cfg` (heavy work is done once and cached; see each module)."""
    if cfg.eval_split != "val" and cfg.source != "builtin":
        raise TrialInputError(f"data.eval_split: {cfg.eval_split!r} is offered by the built-in corpus only "
                              f"(source {cfg.source!r} has one held-out set: leave eval_split at 'val')")
    if cfg.source == "builtin":
        from trials.data.builtin import builtin_source

        if cfg.tokenizer is not None:
            raise TrialInputError("data.tokenizer: the built-in corpus is byte-level; leave tokenizer unset")
        return builtin_source(cfg.val_fraction, cfg.eval_split)
    if cfg.source in ("text", "jsonl", "parquet"):
        from trials.data.local import text_source

        return text_source(cfg)
    if cfg.source == "tokens":
        from trials.data.local import tokens_source

        return tokens_source(cfg)
    if cfg.source == "hf":
        from trials.data.hf import hf_source

        return hf_source(cfg)
    if cfg.source == "synthetic":
        from trials.data.synthetic import synthetic_source

        return synthetic_source(cfg)
    if cfg.source in ("images", "builtin_images"):
        from trials.data.images import image_source

        return image_source(cfg)  # type: ignore[return-value]  # an ImageSource: the ViT family's interface
    raise TrialInputError(f"data.source {cfg.source!r} is not a known source")


def check_vocab(model_vocab: int, source: TokenSource) -> None:
    """The model must have an output for every token id the data can contain."""
    if model_vocab < source.vocab:
        raise TrialInputError(
            f"model.vocab {model_vocab} is smaller than the data's vocabulary {source.vocab} "
            f"({source.description}); set model.vocab >= {source.vocab}"
        )


def unigram_entropy(cfg: DataConfig) -> UnigramEntropy:
    """The frequency-only loss of the data `cfg` names: the unigram entropy of its training tokens
    (exact for local data, estimated for `hf`), or the class-frequency entropy of an image set.
    No torch: the controller calls it on a planned data config (cached by the corpus fingerprint)."""
    return open_source(cfg).unigram_entropy()
