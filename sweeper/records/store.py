"""The results store of a sweep directory: append-only Parquet chunks that polars reads
while the sweep runs.

Layout of a sweep directory (everything the tool keeps about one sweep)::

    DIR/
      manifest.json        store version, sweep name, compatibility key, corpus fingerprint
      sweep.yaml           the YAML as launched (the first launch; extensions are appended as sweep.N.yaml)
      ledger.db            the Optuna ledger of record (one study per cell, one trial per LR point)
      store/points/        point events: one row per state change of an LR point; the last row wins
      store/curves/        learning-curve rows (train loss every report, eval loss when evaluated)
      store/cells.parquet  the latest snapshot of every cell's bracketing status
      fits.json            written by `sweeper fit`, read by the dashboards
      checkpoints/         per-trial checkpoints (resume after a kill)
      ray/                 Ray Tune's experiment folder

One writer (the driver) appends chunks; any number of readers (status, optima, fit,
dashboards) read concurrently. A chunk becomes visible only by an atomic rename of a
fully written, fsynced file, so a reader never sees a torn row. Chunk names carry a
monotonic sequence number, so a reader can ask for "everything after chunk N" (the
dashboard's incremental updates). Compaction merges many small chunks into one; a
crash between writing the merged file and deleting its sources leaves duplicates
that every reader removes (points by `seq`, curves by `(point_id, attempt, step)`).

The ledger stays the record: the driver re-derives store rows from it on relaunch,
so losing the store never loses a finished result.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import polars as pl

from sweeper.errors import UserError

STORE_VERSION = 1
MANIFEST = "manifest.json"
LEDGER = "ledger.db"
FITS = "fits.json"

POINT_STATES = ("queued", "running", "ok", "diverged", "failed")
FINISHED_STATES = ("ok", "diverged", "failed")
CELL_STATUSES = ("pending", "running", "bracketed", "edge", "diverged", "failed")  # failed: every point crashed

POINTS_SCHEMA: dict[str, pl.DataType] = {
    "seq": pl.Int64,  # write order; the last row of a point_id is its current state
    "point_id": pl.Utf8,  # f"{cell_id}/lr={lr:.6g}", e.g. "layerrope/L48/s0/lr=0.002"
    "cell_id": pl.Utf8,  # f"{method}/{size}/s{seed}"
    "method": pl.Utf8,
    "family": pl.Utf8,  # llama | looped | vit
    "size": pl.Utf8,  # the size label: "L48" for a depth, or a named size ("130M")
    "depth": pl.Int64,  # blocks (loop count for the looped family's x axis: see `x_loops`)
    "width": pl.Int64,
    "seed": pl.Int64,
    "params": pl.Int64,  # parameters of one member, embeddings included
    "params_nonembed": pl.Int64,
    "flops_per_token": pl.Float64,  # training FLOPs per token (6N + attention)
    "lr": pl.Float64,
    "state": pl.Utf8,  # POINT_STATES
    "objective": pl.Float64,  # what bracketing minimises (final eval loss, or error rate); null unless ok
    "loss": pl.Float64,  # final evaluation loss; null unless ok
    "accuracy": pl.Float64,  # top-1 (ViT), else null
    "init_loss": pl.Float64,  # loss at initialisation (for LR sensitivity)
    "diverged_step": pl.Int64,
    "reason": pl.Utf8,  # why it diverged or failed
    "steps": pl.Int64,  # steps trained so far / in total
    "tokens": pl.Int64,
    "train_seconds": pl.Float64,
    "trial_id": pl.Utf8,
    "attempt": pl.Int64,
    "started_at": pl.Float64,  # unix seconds
    "finished_at": pl.Float64,
    "corpus": pl.Utf8,  # data fingerprint
}

CURVES_SCHEMA: dict[str, pl.DataType] = {
    "point_id": pl.Utf8,
    "cell_id": pl.Utf8,
    "method": pl.Utf8,
    "size": pl.Utf8,
    "seed": pl.Int64,
    "lr": pl.Float64,
    "attempt": pl.Int64,
    "step": pl.Int64,
    "tokens": pl.Int64,
    "train_loss": pl.Float64,
    "eval_loss": pl.Float64,  # null on steps without evaluation
    "time": pl.Float64,  # unix seconds
}

CELLS_SCHEMA: dict[str, pl.DataType] = {
    "cell_id": pl.Utf8,
    "method": pl.Utf8,
    "family": pl.Utf8,
    "size": pl.Utf8,
    "depth": pl.Int64,
    "width": pl.Int64,
    "seed": pl.Int64,
    "params": pl.Int64,
    "status": pl.Utf8,  # CELL_STATUSES
    "n_points": pl.Int64,  # finished points
    "n_running": pl.Int64,
    "n_diverged": pl.Int64,
    "best_lr": pl.Float64,  # grid best
    "best_objective": pl.Float64,
    "interp_lr": pl.Float64,  # parabola in log LR through the best point and its neighbours
    "interp_objective": pl.Float64,
    "updated_at": pl.Float64,
}

_CHUNK = re.compile(r"^(\d{12})(?:-(\d{12}))?\.parquet$")


def is_sweep_dir(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def read_manifest(sweep_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a sweep directory, or a UserError saying what is wrong with the path."""
    path = Path(sweep_dir)
    if not path.exists():
        raise UserError(f"{path}: no such directory")
    if not path.is_dir():
        raise UserError(f"{path}: not a directory (give the sweep's output directory)")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"{path}: not a sweep directory (no {MANIFEST}; launch a sweep with `sweeper launch SWEEP.yaml`)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{manifest_path}: unreadable manifest ({exc})") from None
    version = manifest.get("store_version")
    if not isinstance(version, int):
        raise UserError(f"{manifest_path}: no store_version; not written by layerrope-sweeper")
    if version > STORE_VERSION:
        raise UserError(
            f"{manifest_path}: store version {version} was written by a newer layerrope-sweeper "
            f"(this one reads up to {STORE_VERSION}); upgrade with `pip install -U layerrope-sweeper`"
        )
    return manifest


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see either the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True, allow_nan=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk: the old file stays whole, no debris
        raise


def _write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write a chunk that readers can verify: every data page carries a CRC32 (checked on read),
    no copy of the Arrow schema in the footer (a flipped bit there silently changed column types)."""
    import pyarrow.parquet as pq

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(frame.to_arrow(), tmp, compression="zstd", write_statistics=False,
                       write_page_checksum=True, store_schema=False)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write (a full disk) leaves no debris behind
        raise


def _read_parquet(fh: Any) -> pl.DataFrame:
    """One chunk, through pyarrow with page checksums verified. polars' own reader, given a damaged
    chunk, returned silently different values for about 1 in 20 single-bit flips and could abort
    the whole process (a failed allocation of a corrupted length); pyarrow raises instead.
    The chunk is read into memory first and decoded without threads: pyarrow's I/O and CPU thread
    pools, once started, made short-lived readers abort at exit now and then ("terminate called
    without an active exception", 3 in 60 runs of `sweeper status`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.ParquetFile(pa.BufferReader(fh.read()), page_checksum_verification=True).read(use_threads=False)
    return pl.from_arrow(table)  # type: ignore[return-value]


def _frame(rows: Iterable[dict[str, Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    rows = list(rows)
    unknown = {k for row in rows for k in row} - set(schema)
    if unknown:
        raise ValueError(f"unknown store columns: {sorted(unknown)}")
    return pl.DataFrame([{k: row.get(k) for k in schema} for row in rows], schema=schema, orient="row")


def _chunks(folder: Path) -> list[tuple[int, int, Path]]:
    """(first seq, last seq, path) of every visible chunk, in order."""
    out = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        m = _CHUNK.match(name)
        if m:
            first = int(m.group(1))
            last = int(m.group(2)) if m.group(2) else first
            out.append((first, last, folder / name))
    out.sort()
    return out


def _read_chunks(paths: list[Path], schema: dict[str, pl.DataType], *, missing_ok: bool = True) -> pl.DataFrame:
    frames = []
    for path in paths:
        try:
            # One open: polars given a path may open it again for the data, and a file
            # replaced in between (cells.parquet) reads torn or panics.
            with open(path, "rb") as fh:
                frames.append(_read_parquet(fh).select([pl.col(c).cast(t) for c, t in schema.items()]))
        except FileNotFoundError:
            if not missing_ok:
                raise
            continue  # compacted away between listing and reading; the merged file has its rows
        except (Exception, pl.exceptions.PanicException) as exc:  # a damaged chunk: say which, never a wrong table
            detail = (str(exc).strip().splitlines() or [""])[0][:300]  # one line, whatever the reader said
            raise UserError(f"{path}: damaged store chunk ({type(exc).__name__}: {detail}); "
                            "run `sweeper status DIR --repair` to rebuild the store from the ledger") from None
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames, how="vertical")


def _read_listed(folder: Path, schema: dict[str, pl.DataType], after_chunk: int = 0) -> pl.DataFrame:
    """Every chunk of `folder` numbered above `after_chunk`. A chunk compacted away between
    listing and reading is not skipped (that would return a silently short table): the folder
    is listed again, and since the merged file is renamed in before its sources are deleted,
    the new listing holds those rows."""
    for _ in range(100):
        paths = [p for first, last, p in _chunks(folder) if last > after_chunk]
        try:
            return _read_chunks(paths, schema, missing_ok=False)
        except FileNotFoundError:
            continue
    raise UserError(f"{folder}: store chunks keep vanishing while being read; is another process deleting them?")


class StoreWriter:
    """The driver's appender. Not thread-safe; one per sweep directory at a time."""

    COMPACT_AT = 64  # chunks per table before they are merged

    def __init__(self, sweep_dir: str | os.PathLike[str]) -> None:
        self.root = Path(sweep_dir)
        self.points_dir = self.root / "store" / "points"
        self.curves_dir = self.root / "store" / "curves"
        self.points_dir.mkdir(parents=True, exist_ok=True)
        self.curves_dir.mkdir(parents=True, exist_ok=True)
        last = [c[1] for d in (self.points_dir, self.curves_dir) for c in _chunks(d)]
        self._next_chunk = max(last, default=0) + 1
        existing = load_points(self.root, latest=False)
        self._next_seq = int(existing["seq"].max()) + 1 if existing.height else 1

    def _append(self, folder: Path, frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> None:
        if frame.height == 0:
            return
        _write_parquet_atomic(frame, folder / f"{self._next_chunk:012d}.parquet")
        self._next_chunk += 1
        chunks = _chunks(folder)
        if len(chunks) > self.COMPACT_AT:
            self._compact(folder, chunks, schema)

    def _compact(self, folder: Path, chunks: list[tuple[int, int, Path]], schema: dict[str, pl.DataType]) -> None:
        merged = _read_chunks([c[2] for c in chunks], schema)
        first, last = chunks[0][0], chunks[-1][1]
        _write_parquet_atomic(merged, folder / f"{first:012d}-{last:012d}.parquet")
        for _, _, path in chunks:
            path.unlink(missing_ok=True)

    def append_points(self, rows: Iterable[dict[str, Any]]) -> None:
        rows = list(rows)
        for row in rows:
            row["seq"] = self._next_seq
            self._next_seq += 1
        self._append(self.points_dir, _frame(rows, POINTS_SCHEMA), POINTS_SCHEMA)

    def append_curves(self, rows: Iterable[dict[str, Any]]) -> None:
        self._append(self.curves_dir, _frame(rows, CURVES_SCHEMA), CURVES_SCHEMA)

    def write_cells(self, rows: Iterable[dict[str, Any]]) -> None:
        _write_parquet_atomic(_frame(rows, CELLS_SCHEMA), self.root / "store" / "cells.parquet")


@dataclass(frozen=True)
class Cursor:
    """How far a reader has read: the last chunk number seen per table."""

    points: int = 0
    curves: int = 0


def load_points(sweep_dir: str | os.PathLike[str], *, latest: bool = True, after_chunk: int = 0) -> pl.DataFrame:
    """Point rows; with `latest` only the current state of each point (highest seq); optionally
    only from chunks numbered above `after_chunk` (a compacted chunk may repeat older rows)."""
    folder = Path(sweep_dir) / "store" / "points"
    frame = _read_listed(folder, POINTS_SCHEMA, after_chunk).unique(subset=["seq"], keep="last")
    if latest and frame.height:
        frame = frame.sort("seq").unique(subset=["point_id"], keep="last", maintain_order=True)
    return frame.sort("seq")


def load_curves(
    sweep_dir: str | os.PathLike[str], *, after_chunk: int = 0, point_ids: list[str] | None = None
) -> pl.DataFrame:
    """Curve rows, deduplicated, optionally only from chunks numbered above `after_chunk`."""
    folder = Path(sweep_dir) / "store" / "curves"
    frame = _read_listed(folder, CURVES_SCHEMA, after_chunk)
    if point_ids is not None:
        frame = frame.filter(pl.col("point_id").is_in(point_ids))
    return frame.unique(subset=["point_id", "attempt", "step"], keep="last", maintain_order=True)


def latest_chunk(sweep_dir: str | os.PathLike[str]) -> Cursor:
    root = Path(sweep_dir) / "store"
    return Cursor(
        points=max((c[1] for c in _chunks(root / "points")), default=0),
        curves=max((c[1] for c in _chunks(root / "curves")), default=0),
    )


def load_cells(sweep_dir: str | os.PathLike[str]) -> pl.DataFrame:
    path = Path(sweep_dir) / "store" / "cells.parquet"
    if not path.exists():
        return pl.DataFrame(schema=CELLS_SCHEMA)
    return _read_chunks([path], CELLS_SCHEMA)


def load_fits(sweep_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = Path(sweep_dir) / FITS
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"{path}: unreadable fits ({exc}); rerun `sweeper fit {sweep_dir}`") from None


def now() -> float:
    return time.time()
