"""The live dashboard's state: an incremental reader of a sweep directory and, per filter,
the figures with a revision number on every trace, so a client that says "I have
revision R" receives only what changed since.

`LiveModel.refresh` reads only the store chunks written since its cursor
(`latest_chunk`, `load_points(after_chunk=)`, `load_curves(after_chunk=)`), and re-reads
cells.parquet and fits.json only when their file changed. Curve rows are kept per
(method, size) group, deduplicated by (attempt, step) — a compacted chunk repeats rows
already read — and only groups that received rows or point-state changes are
re-downsampled and re-drawn.

`View` holds one filter's figures. `View.sync` rebuilds the figures whose inputs changed
(the learning curves group by group), serialises each trace, and gives a new revision
to the traces, layouts and trace orders whose JSON differs; `View.payload(since)` then
assembles the JSON of everything newer than `since` from those cached strings.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl

from dashboards import figures
from dashboards.data import Filters, SweepData, sweep_name
from dashboards.figures.common import present_methods, present_sizes, size_legend
from sweeper.analysis.fits.document import FITS, FitsDocument, load_fits
from sweeper.core.errors import UserError
from sweeper.records.manifest import read_manifest
from sweeper.records.store import (
    CELLS_SCHEMA,
    POINTS_SCHEMA,
    Cursor,
    latest_chunk,
    load_cells,
    load_curves,
    load_points,
)

CURVE_COLUMNS = ("point_id", "method", "size", "seed", "lr", "attempt", "step", "tokens", "train_loss")
Group = tuple[str, str]


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


class LiveModel:
    """What the dashboard knows of one sweep directory, kept current by `refresh`."""

    def __init__(self, sweep_dir: str | os.PathLike[str], *, min_interval: float = 0.2) -> None:
        self.root = Path(sweep_dir)
        manifest = read_manifest(self.root)
        self.name = sweep_name(self.root, manifest)
        self.x_kind = manifest.x
        self.epoch = secrets.token_hex(6)
        self.lock = threading.RLock()
        self.min_interval = min_interval
        self.cursor = Cursor()
        self.points = pl.DataFrame(schema=POINTS_SCHEMA)
        self.cells = pl.DataFrame(schema=CELLS_SCHEMA)
        self.fits: FitsDocument | None = None
        self.curves: dict[Group, pl.DataFrame] = {}  # raw rows, latest attempt per point
        self.drawn: dict[Group, pl.DataFrame] = {}  # the same, downsampled to `budget` vertices per curve
        self.budget = 0
        self._curve_keys = pl.DataFrame(schema={"point_id": pl.Utf8, "_a": pl.Int64, "_s": pl.Int64})
        self._cells_stat: tuple[int, int, int] | None = None
        self._fits_stat: tuple[int, int, int] | None = None
        self._last_refresh = -1e9
        self._rev = 0
        self.version = 0  # bumped whenever anything changed
        self.points_version = self.cells_version = self.fits_version = 0
        self.group_versions: dict[Group, int] = {}
        self.error: str | None = None
        self.last_change = 0.0
        self._data: tuple[int, SweepData] | None = None

    def next_rev(self) -> int:
        self._rev += 1
        return self._rev

    @property
    def rev(self) -> int:
        return self._rev

    # Reading --------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> bool:
        """Read what is new in the store; True when something changed."""
        with self.lock:
            now = time.monotonic()
            if not force and now - self._last_refresh < self.min_interval:
                return False
            self._last_refresh = now
            try:
                changed = self._refresh()
                self.error = None
            except UserError as exc:
                self.error = exc.message
                return False
            if changed:
                self.version += 1
                self.last_change = time.time()
                self._data = None
            return changed

    def _refresh(self) -> bool:
        target = latest_chunk(self.root)
        changed = False
        dirty_groups: set[Group] = set()
        if target.points > self.cursor.points:
            rows = load_points(self.root, latest=False, after_chunk=self.cursor.points)
            if rows.height:
                merged = pl.concat([self.points, rows], how="vertical").sort("seq")
                merged = merged.unique(subset=["point_id"], keep="last", maintain_order=True)
                new_ids = set(rows["point_id"].to_list())
                before = self.points.filter(pl.col("point_id").is_in(sorted(new_ids)))
                after = merged.filter(pl.col("point_id").is_in(sorted(new_ids)))
                if not before.equals(after):
                    self.points = merged
                    self.points_version += 1
                    changed = True
                    dirty_groups |= set(after.select("method", "size").unique().iter_rows())
        if target.curves > self.cursor.curves:
            rows = load_curves(self.root, after_chunk=self.cursor.curves)
            dirty_points = self._ingest_curves(rows)
            self._downsample(dirty_points)
            dirty_groups |= set(dirty_points)
        self.cursor = target
        for group in dirty_groups:
            self.group_versions[group] = self.group_versions.get(group, 0) + 1
        changed = changed or bool(dirty_groups)
        stat = _stat(self.root / "store" / "cells.parquet")
        if stat != self._cells_stat:
            self.cells = load_cells(self.root)
            self._cells_stat = stat
            self.cells_version += 1
            changed = True
        stat = _stat(self.root / FITS)
        if stat != self._fits_stat:
            self.fits = load_fits(self.root)
            self._fits_stat = stat
            self.fits_version += 1
            changed = True
        return changed

    def _ingest_curves(self, rows: pl.DataFrame) -> dict[Group, set[str]]:
        """Add curve rows not seen before (a compacted chunk repeats old ones); a new attempt
        of a point replaces its earlier curve. Returns the points that changed, per group."""
        if rows.height == 0:
            return {}
        rows = rows.select(CURVE_COLUMNS)  # deduplicated by load_curves
        if self._curve_keys.height:
            rows = (
                rows.join(self._curve_keys, on="point_id", how="left")
                .filter(
                    pl.col("_a").is_null()
                    | (pl.col("attempt") > pl.col("_a"))
                    | ((pl.col("attempt") == pl.col("_a")) & (pl.col("step") > pl.col("_s")))
                )
                .drop("_a", "_s")
            )
        if rows.height == 0:
            return {}
        keys = rows.group_by("point_id").agg(
            pl.col("attempt").max().alias("_na"),
            pl.col("step").filter(pl.col("attempt") == pl.col("attempt").max()).max().alias("_ns"),
        )
        merged = self._curve_keys.join(keys, on="point_id", how="full", coalesce=True)
        newer = pl.col("_na").is_not_null() & (
            pl.col("_a").is_null()
            | (pl.col("_na") > pl.col("_a"))
            | ((pl.col("_na") == pl.col("_a")) & (pl.col("_ns") > pl.col("_s")))
        )
        self._curve_keys = merged.select(
            "point_id",
            pl.when(newer).then(pl.col("_na")).otherwise(pl.col("_a")).alias("_a"),
            pl.when(newer).then(pl.col("_ns")).otherwise(pl.col("_s")).alias("_s"),
        )
        dirty: dict[Group, set[str]] = {}
        for (method, size), part in rows.partition_by(["method", "size"], as_dict=True).items():
            group = (method, size)
            old = self.curves.get(group)
            frame = part if old is None else pl.concat([old, part], how="vertical")
            if old is not None and part["attempt"].max() > 1:
                frame = frame.filter(pl.col("attempt") == pl.col("attempt").max().over("point_id"))
            self.curves[group] = frame
            dirty[group] = set(part["point_id"].unique().to_list())
        return dirty

    def _downsample(self, dirty: dict[Group, set[str]]) -> None:
        """Keep `self.drawn` (every curve downsampled to the current budget) current: only
        the points that received rows are downsampled again, unless the budget moved."""
        budget = figures.curve_budget(self.n_curves())
        if budget != self.budget:
            self.budget = budget
            self.drawn = {g: figures.prepare_curves(frame, budget) for g, frame in self.curves.items()}
            return
        for group, pids in dirty.items():
            ids = sorted(pids)
            fresh = figures.prepare_curves(self.curves[group].filter(pl.col("point_id").is_in(ids)), budget)
            old = self.drawn.get(group)
            self.drawn[group] = (
                fresh if old is None else pl.concat([old.filter(~pl.col("point_id").is_in(ids)), fresh], how="vertical")
            )

    # Derived --------------------------------------------------------------------------------

    def data(self) -> SweepData:
        """The whole sweep as `SweepData` (no curves: the learning curves are drawn per group)."""
        with self.lock:
            if self._data is None or self._data[0] != self.version:
                empty = pl.DataFrame(schema={c: pl.Utf8 for c in ("point_id", "method", "size")})
                self._data = (
                    self.version,
                    SweepData.build(self.name, self.points, self.cells, empty, self.fits, x_kind=self.x_kind),
                )
            return self._data[1]

    def n_curves(self) -> int:
        return self._curve_keys.height

    def summary(self) -> dict[str, Any]:
        states = dict(self.points.group_by("state").len().iter_rows()) if self.points.height else {}
        statuses = dict(self.cells.group_by("status").len().iter_rows()) if self.cells.height else {}
        stamps = (
            self.points.select(pl.max_horizontal("started_at", "finished_at").max()).item()
            if self.points.height
            else None
        )
        return {
            "points": {k: int(v) for k, v in sorted(states.items())},
            "cells": {k: int(v) for k, v in sorted(statuses.items())},
            "n_points": self.points.height,
            "n_curve_rows": sum(f.height for f in self.curves.values()),
            "latest_event": stamps,
            "fits": self.fits is not None,
            "cursor": {"points": self.cursor.points, "curves": self.cursor.curves},
        }

    def options(self) -> dict[str, Any]:
        data = self.data()
        return {
            "methods": [{"name": m, "colour": data.colours[m]} for m in data.methods],
            "sizes": list(data.sizes),
            "seeds": list(data.seeds),
        }


@dataclass
class _FigureState:
    layout: tuple[int, str] = (0, "")
    order: tuple[int, list[str]] = (0, [])
    traces: dict[str, tuple[int, str]] = field(default_factory=dict)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # the traces as built, to compare
    layout_obj: dict[str, Any] | None = None
    inputs: tuple[Any, ...] | None = None


@dataclass
class _GroupCache:
    key: tuple[Any, ...]
    traces: list[dict[str, Any]]
    late: np.ndarray


# The inputs each figure is drawn from (besides the filter): it is rebuilt only when they change.
_INPUTS: dict[str, Callable[[LiveModel], tuple[Any, ...]]] = {
    "loss_vs_lr": lambda m: (m.points_version, m.cells_version),
    "status": lambda m: (m.points_version, m.cells_version),
    "scaling": lambda m: (m.points_version, m.cells_version, m.fits_version),
    "optimal_lr": lambda m: (m.points_version, m.cells_version, m.fits_version),
    "leads": lambda m: (m.cells_version,),
    "progress": lambda m: (m.points_version,),
}


class View:
    """The figures of one filter, with a revision per trace, layout and trace order."""

    def __init__(self, model: LiveModel, filters: Filters) -> None:
        self.model = model
        self.filters = filters
        self.figs: dict[str, _FigureState] = {name: _FigureState() for name in figures.FIGURES}
        self.groups: dict[Group, _GroupCache] = {}
        self.synced_version = -1
        self.timings: dict[str, float] = {}

    def sync(self) -> None:
        model = self.model
        if self.synced_version == model.version:
            return
        data = model.data().filtered(self.filters)
        for name, (_, build) in figures.FIGURES.items():
            t = time.perf_counter()
            if name == "learning_curves":
                self._sync_curves(data)
            else:
                inputs = _INPUTS[name](model)
                if self.figs[name].inputs != inputs:
                    self._store(name, build(data))
                    self.figs[name].inputs = inputs
            self.timings[name] = time.perf_counter() - t
        self.synced_version = model.version

    def _sync_curves(self, data: SweepData) -> None:
        model = self.model
        states = dict(zip(data.points["point_id"].to_list(), data.points["state"].to_list()))
        methods = present_methods(data)
        parts = {g: self.filters.mask(frame) for g, frame in model.drawn.items()}
        total = sum(p["point_id"].n_unique() for p in parts.values() if p.height)
        shown = figures.shown_points(total, data.points, data.cells)
        _, refs = figures.learning_curves_layout(data, np.zeros(0))
        traces: list[dict[str, Any]] = size_legend(data, present_sizes(data), "learning_curves") if methods else []
        lates = []
        n_shown = 0
        for i, method in enumerate(methods):
            for size in data.sizes:
                group = (method, size)
                part = parts.get(group)
                if part is None or part.height == 0:
                    continue
                if shown is not None:
                    part = part.filter(pl.col("point_id").is_in(sorted(shown)))
                    ids = frozenset(part["point_id"].unique().to_list())
                    n_shown += len(ids)
                else:
                    ids = None
                key = (model.group_versions.get(group, 0), model.budget, refs[i], ids)
                cached = self.groups.get(group)
                if cached is None or cached.key != key:
                    gstates = {pid: states.get(pid, "running") for pid in part["point_id"].unique().to_list()}
                    cached = _GroupCache(
                        key,
                        figures.curve_group_traces(data, method, size, part, gstates, refs[i]),
                        figures.late_values(part, gstates),
                    )
                    self.groups[group] = cached
                traces += cached.traces
                lates.append(cached.late)
        layout, _ = figures.learning_curves_layout(
            data,
            np.concatenate(lates) if lates else np.zeros(0),
            shown=n_shown if shown is not None else None,
            total=total,
        )
        self._store("learning_curves", {"data": traces, "layout": layout})

    def _store(self, name: str, spec: dict[str, Any]) -> None:
        """Give a new revision to every trace, layout or trace order that differs from before
        (compared as objects first: serialising only what changed is most of the saving)."""
        state = self.figs[name]
        if spec["layout"] != state.layout_obj:
            state.layout = (self.model.next_rev(), dumps(spec["layout"]))
            state.layout_obj = spec["layout"]
        order = []
        seen = {}
        for trace in spec["data"]:
            tid = trace["uid"]
            order.append(tid)
            old = state.traces.get(tid)
            if old is not None and state.objects.get(tid) == trace:
                seen[tid] = old
            else:
                seen[tid] = (self.model.next_rev(), dumps(trace))
        state.traces = seen
        state.objects = {t["uid"]: t for t in spec["data"]}
        if order != state.order[1]:
            state.order = (self.model.next_rev(), order)

    def payload(self, since: int) -> list[str]:
        """JSON fragments of every figure part newer than `since`, as `"name":{...}` items."""
        parts = []
        for name, state in self.figs.items():
            items = []
            if state.layout[0] > since:
                items.append(f'"layout":{state.layout[1]}')
            if state.order[0] > since:
                items.append(f'"order":{dumps(state.order[1])}')
            traces = [f"{dumps(tid)}:{text}" for tid, (rev, text) in state.traces.items() if rev > since]
            if traces:
                items.append('"traces":{' + ",".join(traces) + "}")
            if items:
                parts.append(f"{dumps(name)}:{{" + ",".join(items) + "}")
        return parts


class Dashboard:
    """The model and its views (one per filter in use, least recently used dropped)."""

    MAX_VIEWS = 8

    def __init__(self, sweep_dir: str | os.PathLike[str], *, min_interval: float = 0.2) -> None:
        self.model = LiveModel(sweep_dir, min_interval=min_interval)
        self.views: OrderedDict[str, View] = OrderedDict()

    def update(self, since: int, epoch: str | None, filters: Filters) -> tuple[bytes, dict[str, float]]:
        """The JSON answer to a poll: what changed since revision `since` of this server's epoch."""
        model = self.model
        with model.lock:
            t0 = time.perf_counter()
            model.refresh()
            t1 = time.perf_counter()
            key = filters.key()
            view = self.views.get(key)
            if view is None:
                view = self.views[key] = View(model, filters)
                while len(self.views) > self.MAX_VIEWS:
                    self.views.popitem(last=False)
            self.views.move_to_end(key)
            view.sync()
            t2 = time.perf_counter()
            if epoch != model.epoch:
                since = 0
            parts = view.payload(since)
            head = {
                "epoch": model.epoch,
                "rev": model.rev,
                "full": since == 0,
                "sweep": {"name": model.name, "dir": str(model.root)},
                "summary": model.summary(),
                "options": model.options(),
                "error": model.error,
            }
            body = dumps(head)[:-1] + ',"figures":{' + ",".join(parts) + "}}"
            t3 = time.perf_counter()
        return body.encode(), {"refresh": t1 - t0, "sync": t2 - t1, "payload": t3 - t2}
