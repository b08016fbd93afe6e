"""A language model's evaluation on a trial's held-out batches, and the evaluations a sweep adds at the end.

`evaluate_text` runs every held-out batch in chunks of the trial's `eval_chunk` sequences, without
gradients: the mean loss of each batch per member (and top-1 hits for `objective: error`), through the
fused head + loss's no-grad path (`trials.fused_loss.eval_sums`: one chunk of logits at a time, never the
`[K, B*T, V]` logits of a whole batch). A looped model whose `eval_loops` lists several counts is evaluated
at each of them in the same pass (`LoopedLM.eval_losses`: the core runs up to the largest count, the coda,
head and loss after each); the headline loss is the largest count's, computed exactly as a single-count
evaluation computes it (the per-count sums are what `eval_sums` returns at that count).

`FinalTasks` holds the tasks of `eval.tasks` (LAMBADA's last-word perplexity, `trials.lambada`), scored
once, at the final evaluation, for every member of the stack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from models.config import ModelConfig
from models.family import FamilySpec
from trials.config import DataConfig, EvalConfig
from trials.errors import TrialInputError
from trials.fused_loss import eval_sums
from trials.lambada import LambadaTask, open_lambada
from trials.noise import mean_and_se


@dataclass
class TextEvaluation:
    """One evaluation of the K members of a stack (lists by slot of the stack)."""

    per_batch: list[list[float]]  # [K][batches] mean loss of each eval batch
    sizes: list[int]  # counted target positions of each batch
    accuracy: list[float] | None  # top-1 accuracy per member (objective: error), else None
    loop_batches: dict[int, list[list[float]]] = field(default_factory=dict)  # count -> [K][batches] (several counts)

    def loop_losses(self, slot: int) -> dict[str, float] | None:
        """{loop count: mean loss} of one slot (keys as text: JSON's), or None without several counts."""
        if not self.loop_batches:
            return None
        return {str(count): mean_and_se(batches[slot], self.sizes)[0] for count, batches in self.loop_batches.items()}


def loop_counts(family: FamilySpec, cfg: ModelConfig) -> tuple[int, ...]:
    """The loop counts an evaluation reports a loss at: the family's `eval_loop_counts` when there are several
    (one count is the headline loss alone, as before)."""
    counts = tuple(family.eval_loop_counts(cfg))
    return counts if len(counts) > 1 else ()


@torch.no_grad()
def evaluate_text(model: Any, eval_data: Sequence[Tensor], *, chunk: int,
                  autocast: Callable[[], contextlib.AbstractContextManager[Any]], accuracy: bool,
                  counts: tuple[int, ...] = ()) -> TextEvaluation:
    """Every eval batch through `model` (in eval mode; the caller switches it), `chunk` sequences at a time."""
    k = model.stack
    device = eval_data[0].device if eval_data else torch.device("cpu")
    batch_losses, sizes = [], []  # [K] mean loss of each eval batch (float64), and its counted positions
    per_count: dict[int, list[Tensor]] = {c: [] for c in counts}
    correct = torch.zeros(k, dtype=torch.float64, device=device)
    for batch in eval_data:
        batch_sum = torch.zeros(k, dtype=torch.float64, device=device)
        count_sums = {c: torch.zeros(k, dtype=torch.float64, device=device) for c in counts}
        batch_count = 0
        for start in range(0, batch.shape[0], chunk):
            part = batch[start:start + chunk]
            inputs, targets = part[:, :-1], part[:, 1:]
            with autocast():
                if counts:
                    sums = model.eval_losses(inputs, targets, counts, reduction="sum")
                    loss_sum, n = sums[max(counts)], int((targets != -100).sum())
                    hits = eval_sums(model, inputs, targets, accuracy=True)[1] if accuracy else None
                    for c in counts:
                        count_sums[c] += sums[c]
                else:
                    loss_sum, hits, n = eval_sums(model, inputs, targets, accuracy=accuracy)
            batch_sum += loss_sum
            if hits is not None:
                correct += hits
            batch_count += n
        batch_losses.append(batch_sum / max(1, batch_count))
        for c in counts:
            per_count[c].append(count_sums[c] / max(1, batch_count))
        sizes.append(max(1, batch_count))
    per_batch = torch.stack(batch_losses).cpu().T.tolist()  # [K][batches]: one host read
    loops = {c: torch.stack(means).cpu().T.tolist() for c, means in per_count.items()}
    hit_rate = (correct / sum(sizes)).float().cpu().tolist() if accuracy else None
    return TextEvaluation(per_batch, sizes, hit_rate, loops)


class FinalTasks:
    """The tasks of `eval.tasks`, opened when the trial starts (a missing file or dataset fails it at once)."""

    def __init__(self, cfg: EvalConfig, data: DataConfig, model: ModelConfig, family: FamilySpec, *, rows: int) -> None:
        self.lambada: LambadaTask | None = None
        if not cfg.tasks:
            return
        if family.data_kind != "tokens":
            raise TrialInputError(f"eval.tasks: {', '.join(cfg.tasks)} score a language model; the {family.name} "
                                  "family classifies images")
        if "lambada" in cfg.tasks:
            self.lambada = open_lambada(cfg.lambada, data, seq_len=model.seq_len, vocab=model.vocab, rows=rows)

    def __bool__(self) -> bool:
        return self.lambada is not None

    @torch.no_grad()
    def lambada_perplexity(self, model: Any, autocast: Callable[[], contextlib.AbstractContextManager[Any]]) -> list[float]:
        """Each slot's LAMBADA perplexity (the model in eval mode)."""
        assert self.lambada is not None
        with autocast():
            return self.lambada.perplexity(model)
