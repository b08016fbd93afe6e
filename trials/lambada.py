"""LAMBADA last-word perplexity (`eval.tasks: [lambada]`), scored at a trial's final evaluation for every
member of the stack.

LAMBADA (Paperno et al. 2016, "The LAMBADA dataset: Word prediction requiring a broad discourse context",
ACL 2016, arXiv 1606.06031) holds passages whose last word a reader guesses from the whole passage but not
from its last sentence alone. The usual copy of its test set is `EleutherAI/lambada_openai` (5,153 passages
in the detokenized form OpenAI scored GPT-2 on, one `text` field each); a local JSONL file of the same form
serves as well (`eval.lambada.source: jsonl`).

The definition, that of EleutherAI's lm-evaluation-harness task `lambada_openai` (the figure papers report
as LAMBADA perplexity), written out:

- split: the passage (trailing whitespace stripped) is cut at its last space: `context, word =
  text.rsplit(" ", 1)`; the target is the last word with its leading space, `" " + word`;
- tokens: the whole passage and the context are each tokenized alone (no end-of-document token); the
  target is every token of the whole passage after the context's: `whole[len(encode(context)):]` (a word
  of several tokens counts all of them);
- the model reads the tokenizer's end-of-document token, then the context and the target but its last
  token, and predicts each target token from everything before it. The leading end-of-document token is
  this project's choice (the harness starts with no token for a model without a BOS token): the training
  streams join documents with it (`trials.data.tokenizer`), so it is what precedes the start of every
  document the model saw; a tokenizer without one starts with the context. At most `model.seq_len`
  inputs: a longer passage loses its oldest tokens (none of LAMBADA's test passages is that long at 2048);
- a passage's negative log-likelihood is the sum over its target tokens; the perplexity is
  `exp(mean over passages of that sum)`: per target **word**, not per token (the harness's `perplexity`
  aggregation of the continuation's log-likelihood).

Batches have static shapes for the compiled blocks: every passage is padded to one length (the longest
input of the set rounded up to 64, at most `seq_len`), and the last chunk is filled up with empty rows
(no target), so a model sees one new shape (`trials.compiled`). Only the target rows go through the head.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trials.config import DataConfig, LambadaConfig
from trials.data.tokenizer import HF_EXTRA_HINT, Tokenizer, load_tokenizer
from trials.errors import TrialInputError

PAD_MULTIPLE = 64  # passages are padded to the longest input rounded up to this


def split_last_word(text: str) -> tuple[str, str]:
    """(context, target) of a passage: the text before its last space, and `" " + last word`."""
    stripped = text.rstrip()
    if " " not in stripped:
        raise ValueError(f"a LAMBADA passage needs a space before its last word (got {stripped[:60]!r})")
    context, word = stripped.rsplit(" ", 1)
    return context, " " + word


@dataclass(frozen=True)
class Passage:
    """One scored passage: the tokens the model reads and predicts, and how many of the last are the target."""

    tokens: np.ndarray  # [start token] + context + target, int64 (truncated at the front to seq_len + 1)
    target: int  # the last `target` tokens are the last word's

    @property
    def inputs(self) -> int:
        return len(self.tokens) - 1


def tokenize_passages(texts: Sequence[str], tokenizer: Tokenizer, seq_len: int) -> list[Passage]:
    """Each passage as the model scores it (the module docstring's definition)."""
    contexts, wholes = [], []
    for text in texts:
        context, target = split_last_word(text)
        contexts.append(context)
        wholes.append(context + target)
    start = [] if tokenizer.eos is None else [tokenizer.eos]
    out = []
    for context, whole in zip(tokenizer.encode_plain(contexts), tokenizer.encode_plain(wholes)):
        target = len(whole) - len(context)
        if target < 1:
            raise ValueError("a LAMBADA passage whose last word has no token of its own")
        tokens = np.asarray(start + [int(t) for t in whole], dtype=np.int64)[-(seq_len + 1):]
        if target > len(tokens) - 1:
            raise ValueError(f"a last word of {target} tokens does not fit a context of {seq_len}")
        out.append(Passage(tokens, target))
    return out


@dataclass(frozen=True)
class PassageBatch:
    """A chunk of passages padded to one shape, and where their target tokens are."""

    inputs: Tensor  # [rows, length] int64
    rows: Tensor  # [R] flat positions (row * length + column) of the target predictions
    targets: Tensor  # [R] the target token at each
    owner: Tensor  # [R] the passage (row) each belongs to
    passages: int  # real passages in the chunk (the rest are empty filler rows)


def make_batches(passages: Sequence[Passage], rows: int, seq_len: int) -> list[PassageBatch]:
    """Chunks of `rows` passages, padded to one length (see the module docstring)."""
    if not passages:
        return []
    longest = max(p.inputs for p in passages)
    length = min(seq_len, PAD_MULTIPLE * math.ceil(longest / PAD_MULTIPLE))
    out = []
    for first in range(0, len(passages), rows):
        chunk = passages[first:first + rows]
        inputs = np.zeros((rows, length), dtype=np.int64)
        flat, targets, owner = [], [], []
        for r, p in enumerate(chunk):
            n = p.inputs
            inputs[r, :n] = p.tokens[:-1]
            cols = range(n - p.target, n)  # input position t predicts token t + 1
            flat.extend(r * length + c for c in cols)
            targets.extend(int(p.tokens[c + 1]) for c in cols)
            owner.extend([r] * p.target)
        out.append(PassageBatch(torch.from_numpy(inputs), torch.tensor(flat), torch.tensor(targets),
                                torch.tensor(owner), len(chunk)))
    return out


@torch.no_grad()
def passage_nll(model: Any, batch: PassageBatch) -> Tensor:
    """`[K, passages]` float64: each member's negative log-likelihood of each passage's target (summed over its
    tokens). `model` is a stacked LM with `final_hidden(idx) -> [K, B*T, d]` and a `[K, d, V]` head; the head
    and the log-softmax run in fp32 on the target rows only."""
    device = model.head.device
    h = model.final_hidden(batch.inputs.to(device))
    rows, targets = batch.rows.to(device), batch.targets.to(device)
    with torch.autocast(device.type, enabled=False):
        logits = torch.bmm(h[:, rows].float(), model.head.float())  # [K, R, V]
        nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, targets.view(1, -1, 1).expand(
            logits.shape[0], -1, 1)).squeeze(-1)
    out = torch.zeros(logits.shape[0], batch.inputs.shape[0], dtype=torch.float64, device=device)
    out.index_add_(1, batch.owner.to(device), nll.double())
    return out[:, :batch.passages]


def perplexity(model: Any, batches: Sequence[PassageBatch]) -> list[float]:
    """Each member's LAMBADA perplexity: exp of the mean per-passage NLL of the last word."""
    total, count = None, 0
    for batch in batches:
        nll = passage_nll(model, batch).sum(dim=1)
        total = nll if total is None else total + nll
        count += batch.passages
    if total is None or count == 0:
        raise ValueError("LAMBADA: no passages to score")
    return [math.exp(v / count) if math.isfinite(v / count) else math.inf for v in total.cpu().tolist()]


def read_passages(cfg: LambadaConfig) -> list[str]:
    """The passages `cfg` names (a local JSONL file, or a Hugging Face dataset), the first `limit` of them."""
    if cfg.source == "jsonl":
        texts = _jsonl_texts(Path(cfg.path or ""), cfg.text_column)
    else:
        texts = _hf_texts(cfg)
    if cfg.limit is not None:
        texts = texts[:cfg.limit]
    if not texts:
        raise TrialInputError("eval.lambada: no passages")
    return texts


def _jsonl_texts(path: Path, column: str) -> list[str]:
    where = f"eval.lambada.path: {path}"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TrialInputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    texts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise TrialInputError(f"{where}:{number}: not a JSON object") from None
        if not isinstance(record, dict) or not isinstance(record.get(column), str):
            raise TrialInputError(f"{where}:{number}: no text field {column!r}")
        texts.append(record[column])
    return texts


def _hf_texts(cfg: LambadaConfig) -> list[str]:
    try:
        import datasets
    except ImportError:
        raise TrialInputError(f"eval.lambada: source 'hf' needs the `datasets` library; {HF_EXTRA_HINT}") from None
    try:
        folder = Path(cfg.dataset).expanduser()
        if folder.is_dir() and any((folder / f).is_file() for f in ("dataset_dict.json", "state.json")):
            ds = datasets.load_from_disk(str(folder))  # written by save_to_disk
            ds = ds[cfg.split] if isinstance(ds, datasets.DatasetDict) else ds
        else:
            ds = datasets.load_dataset(cfg.dataset, cfg.subset, split=cfg.split)
    except Exception as exc:  # the library raises many kinds (network, missing split, bad name)
        first = (str(exc).strip().splitlines() or ["no detail"])[0]
        raise TrialInputError(f"eval.lambada.dataset: could not load {cfg.dataset!r} split {cfg.split!r} "
                              f"({type(exc).__name__}: {first}); offline? point eval.lambada at a local JSONL file "
                              "(source: jsonl, path: ...)") from None
    if cfg.text_column not in (ds.column_names or []):
        raise TrialInputError(f"eval.lambada.text_column: {cfg.dataset} has no column {cfg.text_column!r} "
                              f"(columns: {', '.join(ds.column_names or [])})")
    return [str(t) for t in ds[cfg.text_column]]


@dataclass(frozen=True)
class LambadaTask:
    """LAMBADA's passages, tokenized and batched for one trial."""

    batches: list[PassageBatch]
    passages: int

    def perplexity(self, model: Any) -> list[float]:
        return perplexity(model, self.batches)


def open_lambada(cfg: LambadaConfig, data: DataConfig, *, seq_len: int, vocab: int, rows: int) -> LambadaTask:
    """The task for a trial whose model reads `seq_len` tokens of `vocab` ids, scored `rows` passages at a time.
    The tokenizer is `eval.lambada.tokenizer`, else `data.tokenizer` (byte-level without one)."""
    name = cfg.tokenizer or data.tokenizer
    if name is None and data.source == "tokens":
        raise TrialInputError("eval.lambada.tokenizer: pre-tokenized data (source 'tokens') does not say which "
                              "tokenizer made its ids; give the same one here (or as data.tokenizer)")
    tokenizer = load_tokenizer(name, field="eval.lambada.tokenizer" if cfg.tokenizer else "data.tokenizer")
    if tokenizer.vocab > vocab:
        raise TrialInputError(f"eval.lambada: the tokenizer has {tokenizer.vocab} ids, more than model.vocab {vocab}")
    try:
        passages = tokenize_passages(read_passages(cfg), tokenizer, seq_len)
    except ValueError as exc:
        raise TrialInputError(f"eval.lambada: {exc}") from None
    return LambadaTask(make_batches(passages, rows, seq_len), len(passages))
