"""Read an offline W&B run back from its transaction log (`run-<id>.wandb`), with wandb's own protobuf
definitions: the log is LevelDB's log format (32 KiB blocks, records split into full/first/middle/last
chunks, each with a 7-byte header: CRC, length, type) after a 7-byte file header (`:W&B`, magic, version).
wandb 0.31 ships no Python reader of this file (its reader is in the Go core)."""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    out, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if length == 0 and kind == 0:  # zero padding at the end of a block
            pos += left
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            pending = chunk
        elif kind == FIRST:
            pending = chunk
            continue
        elif kind == MIDDLE:
            pending += chunk
            continue
        else:
            pending += chunk
        record = pb.Record()
        record.ParseFromString(pending)
        out.append(record)
        pending = b""
    return out


@dataclass
class OfflineRun:
    run_id: str
    name: str = ""
    group: str = ""
    job_type: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def read_run(run_file: Path) -> OfflineRun:
    """Every record of one offline run's log, folded: config, history rows, summary."""
    run: OfflineRun | None = None
    for record in records(run_file):
        which = record.WhichOneof("record_type")
        if which == "run":
            r = record.run
            run = run or OfflineRun(r.run_id)
            run.name, run.group, run.job_type = r.display_name, r.run_group, r.job_type
            for item in r.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif which == "config" and run is not None:
            for item in record.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif which == "history" and run is not None:
            run.history.append({(item.key or ".".join(item.nested_key)): json.loads(item.value_json)
                                for item in record.history.item})
        elif which == "summary" and run is not None:
            for item in record.summary.update:
                run.summary[item.key or ".".join(item.nested_key)] = json.loads(item.value_json)
    assert run is not None, f"{run_file}: no run record"
    return run


def _read_when_written(run_file: Path, wait_s: float = 20.0) -> OfflineRun:
    """W&B's writer is its own service process: on a loaded machine the run record of a run that has
    just finished can reach the file a moment after `finish()` returned. Wait for it, then read."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return read_run(run_file)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_runs(wandb_dir: Path) -> dict[str, list[OfflineRun]]:
    """Run id -> its offline runs (one per process that logged to it), oldest first."""
    out: dict[str, list[OfflineRun]] = {}
    for path in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        run = _read_when_written(path)
        out.setdefault(run.run_id, []).append(run)
    return out
