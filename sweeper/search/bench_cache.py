"""Measured training throughput, kept per (shape, device, execution mode) for cost plans.

`sweeper bench` records every measurement here; `sweeper launch --dry-run` (and `--simulate`
when asked) converts FLOPs into device-hours with the measured rate of the cell's shape on its
device when one exists, and otherwise says which figure is an assumption and which `sweeper
bench` command would measure it.

The cache is one JSON file: `$LAYERROPE_SWEEPER_BENCH_CACHE`, else
`~/.cache/layerrope-sweeper/bench.json`. An entry's key is the shape (scheme, width, depth,
heads, sequence length, vocabulary, micro-batch, stack), the device model (`device_name`: the GPU
as CUDA names it, e.g. `NVIDIA H200`, or `cpu:<the CPU's model name>`) and the execution mode
(device kind, dtype, compile; threads); the newest measurement of a key replaces the older one.
A lookup names the model it plans for and takes that model's entries only: a rate measured on an
H200 never costs an H100's trials, and an entry of an older cache whose CPU entries say only
`cpu` matches no model (it is not reused; measure again). Standard library only.

This module is the cache's format and its reader (the cost plan reads it); `sweeper.bench.cache`
writes it (`sweeper bench` is the only writer).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ENV = "LAYERROPE_SWEEPER_BENCH_CACHE"


def cache_path() -> Path:
    return Path(os.environ.get(ENV) or Path.home() / ".cache" / "layerrope-sweeper" / "bench.json")


@dataclass(frozen=True)
class Shape:
    scheme: str
    width: int
    depth: int
    heads: int
    seq_len: int
    vocab: int
    micro_batch: int | None


@dataclass(frozen=True)
class Mode:
    device: str  # "cpu", or "cuda" in a lookup (any GPU) / the GPU's name in an entry
    dtype: str
    compile: bool


@dataclass
class Measurement:
    shape: Shape
    mode: Mode
    device_name: str  # the device model: the GPU's name, or `cpu_model()`
    stack: int
    model_flops_per_s: float  # summed over the stack's members (models.counting.flops_per_token per token)
    threads: int | None
    measured_at: float
    command: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Measurement:
        return cls(shape=Shape(**raw["shape"]), mode=Mode(**raw["mode"]), device_name=str(raw["device_name"]),
                   stack=int(raw["stack"]), model_flops_per_s=float(raw["model_flops_per_s"]),
                   threads=raw.get("threads"), measured_at=float(raw["measured_at"]), command=str(raw["command"]))


def load(path: Path | None = None) -> list[Measurement]:
    """Every cached measurement ([] when there is no cache or it does not read)."""
    path = path or cache_path()
    try:
        raw = json.loads(path.read_text())
        return [Measurement.from_dict(item) for item in raw.get("measurements", [])]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def cpu_model() -> str:
    """This machine's CPU as a device model: `cpu:<model name>` (Linux's /proc/cpuinfo, else the
    platform's processor string), or `cpu` when the model cannot be read."""
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                name = value.strip()
                break
    except OSError:
        pass
    name = name or platform.processor() or ""
    return f"cpu:{' '.join(name.split())}" if name.strip() else "cpu"


def lookup(shape: Shape, mode: Mode, stack: int, measurements: list[Measurement],
           model: str | None = None) -> Measurement | None:
    """The measurement of this shape in this mode (`mode.device`: cpu or cuda) on device `model` (a GPU's
    name, or `cpu_model()`), the nearest stack; None if none, and always when the model is unknown."""
    if not model or model == "cpu":
        return None
    found = [m for m in measurements if m.shape == shape and m.mode == mode and m.device_name.strip() == model.strip()]
    if not found:
        return None
    return min(found, key=lambda m: (abs(m.stack - stack), -m.measured_at))


def bench_command(shape: Shape, mode: Mode, stack: int) -> str:
    """The `sweeper bench` command that measures this shape in this mode."""
    parts = ["sweeper bench", f"--method {shape.scheme}", f"--width {shape.width}", f"--depth {shape.depth}",
             f"--heads {shape.heads}", f"--seq-len {shape.seq_len}", f"--vocab {shape.vocab}", f"--stack {stack}",
             f"--device {mode.device}", f"--dtype {mode.dtype}"]
    if shape.micro_batch:
        parts.append(f"--micro-batch {shape.micro_batch}")
    if mode.compile:
        parts.append("--compile")
    return " ".join(parts)
