"""A sweep's cost plan: device-hours and an estimated wall time for its initial grids (`launch --dry-run`).

Per cell, the initial grid's points train in stacks (the YAML's `stack`, `auto` as the planner
sizes it) on the trial's resources. A trial's rate is the measured rate of its shape, device
and mode (`sweeper.search.bench_cache`, recorded by `sweeper bench`) when one exists, else an
assumption (`--throughput` FLOP/s per GPU, `--cpu-throughput` per CPU core), named as such
with the bench command that would measure it.

- GPU cells are costed in GPU-hours: FLOPs over the device's rate (a trial on a fraction f of a
  GPU is assumed to get f of the rate a trial alone measured: conservative for narrow models).
- CPU-only cells are costed in CPU-hours: the trial's wall time times its CPUs.
- Wall time, for the declared pool and concurrency: the larger of the pool-bound time (the
  device-time over the pool, or trial-time over `concurrency` when that is a number) and the
  chain-bound time (with `prior: extrapolate` a size starts once the smaller ones are done: the
  sum over sizes of each size's longest trial; with `fixed`, the longest trial). Extension and
  refinement rounds come after the initial grids and depend on the results: not counted.

Pure: no torch, no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeper.search.bench_cache import Measurement, Mode, Shape, bench_command, lookup
from sweeper.search.bracketing import initial_grid
from sweeper.search.memory import DeviceMemory, auto_stack
from sweeper.search.planner import Cell, Plan

DEFAULT_GPU_THROUGHPUT = 2e14  # FLOP/s per GPU: ~25% of an H100/H200's dense bf16 peak
DEFAULT_CPU_THROUGHPUT = 2e10  # FLOP/s per CPU core for these small models in fp32 (an assumption)


@dataclass
class CellCost:
    cell: Cell
    grid: list[float]
    stack: int
    trials: int
    trial_seconds: float  # one trial of the initial grid
    device_seconds: float  # GPU-seconds (GPU cells) or CPU-seconds (CPU cells) of the initial grid
    measured: Measurement | None
    command: str  # the bench command for this shape
    swept: str | None = None  # the rate was measured by this sweep's own trials (on which of its cells)

    @property
    def gpu(self) -> float:
        return float(self.cell.resources.get("GPU") or 0.0)


@dataclass
class CostPlan:
    cells: list[CellCost]
    unit: str  # "GPU" or "CPU" (a sweep of both is costed in each)
    pool: float  # GPUs, or CPUs for a CPU sweep
    concurrency: int | str
    gpu_throughput: float
    cpu_throughput: float
    notes: list[str] = field(default_factory=list)

    def hours(self, kind: str) -> float:
        cells = [c for c in self.cells if (c.gpu > 0) == (kind == "GPU")]
        return sum(c.device_seconds for c in cells) / 3600

    def wall_seconds(self) -> tuple[float, float, float]:
        """(estimate, pool-bound, chain-bound) seconds for the initial grids."""
        if self.unit == "GPU":
            work = sum(c.device_seconds for c in self.cells if c.gpu > 0)
        else:
            work = sum(c.trial_seconds * c.trials * float(c.cell.resources.get("CPU") or 1.0) for c in self.cells)
        pool_bound = work / max(1e-9, self.pool)
        if self.concurrency != "auto":
            pool_bound = max(pool_bound, sum(c.trial_seconds * c.trials for c in self.cells) / int(self.concurrency))
        chain = 0.0
        for method in {c.cell.method for c in self.cells}:
            mine = [c for c in self.cells if c.cell.method == method]
            if any(c.cell.prior == "extrapolate" for c in mine):
                by_size: dict[int, float] = {}
                for c in mine:
                    by_size[c.cell.size_rank] = max(by_size.get(c.cell.size_rank, 0.0), c.trial_seconds)
                chain = max(chain, sum(by_size.values()))
            else:
                chain = max(chain, max(c.trial_seconds for c in mine))
        return max(pool_bound, chain), pool_bound, chain

    def measured_cells(self) -> int:
        return sum(c.measured is not None or c.swept is not None for c in self.cells)

    def swept_cells(self) -> int:
        return sum(c.swept is not None for c in self.cells)

    def missing_commands(self) -> list[str]:
        return list(dict.fromkeys(c.command for c in self.cells if c.measured is None and c.swept is None))

    def to_dict(self) -> dict[str, Any]:
        wall, pool_bound, chain = self.wall_seconds()
        out: dict[str, Any] = {
            "unit": self.unit, "pool": self.pool, "concurrency": self.concurrency,
            "wall_hours_estimate": wall / 3600, "wall_hours_pool_bound": pool_bound / 3600,
            "wall_hours_chain_bound": chain / 3600, "measured_cells": self.measured_cells(),
            "assumed_cells": len(self.cells) - self.measured_cells(), "swept_cells": self.swept_cells(), "bench_commands": self.missing_commands(),
            "gpu_throughput_assumed": self.gpu_throughput, "cpu_throughput_assumed": self.cpu_throughput,
        }
        if any(c.gpu > 0 for c in self.cells):
            out["initial_gpu_hours"] = self.hours("GPU")
        if any(c.gpu == 0 for c in self.cells):
            out["initial_cpu_hours"] = self.hours("CPU")
        return out


def shape_of(cell: Cell) -> tuple[Shape, Mode]:
    device = "cuda" if cell.resources.get("GPU") else "cpu"
    dtype = cell.train.dtype if cell.train.dtype != "auto" else ("bf16" if device == "cuda" else "fp32")
    shape = Shape(scheme=cell.model.scheme, width=cell.width, depth=cell.depth, heads=cell.model.n_heads,
                  seq_len=cell.model.seq_len, vocab=cell.model.vocab, micro_batch=getattr(cell.train, "micro_batch", None))
    return shape, Mode(device=device, dtype=dtype, compile=bool(cell.train.compile))


def cost_plan(plan: Plan, measurements: list[Measurement], *, gpu_throughput: float = DEFAULT_GPU_THROUGHPUT,
              cpu_throughput: float = DEFAULT_CPU_THROUGHPUT, pool: float | None = None,
              host_memory: int | None = None, device: DeviceMemory | None = None,
              measured: Mapping[str, Any] | None = None, gpu_model: str | None = None,
              cpu_model: str | None = None,
              swept: Callable[[str, str], tuple[float, str] | None] | None = None) -> CostPlan:
    """The plan's cost; `gpu_model` / `cpu_model`: the device models the trials run on (measured rates of
    those models only: `sweeper.search.bench_cache.lookup`). `swept(method, size)`: the FLOP/s per trial
    that the sweep directory's own trials measured, and on which cells (`sweeper.records.throughput`); it
    comes before a bench figure or an assumption: the same machine, the same stacks, the same data path."""
    cfg = plan.config
    gpu_sweep = any(c.resources.get("GPU") for c in plan.cells)
    if pool is None:
        pool = float(cfg.ray.num_gpus or 8) if gpu_sweep else float(cfg.ray.num_cpus or 2)
    concurrency: int | str = cfg.concurrency if cfg.concurrency == "auto" else int(cfg.concurrency)
    slots = int(concurrency) if concurrency != "auto" else max(1, int(pool))
    costs = []
    for cell in plan.cells:
        grid = initial_grid(cell.policy)
        if cfg.stack == "auto":
            stack = auto_stack(cell, len(grid), cfg.max_stack, host_memory, slots, device=device, measured=measured)
        else:
            stack = max(1, min(int(cfg.stack), len(grid)))
        shape, mode = shape_of(cell)
        measured = lookup(shape, mode, stack, measurements, gpu_model if mode.device == "cuda" else cpu_model)
        gpu = float(cell.resources.get("GPU") or 0.0)
        cpus = float(cell.resources.get("CPU") or 1.0)
        if gpu > 0:
            device_rate = measured.model_flops_per_s if measured else gpu_throughput
            trial_rate = device_rate * min(1.0, gpu)
        else:
            trial_rate = measured.model_flops_per_s if measured else cpu_throughput * cpus
        own = swept(cell.method, cell.size) if swept is not None else None
        if own is not None:
            trial_rate = own[0]
        flops_point = cell.flops_per_token * cell.tokens_per_point
        trials = math.ceil(len(grid) / stack)
        trial_seconds = stack * flops_point / trial_rate
        held = min(1.0, gpu) if gpu > 0 else cpus
        device_seconds = len(grid) * flops_point / trial_rate * held
        costs.append(CellCost(cell, grid, stack, trials, trial_seconds, device_seconds, measured,
                              bench_command(shape, mode, stack), own[1] if own is not None else None))
    return CostPlan(costs, "GPU" if gpu_sweep else "CPU", pool, concurrency, gpu_throughput, cpu_throughput)
