"""`sweeper track`: a stored sweep (finished or running) replayed into trackers.

The store's rows go through the same fan-out as a launch's (`sweeper.tracking.core.Tracking`), in
the order a launch sends them: every point's current row, its current attempt's curve, its outcome,
then the cells that are done. The run ids are the launch's, so back-filling twice, or a sweep that
logged live, never makes a second run of a point.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from sweeper.core.rows import CellRow, PointRow
from sweeper.core.states import PointState
from sweeper.records.manifest import Manifest, read_manifest
from sweeper.records.store import load_cells, load_curves, load_points
from sweeper.tracking.core import Tracker, Tracking


def recipes_of(manifest: Manifest) -> dict[str, dict[str, Any]]:
    """Cell id -> the recipe the manifest recorded for it (model, train, data, divergence)."""
    return {cid: dict(entry.compat) for cid, entry in manifest.cells.items()}


def backfill(sweep_dir: Path, trackers: list[Tracker], warn: Callable[[str], None]) -> dict[str, Any]:
    """Send the stored sweep to `trackers`; returns what was sent and which trackers failed."""
    manifest = read_manifest(sweep_dir)
    sweep = manifest.name_or(sweep_dir)
    points = [PointRow.from_columns(row) for row in load_points(sweep_dir).iter_rows(named=True)]
    curves = load_curves(sweep_dir).sort("point_id", "attempt", "tokens", "step")
    cells = [CellRow.from_columns(row) for row in load_cells(sweep_dir).iter_rows(named=True)]
    tracking = Tracking(sweep, trackers, recipes_of(manifest), warn=warn, background=False)
    by_point = {key[0]: frame for key, frame in curves.partition_by("point_id", as_dict=True).items()} \
        if curves.height else {}
    for row in points:
        mine = by_point.get(row.point_id, pl.DataFrame())
        rows = mine.filter(pl.col("attempt") == row.attempt).to_dicts() if mine.height else []
        tracking.record([row], rows)
    tracking.record(cells=cells)
    tracking.close()
    return {"sweep": sweep, "points": sum(r.state is not PointState.QUEUED for r in points),
            "curve_rows": curves.height, "cells_done": sum(c.status.is_done for c in cells),
            "trackers": [t.name for t in trackers], "failed": dict(tracking.failed)}
