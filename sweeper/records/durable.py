"""Every durable file write of the sweeper: whole-or-nothing, fsynced, renamed into place.

The manifest, the YAML copies, the store's Parquet chunks and its cells snapshot, fits.json:
each is written to a temporary name beside its target, fsynced, then renamed over it, so a
reader (or a relaunch after a kill) sees the old file or the whole new one, never a torn one,
and a failed write (a full disk) leaves no debris. With the ledger's commits (one per call of
`sweeper.records.ledger.Ledger`), these functions are all the writes a sweep makes; each
passes through `sweeper.records.crash_points.durable_write`, the seam that counts them and can
kill the driver at one (crash-consistency tests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from sweeper.records.crash_points import durable_write


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see either the old file or the whole new one."""
    if isinstance(data, BaseModel):  # `default=str` would write its repr as a string
        raise TypeError(f"{path.name}: a typed document is written by its own writer (write_manifest, write_fits)")
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False, default=str))


def write_kind(path: Path) -> str:
    """A durable file's kind for the crash-point log: its folder and name (a numbered store chunk: `chunk`)."""
    name = "chunk" if path.stem.isdigit() else path.name
    return f"file:{path.parent.name}/{name}"


def write_text_atomic(path: Path, text: str) -> None:
    with durable_write(write_kind(path)):
        _write_text(path, text)


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk: the old file stays whole, no debris
        raise


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write a chunk that readers can verify: every data page carries a CRC32 (checked on read),
    no copy of the Arrow schema in the footer (a flipped bit there silently changed column types)."""
    with durable_write(write_kind(path)):
        _write_parquet(table, path)


def _write_parquet(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd", write_statistics=False, write_page_checksum=True,
                       store_schema=False)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write (a full disk) leaves no debris behind
        raise
