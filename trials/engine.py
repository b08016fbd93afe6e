"""How a trial's training step executes: eager, compiled, with deferred host syncs, in a CUDA graph.

The trainer (`trials.train.Trial`) decides *what* a step computes; this module decides how fast.
Every option computes the same training (the compiled paths agree with the eager one to float
rounding, tested), and each is a `train` setting:

- `compile: true` — *regional* compilation (`trials.compiled.compile_regions`): the blocks run
  one compiled forward private to their model. All blocks run the same code and keep their
  per-layer constants in tensors, so Dynamo traces one block and every layer reuses the graph:
  compile time does not grow with depth. The optimizer becomes `FlatStackedAdamW` with its update
  compiled (one graph over 8-12 parameter groups, also depth-independent) and LRs, schedule factor
  and bias corrections held in tensors, so a moving LR schedule never recompiles. With Muon
  (`optimizer.kind: muon`) it is `trials.flat_muon.FlatStackedMuon`, compiled the same way: one graph
  holding the AdamW groups and each matrix group's batched Newton-Schulz. Each compiled
  function has its own cache and recompile limit (`trials.compiled`): a new stack size, depth or
  scheme in a reused Ray actor never meets a limit.
- `fused_loss: true` (default) — the LM head and the cross-entropy in row chunks with gradients
  computed on the way (`trials.fused_loss`); LLaMA decoder only.
- `sync_every: N` — the divergence check reads the K training losses back to the host every N
  steps instead of every step (default: 1 on CPU, where a read is free; 16 on CUDA, where each
  read stalls the launch queue). Between reads the losses stay on the device, and the rules that
  fire at once (non-finite loss, loss > explode_factor x initial loss) are applied on the device
  in the same step, so such a member stops updating exactly when the per-step check would have
  stopped it. The smoothed-loss rules (above-init, spike) are evaluated on the host over every
  step's loss at the next read, with the same verdicts and steps; only a member diverging by
  those rules trains up to N-1 more steps before it is masked (its own exported weights are
  then later ones; no other member is affected: members share no arithmetic).
- `micro_batch: M` — forward and backward M sequences at a time, gradients accumulated over the
  batch, then one optimizer step: the activations of a deep model (≈12 KB per token and layer in
  fp32) are those of M sequences, so a batch or a stack that would not fit in memory does.
- `cuda_graphs: true` (CUDA only) — the whole step (zeroing gradients, forward, loss, backward,
  clipping, AdamW) is captured once in one CUDA graph after two warm-up steps and replayed: one
  launch per step instead of ~150 per layer. Needs the deferred sync (a per-step read would be
  the only thing left on the host) and static shapes; it is re-captured after the stack shrinks.
  The capture runs with the data prefetcher paused and in thread-local capture mode, so the
  prefetch thread's pinned-memory allocations cannot invalidate it (`DeviceStep._capture`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trials.config import TrainConfig
from trials.errors import TrialInputError
from trials.flat_muon import FlatStackedMuon
from trials.flat_optim import FlatStackedAdamW
from trials.footprint import GRAPH_POOL_MARGIN
from trials.muon import MuonRule, StackedMuon
from trials.optim import StackedAdamW

CUDA_SYNC_EVERY = 16
GRAPH_WARMUP_STEPS = 2
#: `torch.cuda.graph`'s capture mode: CUDA calls made by other threads of the trial (the data prefetcher's
#: pinned-memory allocations) do not invalidate the capture; only this thread's unsafe calls error
GRAPH_CAPTURE_MODE = "thread_local"


@dataclass(frozen=True)
class Execution:
    """The resolved execution settings of one trial."""

    compile: bool
    fused_loss: bool
    sync_every: int
    cuda_graphs: bool
    micro_batch: int | None = None

    @property
    def flat_optimizer(self) -> bool:
        return self.compile or self.deferred

    @property
    def deferred(self) -> bool:
        """Steps run without reading anything back (losses collected on the device)."""
        return self.sync_every > 1 or self.cuda_graphs

    def describe(self) -> str:
        parts = ["compiled" if self.compile else "eager"]
        if self.fused_loss:
            parts.append("fused loss")
        if self.micro_batch:
            parts.append(f"micro-batches of {self.micro_batch}")
        if self.cuda_graphs:
            parts.append("CUDA graph")
        parts.append(f"sync every {self.sync_every}")
        return ", ".join(parts)


def resolve_execution(train: TrainConfig, device: torch.device) -> Execution:
    sync_every = getattr(train, "sync_every", None)
    graphs = bool(getattr(train, "cuda_graphs", False))
    if graphs and device.type != "cuda":
        raise TrialInputError(f"train.cuda_graphs: needs a CUDA device (the trial runs on {device.type}); set it to false")
    if sync_every is None:
        sync_every = CUDA_SYNC_EVERY if device.type == "cuda" else 1
    return Execution(compile=bool(train.compile), fused_loss=bool(getattr(train, "fused_loss", True)),
                     sync_every=int(sync_every), cuda_graphs=graphs, micro_batch=getattr(train, "micro_batch", None))


@functools.cache
def warmup_stream(device: torch.device) -> Any:
    """The one side stream of this process (per device) on which CUDA-graph warm-up steps run: created
    once, not per step (each new stream is a driver object and its own allocator pool)."""
    return torch.cuda.Stream(device=device)


def graph_pool_bytes(step_working_set_bytes: int) -> int:
    """Estimate of a captured step's private memory pool: one step's transient working set (activations
    of one micro-batch, the fused loss's chunk, the optimizer's temporaries; not the persistent weights,
    gradients and moments, which live outside the pool), rounded up by `GRAPH_POOL_MARGIN` for the
    allocator's block granularity. It is counted once: the eager warm-up's cached blocks are released
    before the capture (`DeviceStep._capture`), and evaluation's transient memory is released after it."""
    return int(math.ceil(step_working_set_bytes * GRAPH_POOL_MARGIN))


def release_cached_memory(device: torch.device) -> None:
    """CUDA: hand the allocator's cached, unused blocks back to the device (after an evaluation, before a
    graph capture), so that the peak of a rare phase does not stay reserved and starve the other trials
    sharing the GPU. Nothing to do on a CPU."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def make_optimizer(model: Any, lrs: list[float] | Tensor, train: TrainConfig, execution: Execution,
                   steps: int | None = None) -> Any:
    """The trial's stacked optimizer: AdamW, or Muon + AdamW (`optimizer.kind: muon`; `steps`, the trial's step
    count, paces Muon's linear weight-decay schedule); flat buffers on the compiled and deferred paths."""
    opt = train.optimizer
    if opt.kind == "muon":
        if steps is None:
            raise ValueError("make_optimizer: Muon needs the trial's step count (its weight decay's schedule)")
        rule = MuonRule.from_config(opt.muon, steps)
        if execution.flat_optimizer:
            return FlatStackedMuon(model.param_specs(), lrs, rule=rule, betas=opt.betas, eps=opt.eps,
                                   weight_decay=opt.weight_decay, grad_clip=opt.grad_clip, compile=execution.compile)
        return StackedMuon(model.param_specs(), lrs, rule=rule, betas=opt.betas, eps=opt.eps,
                           weight_decay=opt.weight_decay, grad_clip=opt.grad_clip)
    if execution.flat_optimizer:
        return FlatStackedAdamW(model.param_specs(), lrs, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                                grad_clip=opt.grad_clip, compile=execution.compile)
    return StackedAdamW(model.param_specs(), lrs, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                        grad_clip=opt.grad_clip)


def accumulate(
    loss_fn: Callable[..., Tensor], inputs: Tensor, targets: Tensor, extra: dict[str, Any], micro_batch: int,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> Tensor:
    """Forward and backward in micro-batches of `micro_batch` sequences, gradients accumulated; returns the
    batch's `[K]` losses (detached). Each micro-batch's mean loss is weighted by its share of the batch, so
    the gradient is the whole batch's (training targets have no ignored positions); per-sequence extras
    (the looped LM's loop counts) are sliced with the batch."""
    batch = inputs.shape[0]
    total: Tensor | None = None
    for start in range(0, batch, micro_batch):
        stop = min(batch, start + micro_batch)
        part = {k: v[start:stop] if isinstance(v, Tensor) and v.ndim and v.shape[0] == batch else v for k, v in extra.items()}
        with autocast():
            losses = loss_fn(inputs[start:stop], targets[start:stop], **part)
        weighted = losses * ((stop - start) / batch)
        weighted.sum().backward()
        total = weighted.detach() if total is None else total + weighted.detach()
    assert total is not None
    return total


class DeviceStep:
    """One training step that reads nothing back to the host (deferred-sync and CUDA-graph modes).

    Call `run(inputs, targets, extra, lr_scale)`; it returns the step's `[K]` training losses as a
    device tensor (fp32, detached). Instant divergence rules are applied on the device: the
    optimizer's `active` mask turns off a member whose loss is not finite or exceeds
    `explode_factor` x its first loss (compared in float64, as the host monitor does).
    """

    def __init__(
        self,
        loss_fn: Callable[..., Tensor],
        optimizer: FlatStackedAdamW | FlatStackedMuon,
        autocast_dtype: torch.dtype | None,
        explode_factor: float | None,
        *,
        graphs: bool = False,
        micro_batch: int | None = None,
    ) -> None:
        self.loss_fn, self.opt, self.autocast_dtype = loss_fn, optimizer, autocast_dtype
        self.micro_batch = micro_batch
        self.explode_factor = explode_factor
        self.graphs = graphs
        device = optimizer.lrs.device
        self.init_losses = torch.full((optimizer.k,), math.nan, dtype=torch.float64, device=device)
        self._graph: Any = None
        self._eager_steps = 0
        self._static: dict[str, Tensor] = {}
        # Keeps the trial's other threads off CUDA during a capture: the data prefetcher's `paused`
        # (set by the trainer once its batch stream exists).
        self.quiet: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext

    def reset(self, optimizer: FlatStackedAdamW | FlatStackedMuon, init_losses: list[float | None]) -> None:
        """After the stack changed (members dropped, a checkpoint restored): new buffers, new graph."""
        self.opt = optimizer
        values = [math.nan if v is None else float(v) for v in init_losses]
        self.init_losses = torch.tensor(values, dtype=torch.float64, device=optimizer.lrs.device)
        if self._graph is not None:
            self._graph.reset()  # its private pool goes back to the allocator (the smaller stack captures anew)
        self._graph = None
        self._eager_steps = 0
        self._static = {}

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        # No cast cache: a graph replay must cast the weights as they are now, not as at capture.
        return torch.autocast(self.opt.lrs.device.type, dtype=self.autocast_dtype, cache_enabled=False)

    def _body(self, inputs: Tensor, targets: Tensor, extra: dict[str, Any]) -> Tensor:
        """Zero gradients, forward, instant divergence rules, backward, update. Graph-capturable."""
        self.opt.zero_grad()
        if self.micro_batch is None:
            with self._autocast():
                losses = self.loss_fn(inputs, targets, **extra)
            losses.sum().backward()
            losses = losses.detach()
        else:
            losses = accumulate(self.loss_fn, inputs, targets, extra, self.micro_batch, self._autocast)
        seen = losses.to(torch.float64)
        first = torch.isnan(self.init_losses) & torch.isfinite(seen)
        self.init_losses.copy_(torch.where(first, seen, self.init_losses))
        ok = torch.isfinite(seen)
        if self.explode_factor is not None:
            ok = ok & ~(seen > self.explode_factor * self.init_losses)
        self.opt.active.copy_(self.opt.active & ok)  # masks this step's update: gradients are discarded there
        self.opt.step_tensors()
        return losses.float()

    def run(self, inputs: Tensor, targets: Tensor, extra: dict[str, Any], lr_scale: float) -> Tensor:
        self.opt.set_scalars(lr_scale)
        if not self.graphs or extra:
            return self._body(inputs, targets, extra).clone()
        if self._graph is None and self._eager_steps < GRAPH_WARMUP_STEPS:
            # Warm-up on a side stream (CUDA graph rule): kernels chosen, compile caches filled.
            stream = warmup_stream(self.opt.lrs.device)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                losses = self._body(inputs, targets, extra).clone()
            torch.cuda.current_stream().wait_stream(stream)
            self._eager_steps += 1
            return losses
        if self._graph is None:
            self._capture(inputs, targets)
        self._static["inputs"].copy_(inputs, non_blocking=True)
        self._static["targets"].copy_(targets, non_blocking=True)
        self._graph.replay()
        return self._static["losses"].clone()

    def _capture(self, inputs: Tensor, targets: Tensor) -> None:
        """Capture one step. Another thread's CUDA call during a capture (the prefetch thread pinning a
        batch: `cudaHostAlloc`, the host allocator's event queries) invalidates a capture in CUDA's
        default global mode. So the prefetcher is paused for the capture (`quiet`), and the capture is
        thread-local (`GRAPH_CAPTURE_MODE`): an unsafe call errors only when this thread makes it."""
        with self.quiet():
            static_inputs, static_targets = inputs.clone(), targets.clone()
            graph = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            # The capture allocates the step's working set again, in the graph's private pool; the blocks the
            # eager warm-up left cached would otherwise stay reserved beside it (twice the working set).
            release_cached_memory(static_inputs.device)
            with torch.cuda.graph(graph, capture_error_mode=GRAPH_CAPTURE_MODE):
                static_losses = self._body(static_inputs, static_targets, {})
        self._static = {"inputs": static_inputs, "targets": static_targets, "losses": static_losses}
        self._graph = graph
