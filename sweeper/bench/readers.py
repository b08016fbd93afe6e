"""How long a researcher waits on a sweep directory: `sweeper status`, `optima` and `fit` as commands, and
the dashboard's first payload (`sweeper bench simcheck DIR --timings`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dashboards.data import Filters
from dashboards.live import Dashboard


def reader_timings(sweep_dir: str) -> dict[str, Any]:
    """Wall seconds of what a researcher runs against the directory: `sweeper status`, `optima` and `fit`
    as commands (interpreter start included), and the dashboard's first full payload (its server
    ingesting the store and building every figure, in this process: what the first page load waits for)."""
    out: dict[str, Any] = {}
    for name, args in (("status", ["status", sweep_dir, "--json"]), ("optima", ["optima", sweep_dir, "--format", "json"]),
                       ("fit", ["fit", sweep_dir, "--json", "--no-write"])):
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "sweeper.cli", *args], capture_output=True, text=True)
        out[f"{name}_seconds"] = time.perf_counter() - t
        out[f"{name}_rc"] = done.returncode
    t = time.perf_counter()
    dash = Dashboard(Path(sweep_dir), min_interval=0.0)
    body, _ = dash.update(0, dash.model.epoch, Filters())
    out["dashboard_first_payload_seconds"] = time.perf_counter() - t
    out["dashboard_first_payload_bytes"] = len(body)
    return out
