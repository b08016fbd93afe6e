"""What one trial holds in memory, term by term: the model `stack: auto` plans with, and the record of
what `sweeper bench` measured.

No torch here: the planner (`sweeper.search.memory`) reads this on a driver that may have no GPU,
and the trial code takes its memory-shaping constants from here (the fused loss's chunk sizes,
the CUDA-graph pool's margin), so the model and the code cannot drift apart.

A trial of K members holds (bytes; `T` the tokens of one micro-step, `d` the width, `L` the layers
that keep activations, `V` the vocabulary, `N` a member's parameters, `N_mm` those in matmuls):

per member, all the time
    weights, gradients and the two Adam moments in fp32: 16 N; with Muon (`optimizer.kind: muon`) its
    `N_muon` matrices keep one momentum buffer instead of two moments: 16 N - 4 N_muon;
per member, during a forward/backward (transient)
    activations kept for the backward pass: 96 d T L in fp32 (24 values per token and layer:
    norm inputs, q/k/v, attention output, the MLP's gate/up/product, residuals), half in bf16;
    bf16 copies of the matmul weights that autocast keeps for the backward pass: 2 N_mm (bf16 only);
    the loss: unfused, logits + log-softmax + their gradient, 12 T V; fused (the LLaMA decoder), the
    head's working copies (a bf16 head, its fp32 gradient: 6 d V) and the hidden states' gradient (4 T d),
    plus on a CPU one chunk per member (2^23 logits, with logsumexp's temporary: 8 bytes each);
per trial, during a forward/backward
    the fused loss's chunk on a GPU: the K members' rows together, min(2^28, K T V) logits (the chunk's rows
    shrink as K grows), with logsumexp's fp32 temporary and a bf16 slice, 9 bytes per logit: at most 2.25 GiB;
per member, during the optimizer step (after the backward, so not beside the activations)
    the update's fp32 temporaries: 4 N;
evaluation
    in chunks of the micro-batch with no gradients: one layer's activations at a time plus the loss
    chunk, below a training micro-step; it counts only where it is larger (`eval_above_train`);
CUDA graphs
    the captured step's private pool holds the transient working set once, × `GRAPH_POOL_MARGIN`
    (the pool stays reserved, so evaluation's eager transient comes on top);
per process on a GPU
    the CUDA context (driver, cuBLAS/cuDNN workspaces, kernels): `CUDA_CONTEXT_BYTES`;
and a fragmentation margin of `FRAGMENTATION` on everything the allocator holds.

Measured peaks (`sweeper bench --device cuda`) are kept per GPU model and shape in `measured_path()`
(`measured_key`); the planner prefers them to the formula on the same GPU model only.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from models.family import get_family
from trials.data.cache import cache_root, digest

#: CPU: logits elements per chunk and member (rows x V): 2**23 fp32 = 32 MiB, ~260 rows at V = 32000. Measured
#: on 2 Zen 4 cores (V = 32000, 1024 rows): 128-256 rows per chunk were fastest for K = 1 (20% faster than the
#: unfused loss), 512-1024 for K = 4 (7% faster); fewer rows starve the matmuls, more leave the caches.
CPU_CHUNK_ELEMENTS_PER_MEMBER = 2**23
#: on a GPU a chunk only bounds memory: 2**28 fp32 = 1 GiB of logits at a time, all members together
CUDA_CHUNK_ELEMENTS = 2**28
#: the graph pool over one step's transient working set (2 MiB allocator blocks, fragmentation between buffers)
GRAPH_POOL_MARGIN = 1.1
#: a process's CUDA context beside its allocator (driver state, cuBLAS workspaces, loaded kernels): 0.5-1 GB
#: on recent GPUs; the larger end, since every trial sharing a GPU pays it
CUDA_CONTEXT_BYTES = 2**30
#: the caching allocator's rounding and the gaps between freed blocks, on everything it holds
FRAGMENTATION = 0.10
#: a measured peak is used with this much headroom (another run of the same shape differs by its data, its drops)
MEASURED_HEADROOM = 0.05
#: activation bytes per token, layer and unit of width in fp32 (24 values kept per token and layer)
ACTIVATION_BYTES_PER_WIDTH = 96
#: bytes per logit of the fused loss's GPU chunk: fp32 logits, logsumexp's fp32 temporary, a bf16 slice
CUDA_CHUNK_BYTES_PER_LOGIT = 9
#: bytes per logit of the fused loss's CPU chunk (per member): fp32 logits and logsumexp's temporary
CPU_CHUNK_BYTES_PER_LOGIT = 8


@dataclass(frozen=True)
class TrialShape:
    """What the memory of one trial depends on (a sweep cell's settings, or a benchmark's)."""

    family: str  # llama | looped | vit
    params: int  # one member's parameters
    params_matmul: int  # of them in matmuls (autocast keeps bf16 copies of these)
    width: int
    layers: int  # layers whose activations are kept (blocks; a looped model's loop count)
    vocab: int  # the LM's vocabulary, the ViT's classes
    seq_len: int
    micro_sequences: int  # sequences per forward/backward (the micro-batch, else the batch)
    bf16: bool
    cuda: bool
    fused_loss: bool  # the fused head + loss is on (it applies to the LLaMA decoder only)
    cuda_graphs: bool = False
    params_muon: int = 0  # of them updated by Muon (one momentum buffer each, not two moments); 0 with AdamW

    @property
    def fused(self) -> bool:
        return self.fused_loss and get_family(self.family).fused_loss

    @property
    def loss_rows(self) -> int:
        """Rows of the unfused loss's logits: one per token, or one per sequence for a classifier (the ViT)."""
        return self.micro_sequences if get_family(self.family).classifies_sequences else self.tokens

    @property
    def tokens(self) -> int:
        return self.seq_len * self.micro_sequences


@dataclass(frozen=True)
class Footprint:
    """The terms of one trial's memory (bytes); `total(k)` is the trial's peak with k members."""

    per_member: dict[str, int]  # held per member at the peak
    per_trial: dict[str, int]  # held once per trial at the peak
    context: int  # the CUDA context (0 on a CPU), outside the allocator's margin
    fragmentation: float
    chunk_per_member: int = 0  # the fused loss's GPU chunk: bytes per member ...
    chunk_cap: int = 0  # ... up to this, all members together
    chunk_copies: float = 1.0  # with CUDA graphs: the pool's copy (x margin) and evaluation's eager one

    def chunk(self, k: int) -> int:
        return int(min(self.chunk_cap, k * self.chunk_per_member) * self.chunk_copies)

    def held(self, k: int) -> int:
        """What the allocator holds at the peak with k members, before the fragmentation margin."""
        return sum(self.per_trial.values()) + k * sum(self.per_member.values()) + self.chunk(k)

    def total(self, k: int) -> int:
        return int(self.held(k) * (1 + self.fragmentation)) + self.context

    def fit(self, budget: float, limit: int = 4096) -> int:
        """Members that fit in `budget` bytes (0: not even one)."""
        k = 0
        while k < limit and self.total(k + 1) <= budget:
            k += 1
        return k

    def terms(self, k: int) -> dict[str, int]:
        """Every term at k members (bytes), for tables and the README."""
        out = {f"{name} (x{k})": k * value for name, value in self.per_member.items() if value}
        out.update({name: value for name, value in self.per_trial.items() if value})
        if self.chunk(k):
            out["loss_chunk"] = self.chunk(k)
        out["fragmentation"] = int(self.held(k) * self.fragmentation)
        if self.context:
            out["cuda_context"] = self.context
        return out


def footprint(shape: TrialShape) -> Footprint:
    """The model of the module docstring for one trial shape."""
    t, d, v = shape.tokens, shape.width, shape.vocab
    state = 16 * shape.params - 4 * shape.params_muon
    act_bytes = ACTIVATION_BYTES_PER_WIDTH // (2 if shape.bf16 else 1)
    activations = act_bytes * d * t * shape.layers
    autocast = 2 * shape.params_matmul if shape.bf16 else 0
    chunk_member = 0
    if shape.fused:
        loss = 6 * d * v + 4 * t * d
        if shape.cuda:
            chunk_member = CUDA_CHUNK_BYTES_PER_LOGIT * t * v  # until K of them reach the cap
        else:
            loss += CPU_CHUNK_BYTES_PER_LOGIT * v * min(t, max(1, CPU_CHUNK_ELEMENTS_PER_MEMBER // v))
    else:
        loss = 12 * shape.loss_rows * v
    train_member = activations + autocast + loss
    optimizer_member = 4 * shape.params
    # evaluation: the same chunk of sequences, no gradients: one layer's activations and the loss's forward
    if shape.fused:
        eval_loss = 0 if shape.cuda else CPU_CHUNK_BYTES_PER_LOGIT * v * min(t, max(1, CPU_CHUNK_ELEMENTS_PER_MEMBER // v))
    else:
        eval_loss = 8 * shape.loss_rows * v  # logits and log-softmax
    eval_member = act_bytes * d * t + autocast + eval_loss
    transient_member = max(train_member, optimizer_member)
    per_member = {"weights_grads_adam": state, "activations": activations, "autocast_copies": autocast, "loss": loss}
    if optimizer_member > train_member:
        per_member["optimizer_temporaries"] = optimizer_member - train_member
    per_trial: dict[str, int] = {}
    chunk_copies = 1.0
    eval_extra = max(0, eval_member - transient_member)
    if shape.cuda_graphs:
        # the pool keeps the step's working set reserved; evaluation runs eagerly beside it
        per_member["graph_pool"] = int(transient_member * (GRAPH_POOL_MARGIN - 1)) + eval_member
        chunk_copies = GRAPH_POOL_MARGIN + 1
    elif eval_extra:
        per_member["eval_above_train"] = eval_extra
    return Footprint(per_member=per_member, per_trial=per_trial, context=CUDA_CONTEXT_BYTES if shape.cuda else 0,
                     fragmentation=FRAGMENTATION, chunk_per_member=chunk_member,
                     chunk_cap=CUDA_CHUNK_BYTES_PER_LOGIT * CUDA_CHUNK_ELEMENTS, chunk_copies=chunk_copies)


# ---- measured peaks ----------------------------------------------------------------------------------


def shape_key(shape: TrialShape, scheme: str, compile: bool) -> str:
    """The digest of a shape: everything a trial's memory depends on except the stack size and the device."""
    fields = asdict(shape)
    if not fields["params_muon"]:  # AdamW: the key it had before Muon existed (peaks measured then still apply)
        del fields["params_muon"]
    return digest(sorted(fields.items()), scheme, compile)


def measured_key(device_model: str, shape: TrialShape, scheme: str, compile: bool) -> str:
    """The key of a shape's measured peaks on one GPU model: `"<model as CUDA names it>|<shape_key>"`,
    e.g. `"NVIDIA H200|3f9c..."`. A peak measured on an H200 is never an H100's; an entry of an
    older cache (its key the bare shape digest) names no device and matches none."""
    return f"{device_model.strip()}|{shape_key(shape, scheme, compile)}"


def measured_path() -> Path:
    """Where `sweeper bench --device cuda` keeps measured peaks ($LAYERROPE_SWEEPER_CACHE, else ~/.cache/...)."""
    return cache_root() / "memory-peaks.json"


def load_measured(path: Path | None = None) -> dict[str, Any]:
    """`measured_key` -> {"describe", "device", "device_total_bytes", "peaks": {str(k): bytes}}; {} when none."""
    path = path or measured_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_measured(key: str, k: int, peak_bytes: int, *, device: str, device_total_bytes: int, describe: str,
                    path: Path | None = None) -> None:
    """Add one measured peak (the process's whole footprint: allocator peak + CUDA context) for k members."""
    path = path or measured_path()
    data = load_measured(path)
    entry = data.setdefault(key, {"peaks": {}})
    entry.update(describe=describe, device=device, device_total_bytes=int(device_total_bytes))
    entry["peaks"][str(int(k))] = int(peak_bytes)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".memory-peaks-")
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=1, sort_keys=True)
    os.replace(tmp, path)


def measured_stack_bytes(entry: dict[str, Any], k: int, model: Footprint) -> int | None:
    """A trial of k members from measured peaks: two or more stack sizes give the per-member and per-trial
    parts (the line through the smallest and largest); one gives the formula scaled by measured/predicted.
    With `MEASURED_HEADROOM`. None when the entry holds no peak."""
    peaks = sorted((int(s), int(b)) for s, b in (entry.get("peaks") or {}).items())
    if not peaks:
        return None
    if len(peaks) >= 2:
        (k1, b1), (k2, b2) = peaks[0], peaks[-1]
        per_member = max(0.0, (b2 - b1) / (k2 - k1))
        estimate = b1 + (k - k1) * per_member
    else:
        k1, b1 = peaks[0]
        estimate = model.total(k) * b1 / max(1, model.total(k1))
    return int(estimate * (1 + MEASURED_HEADROOM))
