"""`stack: auto`'s memory: how many learning rates one trial of a cell trains together, and which cells
cannot fit even one.

The terms of a trial's memory are `trials.footprint`'s (weights and Adam state, activations of one
micro-batch, autocast's bf16 copies, the fused loss's chunk, the CUDA-graph pool, evaluation, the
CUDA context, a fragmentation margin). Peaks measured by `sweeper bench --device cuda` for the same
shape on the same GPU model (`trials.footprint.measured_key`: the model as CUDA names it, e.g. "NVIDIA
H200"; the trials' model is `resources.gpu_model`, else the launching machine's GPU) replace the formula
where they exist; on an unknown model, or another one, the formula is used.

The budget of one trial is, in order: the trial's `resources.memory_gb`; on a GPU, the device's memory
× the trial's GPU fraction (every process sharing a GPU has its own CUDA context, counted in the
footprint); on a CPU, an even share of half the host's memory. The device's memory is
`resources.gpu_memory_gb`, else what `sweeper bench` measured on this machine, else what the launching
machine's GPU reports (`nvidia-smi`), else `DEFAULT_GPU_BYTES` (a driver without a GPU: say it in the YAML).

Pure: no torch, no Ray (the launching machine's GPU is asked by the caller).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.counting import count_params
from models.family import get_family
from sweeper.core.errors import UserError
from trials.footprint import Footprint, TrialShape, footprint, measured_key, measured_stack_bytes

GiB = 2**30
#: a driver that cannot see the trials' GPU and was told nothing: an 80 GB device (A100/H100), the smaller
#: of the common data-centre GPUs, so that a plan made here does not overfill them
DEFAULT_GPU_BYTES = 80 * GiB
#: a CPU trial's budget when the host's memory is unknown
DEFAULT_CPU_BYTES = 4 * GiB


@dataclass(frozen=True)
class DeviceMemory:
    """One GPU's memory, where the figure came from, and the GPU model (None: unknown) whose
    `sweeper bench` measurements apply."""

    total_bytes: int
    source: str
    model: str | None = None

    def describe(self) -> str:
        return f"{self.total_bytes / GiB:.1f} GiB per GPU ({self.source})"


def device_memory(gpu_memory_gb: float | None, measured: Mapping[str, Any] | None = None,
                  detected: tuple[int, str] | None = None, model: str | None = None) -> DeviceMemory:
    """The GPU's memory: the YAML's, else a `sweeper bench` measurement's of the trials' GPU model, else the
    local GPU's, else the default. The model: `model` (the YAML's `resources.gpu_model`), else the local
    GPU's name; a measurement of another model, or of none (an older cache), never sizes these trials."""
    model = (model or (detected[1] if detected is not None else None) or "").strip() or None
    if gpu_memory_gb:
        return DeviceMemory(int(gpu_memory_gb * GiB), "resources.gpu_memory_gb", model)
    totals = sorted({int(e["device_total_bytes"]) for e in (measured or {}).values()
                     if isinstance(e, Mapping) and e.get("device_total_bytes") and model is not None
                     and str(e.get("device", "")).strip() == model})
    if totals:
        return DeviceMemory(totals[0], f"measured by sweeper bench on {model}", model)
    if detected is not None and detected[1].strip() == (model or detected[1].strip()):
        return DeviceMemory(int(detected[0]), f"this machine's {detected[1]}", model)
    return DeviceMemory(DEFAULT_GPU_BYTES, "default: no GPU seen here; set resources.gpu_memory_gb", model)


def on_gpu(cell: Any) -> bool:
    return bool(cell.resources.get("GPU"))


def cell_shape(cell: Any, micro_batch: int | None = None) -> TrialShape:
    """The memory-relevant shape of one trial of `cell` (with another micro-batch, to find one that fits)."""
    micro = micro_batch if micro_batch is not None else getattr(cell.train, "micro_batch", None)
    gpu = on_gpu(cell)
    counts = count_params(cell.model)
    muon = cell.train.optimizer.kind == "muon"  # Muon's matrices hold one momentum buffer, not two moments
    return TrialShape(
        family=cell.family, params=cell.params, params_matmul=counts["matmul"], width=cell.width,
        params_muon=counts["hidden"] if muon else 0,
        layers=activation_layers(cell),
        vocab=cell.model.vocab, seq_len=cell.model.seq_len,
        micro_sequences=min(cell.train.batch_size, micro or cell.train.batch_size),
        bf16=cell.train.dtype == "bf16" or (cell.train.dtype == "auto" and gpu),
        cuda=gpu and cell.train.device != "cpu", fused_loss=bool(getattr(cell.train, "fused_loss", True)),
        cuda_graphs=bool(getattr(cell.train, "cuda_graphs", False)) and gpu,
    )


def activation_layers(cell: Any) -> int:
    """Layers whose activations a training step keeps: the blocks; a looped model's prelude and coda once and
    its core once per iteration that gradients flow through (the family entry's `activation_layers`)."""
    return get_family(cell.family).activation_layers(cell.model)


@dataclass(frozen=True)
class Estimate:
    """A trial of `cell` under the memory model: its terms, its budget, and a measurement when there is one."""

    model: Footprint
    budget: float
    budget_source: str
    measured: Mapping[str, Any] | None  # the `sweeper bench` record of this shape

    def bytes(self, k: int) -> int:
        if self.measured is not None:
            value = measured_stack_bytes(dict(self.measured), k, self.model)
            if value is not None:
                return value
        return self.model.total(k)

    def fit(self) -> int:
        """Members that fit in the budget (0: not even one)."""
        k = 0
        while self.bytes(k + 1) <= self.budget and k < 4096:
            k += 1
        return k

    @property
    def source(self) -> str:
        return "measured" if self.measured is not None else "model"


def budget_of(cell: Any, device: DeviceMemory | None, host_memory_bytes: int | None,
              concurrency: int) -> tuple[float, str]:
    if cell.memory_gb:
        return cell.memory_gb * GiB, f"resources.memory_gb {cell.memory_gb:g}"
    if on_gpu(cell):
        device = device or device_memory(None)
        fraction = min(1.0, cell.resources["GPU"])
        return device.total_bytes * fraction, f"{fraction:g} x {device.describe()}"
    if host_memory_bytes:
        share = max(1, concurrency)
        return 0.5 * host_memory_bytes / share, f"half the host's {host_memory_bytes / GiB:.1f} GiB / {share} trials"
    return float(DEFAULT_CPU_BYTES), "default 4 GiB (host memory unknown)"


def estimate(cell: Any, *, device: DeviceMemory | None = None, host_memory_bytes: int | None = None,
             concurrency: int = 1, measured: Mapping[str, Any] | None = None,
             micro_batch: int | None = None) -> Estimate:
    shape = cell_shape(cell, micro_batch)
    budget, source = budget_of(cell, device, host_memory_bytes, concurrency)
    entry = None
    model = device.model if device is not None else None
    if measured and shape.cuda and model:
        entry = measured.get(measured_key(model, shape, cell.model.scheme, bool(cell.train.compile)))
    return Estimate(footprint(shape), budget, source, entry if isinstance(entry, Mapping) else None)


def auto_stack(cell: Any, queued: int, max_stack: int, host_memory_bytes: int | None, concurrency: int, *,
               device: DeviceMemory | None = None, measured: Mapping[str, Any] | None = None) -> int:
    """How many learning rates one trial of `cell` trains together when `stack: auto`: as many as fit the
    budget, at most `max_stack` and the queued points, at least 1 (a cell that cannot fit one member is
    refused before the sweep starts: `check_fits`)."""
    fit = estimate(cell, device=device, host_memory_bytes=host_memory_bytes, concurrency=concurrency,
                   measured=measured).fit()
    return max(1, min(queued, max_stack, fit))


def fitting_micro_batch(cell: Any, **kwargs: Any) -> int | None:
    """The largest micro-batch (a divisor of the batch, so every micro-step is equal) at which one member
    fits; None when even one sequence does not."""
    batch = cell.train.batch_size
    for micro in sorted((m for m in range(1, batch + 1) if batch % m == 0), reverse=True):
        if estimate(cell, micro_batch=micro, **kwargs).fit() >= 1:
            return micro
    return None


def check_fits(cells: list[Any], *, device: DeviceMemory | None = None, host_memory_bytes: int | None = None,
               measured: Mapping[str, Any] | None = None) -> None:
    """`stack: auto` refuses a sweep where one member of a cell cannot fit its budget (the most generous one:
    a CPU trial alone on its host), naming the micro-batch that would fit."""
    problems: dict[tuple[str, str], list[str]] = {}  # (size, what is wrong) -> methods
    seen: set[tuple[str, str]] = set()
    for cell in cells:
        if (cell.method, cell.size) in seen:
            continue
        seen.add((cell.method, cell.size))
        est = estimate(cell, device=device, host_memory_bytes=host_memory_bytes, measured=measured)
        if est.fit() >= 1:
            continue
        what = (f"one member needs {est.bytes(1) / GiB:.1f} GiB ({est.source}) but a trial has "
                f"{est.budget / GiB:.1f} GiB ({est.budget_source})")
        if not get_family(cell.family).micro_batch:
            what += "; lower train.batch_size or give the trial more memory (resources.gpu)"
        elif (micro := fitting_micro_batch(cell, device=device, host_memory_bytes=host_memory_bytes,
                                           measured=measured)) is not None:
            current = getattr(cell.train, "micro_batch", None)
            what += (f"; train.micro_batch: {micro} would fit"
                     f"{f' (now {current})' if current else ' (now unset: the whole batch at once)'}")
        else:
            what += ("; not even micro_batch 1 fits: give the trial more memory (resources.gpu, resources.memory_gb) "
                     "or a smaller model")
        problems.setdefault((cell.size, what), []).append(cell.method)
    lines = [f"{size} ({', '.join(methods)}): {what}" for (size, what), methods in problems.items()]
    if lines:
        raise UserError("stack: auto: a cell cannot fit one member in its trial's memory:\n  " + "\n  ".join(lines))


def describe(cell: Any, max_stack: int, **kwargs: Any) -> dict[str, Any]:
    """For `launch --dry-run`: one member's bytes, the budget, and the stack `stack: auto` would pick."""
    est = estimate(cell, **kwargs)
    k = max(1, min(max_stack, est.fit()))
    return {"member_bytes": est.bytes(1), "stack": k, "stack_bytes": est.bytes(k), "budget_bytes": est.budget,
            "budget": est.budget_source, "source": est.source, "terms": est.model.terms(k)}

