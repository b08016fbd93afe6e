"""Measured training throughput, kept per (shape, device, execution mode) for cost plans.

`sweeper bench` records every measurement here; `sweeper launch --dry-run` (and `--simulate`
when asked) converts FLOPs into device-hours with the measured rate of the cell's shape on its
device when one exists, and otherwise says which figure is an assumption and which `sweeper
bench` command would measure it.

The cache is one JSON file: `$LAYERROPE_SWEEPER_BENCH_CACHE`, else
`~/.cache/layerrope-sweeper/bench.json`. An entry's key is the shape (scheme, width, depth,
heads, sequence length, vocabulary, micro-batch, stack), the device (`cpu`, or the GPU's name)
and the execution mode (dtype, compile, CUDA graphs, fused loss, threads); the newest
measurement of a key replaces the older one. Standard library only.

This module is the cache's format and its reader (the cost plan reads it); `sweeper.bench.cache`
writes it (`sweeper bench` is the only writer).
"""

from __future__ import annotations

import json
import os
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
    device_name: str
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


def lookup(shape: Shape, mode: Mode, stack: int, measurements: list[Measurement]) -> Measurement | None:
    """The measurement of this shape in this mode (`mode.device`: cpu or cuda), the nearest stack; None if none."""
    found = [m for m in measurements if m.shape == shape and m.mode == mode]
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
