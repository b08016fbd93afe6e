"""Recording `sweeper bench` measurements in the throughput cache that cost plans read
(`sweeper.search.bench_cache`: the format, the path and the reader)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sweeper.records.durable import write_json_atomic
from sweeper.search.bench_cache import Measurement, Mode, Shape, cache_path, cpu_model, load


def record(measurement: Measurement, path: Path | None = None) -> Path:
    path = path or cache_path()
    kept = [m for m in load(path) if (m.shape, m.mode, m.device_name, m.stack, m.threads) !=
            (measurement.shape, measurement.mode, measurement.device_name, measurement.stack, measurement.threads)]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"version": 1, "measurements": [m.to_dict() for m in [*kept, measurement]]})
    return path


def from_bench(result: dict[str, Any], command: str) -> Measurement:
    """The cache entry of one `sweeper bench` result (`sweeper.bench.trial.run_bench`)."""
    s = result["settings"]
    heads = s.get("heads") or max(1, int(s["width"]) // 32)
    machine = result.get("machine") or {}
    device = str(s["device"])
    name = str(machine.get("gpu") or (cpu_model() if device == "cpu" else device))
    return Measurement(
        shape=Shape(scheme=str(s["method"]), width=int(s["width"]), depth=int(s["depth"]), heads=int(heads),
                    seq_len=int(s["seq_len"]), vocab=int(s.get("vocab") or 256), micro_batch=s.get("micro_batch")),
        mode=Mode(device=device, dtype=str(s["dtype"]), compile=bool(s["compile"])), device_name=name,
        stack=int(s["stack"]), model_flops_per_s=float(result["runs"]["stack"]["model_flops_per_s"]),
        threads=machine.get("threads"), measured_at=time.time(), command=command,
    )
