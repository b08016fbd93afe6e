"""The LM head and cross-entropy in one pass over row chunks, with the gradients computed on the way.

`LlamaLM.member_losses` computes logits `[K, N, V]`, then log-softmax, then the loss; backward
makes a zero-filled `[K, N, V]` gradient, scatters into it, runs the log-softmax backward and two
matmuls. With a 32000-word vocabulary that is several passes over 131 MB per member for a
1024-token batch, about a third of a CPU training step. Here, for each chunk of rows:

    logits = h_c @ head                              (the only full-width matmul of the forward)
    loss_c = logsumexp(logits) - logits[target]
    dlogits = (softmax(logits) - onehot(target)) / n_counted   (in place over the logits)
    grad_h[c] = dlogits @ head^T ;  grad_head += h_c^T @ dlogits

so the logits of a chunk are read while still in cache and never stored for the backward pass.
It is the same mathematics as `member_losses` (mean next-token cross-entropy per member, targets
equal to `ignore_index` not counted; train on `.sum()`), with a different float rounding order:
the two agree to ~1e-6 (tested), not bit for bit. Under CUDA autocast the matmuls run in the
autocast dtype and everything from the logits on in fp32, as `member_losses` does.

`member_losses(model, inputs, targets)` uses it for the LLaMA decoder and falls back to the
model's own `member_losses` for other families.

`eval_sums(model, inputs, targets)` is the evaluation's no-grad path: the same row chunks, no
gradient buffers, and sums (not means) of the loss and of correct top-1 predictions per member, so
that an evaluation split into micro-batches adds up exactly. Its memory is one chunk of logits
plus the no-grad forward of the micro-batch: below a training micro-step's, never `[K, B*T, V]`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from models.family import family_of

# the chunk sizes (with their reasons) live beside the memory model that counts them
from trials.footprint import CPU_CHUNK_ELEMENTS_PER_MEMBER, CUDA_CHUNK_ELEMENTS


def _compute_dtype(h: Tensor) -> torch.dtype:
    device = h.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return h.dtype


class LinearCrossEntropy(torch.autograd.Function):
    """losses[k] = mean over counted rows of CE(h[k] @ head[k], targets); h `[K, N, d]`, head `[K, d, V]`."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, head: Tensor, targets: Tensor, ignore_index: int, chunk_rows: int) -> Tensor:  # type: ignore[override]
        k, n, _ = h.shape
        dtype = _compute_dtype(h)
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        with torch.autocast(h.device.type, enabled=False):
            w = head.to(dtype)
            valid = targets != ignore_index
            safe = torch.where(valid, targets, torch.zeros_like(targets))
            counted = valid.sum().clamp_min(1).to(torch.float32)
            losses = torch.zeros(k, dtype=torch.float32, device=h.device)
            grad_h = torch.empty_like(h) if needs_grad else None
            grad_head = torch.zeros(head.shape, dtype=torch.float32, device=h.device) if needs_grad else None
            for start in range(0, n, chunk_rows):
                stop = min(n, start + chunk_rows)
                h_c = h[:, start:stop].to(dtype)
                logits = torch.bmm(h_c, w).float()  # [K, c, V]
                index = safe[start:stop].view(1, -1, 1).expand(k, -1, 1)
                lse = torch.logsumexp(logits, dim=-1)  # [K, c]
                picked = logits.gather(-1, index).squeeze(-1)
                keep = valid[start:stop].to(torch.float32)
                losses += ((lse - picked) * keep).sum(dim=1)
                if not needs_grad:
                    continue
                probs = logits.sub_(lse.unsqueeze(-1)).exp_()  # softmax, in place over the logits
                probs.scatter_add_(-1, index, torch.full_like(picked, -1.0).unsqueeze(-1))
                probs.mul_((keep / counted).view(1, -1, 1))
                d = probs.to(dtype)
                grad_h[:, start:stop] = torch.bmm(d, w.transpose(1, 2)).to(h.dtype)  # type: ignore[index]
                part = torch.bmm(h_c.transpose(1, 2), d)
                grad_head.add_(part)  # type: ignore[union-attr]
            losses = losses / counted
        if needs_grad:
            ctx.save_for_backward(grad_h, grad_head.to(head.dtype))  # type: ignore[union-attr]
        return losses

    @staticmethod
    def backward(ctx: Any, grad_losses: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        grad_h, grad_head = ctx.saved_tensors
        scale = grad_losses.to(torch.float32).view(-1, 1, 1)
        return (grad_h * scale.to(grad_h.dtype)), (grad_head * scale.to(grad_head.dtype)), None, None, None


def chunk_rows(k: int, vocab: int, device: torch.device) -> int:
    if device.type == "cuda":
        return max(1, CUDA_CHUNK_ELEMENTS // max(1, k * vocab))
    return max(1, CPU_CHUNK_ELEMENTS_PER_MEMBER // max(1, vocab))


def fused_applies(model: torch.nn.Module) -> bool:
    """The fused head + loss knows the LLaMA decoder (`final_hidden` then a `[K, d, V]` head): the family
    entry's `fused_loss` capability, which the memory model (`trials.footprint`) reads too."""
    return family_of(model.cfg).fused_loss  # type: ignore[arg-type]


def member_losses(model: Any, inputs: Tensor, targets: Tensor, ignore_index: int = -100, **extra: Any) -> Tensor:
    """Mean next-token cross-entropy per member `[K]` (fp32), fused for the LLaMA decoder."""
    if extra or not fused_applies(model):
        return model.member_losses(inputs, targets, **extra)
    h = model.final_hidden(inputs)
    k = h.shape[0]
    rows = chunk_rows(k, model.cfg.vocab, h.device)
    return LinearCrossEntropy.apply(h, model.head, targets.reshape(-1), ignore_index, rows)


@torch.no_grad()
def eval_sums(model: Any, inputs: Tensor, targets: Tensor, *, accuracy: bool = False,
              ignore_index: int = -100) -> tuple[Tensor, Tensor | None, int]:
    """Per member `[K]`: the sum over counted target positions of the cross-entropy (float64), the number
    of correct top-1 predictions there (float64, or None without `accuracy`), and the number of counted
    positions. LLaMA decoder: the head and the loss in row chunks (logits of one chunk at a time); other
    families: the model's own loss and logits (for the inputs given, which the caller keeps small)."""
    flat_targets = targets.reshape(-1)
    valid = flat_targets != ignore_index
    counted = int(valid.sum())
    if not fused_applies(model):
        losses = model.member_losses(inputs, targets, ignore_index)  # means over the counted positions
        correct = None
        if accuracy:
            predicted = model(inputs).argmax(dim=-1).reshape(losses.shape[0], -1)  # [K, B*T]
            correct = ((predicted == flat_targets) & valid).sum(dim=1).double()
        return losses.double() * counted, correct, counted
    h = model.final_hidden(inputs)
    k = h.shape[0]
    dtype = _compute_dtype(h)
    rows = chunk_rows(k, model.cfg.vocab, h.device)
    safe = torch.where(valid, flat_targets, torch.zeros_like(flat_targets))
    loss_sum = torch.zeros(k, dtype=torch.float64, device=h.device)
    correct_sum = torch.zeros(k, dtype=torch.float64, device=h.device) if accuracy else None
    with torch.autocast(h.device.type, enabled=False):
        w = model.head.to(dtype)
        for start in range(0, h.shape[1], rows):
            stop = min(h.shape[1], start + rows)
            logits = torch.bmm(h[:, start:stop].to(dtype), w).float()  # [K, c, V]: the only chunk held
            index = safe[start:stop].view(1, -1, 1).expand(k, -1, 1)
            keep = valid[start:stop]
            per_row = torch.logsumexp(logits, dim=-1) - logits.gather(-1, index).squeeze(-1)
            loss_sum += (per_row * keep).sum(dim=1).double()
            if correct_sum is not None:
                hit = (logits.argmax(dim=-1) == safe[start:stop]) & keep
                correct_sum += hit.sum(dim=1).double()
    return loss_sum, correct_sum, counted
