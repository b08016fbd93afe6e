"""The results store of a sweep directory: append-only Parquet chunks that polars reads
while the sweep runs.

Layout of a sweep directory (everything the tool keeps about one sweep)::

    DIR/
      manifest.json        store version, sweep name, compatibility key, corpus fingerprint (sweeper.records.manifest)
      sweep.yaml           the YAML as launched (the first launch; extensions are appended as sweep.N.yaml)
      ledger.db            the Optuna ledger of record (one study per cell, one ledger entry per point)
      store/points/        point events: one row per state change of a point (sweeper.core.rows.PointRow)
      store/curves/        learning-curve rows (train loss every report, eval loss when evaluated)
      store/cells.parquet  the latest snapshot of every cell's bracketing status
      fits.json            written by `sweeper fit`, read by the dashboards (sweeper.analysis.fits.document)
      weights/, exports/   kept best weights, exported weights (copied here by the driver)
      ray/                 the sweep's storage when `ray.storage` is not set (`sweeper.run.storage`):
                           Tune's runs and the trials' checkpoints, staged weights, shared caches

One writer (the driver) appends chunks; any number of readers (status, optima, fit,
dashboards) read concurrently. A chunk becomes visible only by an atomic rename of a
fully written, fsynced file, so a reader never sees a torn row. Chunk names carry a
monotonic sequence number, so a reader can ask for "everything after chunk N" (the
dashboard's incremental updates). Compaction merges many small chunks into one; a
crash between writing the merged file and deleting its sources leaves duplicates
that every reader removes (points by `seq`, curves by `(point_id, attempt, step)`).

The ledger stays the record: the driver re-derives store rows from it on relaunch,
so losing the store never loses a finished result.

Versions. The manifest's `store_version` is the newest this reader understands
(`STORE_VERSION`, kept with the manifest); a newer one is refused. A column added since a chunk was written reads as
null (`ADDED_COLUMNS`; any other missing or unknown column is damage). Version 2 added `loops` (the loop count of a loop-count sweep) and made `depth` always
the number of blocks; version 1 stored a loop-count sweep's loop count in `depth`: such rows
read as version 2 would write them, with the number of blocks unknown, and `sweeper launch`
rebuilds such a store from the ledger before it appends to it. Version 3 added the point state
`stalled` and the columns `loss_se`, `unigram_loss`, `loss_batches` (points), `n_stalled`
(cells) and `eval_loss_se` (curves); a version-2 store reads them as null and is continued as it is.
Version 4 added the point columns `loop_losses` (a looped model's final loss at each evaluation loop count)
and `lambada_ppl` (LAMBADA perplexity, `eval.tasks`); older stores read them as null.
The point state and cell status `infra_failed` came later without a new version (no column changed):
an older reader fails only on a store that holds one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.core.errors import UserError
from sweeper.records.durable import write_parquet_atomic
# The manifest's names, importable with the layout above (the manifest is read and written in its own module).
from sweeper.records.manifest import MANIFEST, STORE_VERSION, read_manifest  # noqa: F401
from sweeper.core.rows import CELL_COLUMNS, CURVE_COLUMNS, POINT_COLUMNS, CellRow, Column, PointRow

LEDGER = "ledger.db"

_DTYPES: dict[str, pl.DataType] = {"str": pl.Utf8, "int": pl.Int64, "float": pl.Float64}


def _schema(columns: tuple[Column, ...]) -> dict[str, pl.DataType]:
    return {c.name: _DTYPES[c.type] for c in columns}


# The tables' columns are those of the records (`sweeper.core.rows`); points add `seq`, the
# write order (the last row of a point_id is its current state).
POINTS_SCHEMA: dict[str, pl.DataType] = {"seq": pl.Int64, **_schema(POINT_COLUMNS)}
CURVES_SCHEMA: dict[str, pl.DataType] = _schema(CURVE_COLUMNS)
CELLS_SCHEMA: dict[str, pl.DataType] = _schema(CELL_COLUMNS)


class Store(Protocol):
    """What the driver writes a sweep's results through (the recorder is its only caller).

    Appends are atomic per call (a reader sees all of a call's rows or none) and ordered; a
    failed call writes nothing and may be retried with the same rows."""

    def append_points(self, rows: Sequence[PointRow]) -> None: ...

    def append_curves(self, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def write_cells(self, rows: Sequence[CellRow]) -> None: ...


_CHUNK = re.compile(r"^(\d{12})(?:-(\d{12}))?\.parquet$")


def _read_parquet(fh: Any) -> pl.DataFrame:
    """One chunk, through pyarrow with page checksums verified. polars' own reader, given a damaged
    chunk, returned silently different values for about 1 in 20 single-bit flips and could abort
    the whole process (a failed allocation of a corrupted length); pyarrow raises instead.
    The chunk is read into memory first and decoded without threads: pyarrow's I/O and CPU thread
    pools, once started, made short-lived readers abort at exit now and then ("terminate called
    without an active exception", 3 in 60 runs of `sweeper status`)."""
    table = pq.ParquetFile(pa.BufferReader(fh.read()), page_checksum_verification=True).read(use_threads=False)
    return pl.from_arrow(table)  # type: ignore[return-value]


def _frame(rows: Iterable[Mapping[str, Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    rows = list(rows)
    unknown = {k for row in rows for k in row} - set(schema)
    if unknown:
        raise ValueError(f"unknown store columns: {sorted(unknown)}")
    return pl.DataFrame([{k: row.get(k) for k in schema} for row in rows], schema=schema, orient="row")


def _write_frame(frame: pl.DataFrame, path: Path) -> None:
    write_parquet_atomic(frame.to_arrow(), path)


# Columns added since version 1, by the version that added them: a chunk written before reads them
# as null. Any other column missing, or a column the schema does not know, is a damaged chunk (the
# footer that names the columns carries no checksum: a flipped bit there renames a column).
ADDED_COLUMNS = {"loops": 2, "loss_se": 3, "unigram_loss": 3, "loss_batches": 3, "n_stalled": 3, "eval_loss_se": 3,
                 "loop_losses": 4, "lambada_ppl": 4}


def _columns(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """The frame in the schema's columns and types."""
    unknown = sorted(set(frame.columns) - set(schema))
    missing = sorted(set(schema) - set(frame.columns) - set(ADDED_COLUMNS))
    if unknown or missing:
        raise ValueError(f"columns {unknown or missing} are not the store's")
    return frame.select([(pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
                         for c, t in schema.items()])


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
                frames.append(_columns(_read_parquet(fh), schema))
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


def read_curve_chunk(path: Path) -> pl.DataFrame:
    """One curve chunk (UserError if it is damaged): what `repair` salvages of an old store."""
    return _read_chunks([path], CURVES_SCHEMA)


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
        _write_frame(frame, folder / f"{self._next_chunk:012d}.parquet")
        self._next_chunk += 1
        chunks = _chunks(folder)
        if len(chunks) > self.COMPACT_AT:
            self._compact(folder, chunks, schema)

    def _compact(self, folder: Path, chunks: list[tuple[int, int, Path]], schema: dict[str, pl.DataType]) -> None:
        merged = _read_chunks([c[2] for c in chunks], schema)
        first, last = chunks[0][0], chunks[-1][1]
        _write_frame(merged, folder / f"{first:012d}-{last:012d}.parquet")
        for _, _, path in chunks:
            path.unlink(missing_ok=True)

    def append_points(self, rows: Sequence[PointRow]) -> None:
        columns = []
        for row in rows:
            columns.append({"seq": self._next_seq, **row.columns()})
            self._next_seq += 1
        self._append(self.points_dir, _frame(columns, POINTS_SCHEMA), POINTS_SCHEMA)

    def append_curves(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Curve rows as column mappings (`CurvePoint.columns()`, or rows salvaged from a store)."""
        self._append(self.curves_dir, _frame(rows, CURVES_SCHEMA), CURVES_SCHEMA)

    def write_cells(self, rows: Sequence[CellRow]) -> None:
        _write_frame(_frame([row.columns() for row in rows], CELLS_SCHEMA), self.root / "store" / "cells.parquet")


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
    return _from_version_1(frame.sort("seq"), sweep_dir)


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
    return _from_version_1(_read_chunks([path], CELLS_SCHEMA), sweep_dir)


def _from_version_1(frame: pl.DataFrame, sweep_dir: str | os.PathLike[str]) -> pl.DataFrame:
    """Rows of a loop-count sweep written by store version 1 held the loop count in `depth` (and
    had no `loops`): read them as version 2 does, the loop count in `loops` and the number of
    blocks unknown. (`sweeper launch` rebuilds such a store from the ledger.)"""
    if not frame.height or frame["loops"].null_count() < frame.height:
        return frame
    try:
        manifest = read_manifest(sweep_dir)
    except UserError:
        return frame
    if manifest.store_version >= 2 or not manifest.loop_axis:
        return frame
    return frame.with_columns(pl.col("depth").alias("loops"), pl.lit(None, dtype=pl.Int64).alias("depth"))
