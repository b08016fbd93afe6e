"""What the figures draw from: one sweep's stored frames and fits, plus the derived facts
every figure agrees on (size order, method colours, the scaling axis, the objective's name).

`SweepData` is a plain bundle of polars frames (the `sweeper.records.store` schemas) and the fits
document (`sweeper.analysis.fits.document.FitsDocument`); `load_sweep` reads it from a sweep
directory with the store's loaders, and `SweepData.filtered` narrows it to some methods, sizes
and seeds while keeping the colours and size shades of the whole sweep (so a filter never
recolours a line).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import polars as pl

from dashboards import style
from models.family import families as model_families
from sweeper.analysis.fits.document import FitsDocument, load_fits
from sweeper.core.ids import depth_of_label
from sweeper.records.manifest import Manifest, read_manifest
from sweeper.records.store import (
    CELLS_SCHEMA,
    CURVES_SCHEMA,
    POINTS_SCHEMA,
    load_cells,
    load_curves,
    load_points,
)

@dataclass(frozen=True)
class Filters:
    """Which methods, sizes and seeds to show; None means all."""

    methods: frozenset[str] | None = None
    sizes: frozenset[str] | None = None
    seeds: frozenset[int] | None = None

    @property
    def is_all(self) -> bool:
        return self.methods is None and self.sizes is None and self.seeds is None

    def key(self) -> str:
        def part(values: frozenset[Any] | None) -> str:
            return "*" if values is None else "\x1f".join(sorted(map(str, values)))

        return "\x1e".join((part(self.methods), part(self.sizes), part(self.seeds)))

    def mask(self, frame: pl.DataFrame) -> pl.DataFrame:
        if self.methods is not None and "method" in frame.columns:
            frame = frame.filter(pl.col("method").is_in(sorted(self.methods)))
        if self.sizes is not None and "size" in frame.columns:
            frame = frame.filter(pl.col("size").is_in(sorted(self.sizes)))
        if self.seeds is not None and "seed" in frame.columns:
            frame = frame.filter(pl.col("seed").is_in(sorted(self.seeds)))
        return frame


@dataclass(frozen=True)
class SweepData:
    """One sweep's results as the figures see them."""

    name: str
    points: pl.DataFrame  # POINTS_SCHEMA, the latest row per point
    cells: pl.DataFrame  # CELLS_SCHEMA
    curves: pl.DataFrame  # CURVES_SCHEMA (possibly only some columns, possibly downsampled)
    fits: FitsDocument | None = None
    # Facts of the whole sweep, kept when filtering so colours and shades never move:
    methods: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()  # ordered by depth, then parameters
    seeds: tuple[int, ...] = ()
    colours: dict[str, str] = field(default_factory=dict)
    x_kind: str | None = None  # the manifest's scaling axis: "depth", "params", or "loops" (a loop-count sweep)
    declared_methods: tuple[str, ...] = ()  # the sweep file's order of methods (its first is the baseline of `leads`)

    @classmethod
    def build(
        cls,
        name: str,
        points: pl.DataFrame,
        cells: pl.DataFrame,
        curves: pl.DataFrame,
        fits: FitsDocument | None = None,
        *,
        x_kind: str | None = None,
        declared_methods: tuple[str, ...] = (),
    ) -> SweepData:
        points = points.sort("point_id") if points.height else points
        cells = cells.sort("cell_id") if cells.height else cells
        methods = tuple(
            sorted(set(points["method"].drop_nulls().unique()) | set(cells["method"].drop_nulls().unique()))
        )
        return cls(
            name=name,
            points=points,
            cells=cells,
            curves=curves,
            fits=fits,
            methods=methods,
            sizes=tuple(order_sizes(points, cells)),
            seeds=tuple(sorted(set(points["seed"].drop_nulls().unique()) | set(cells["seed"].drop_nulls().unique()))),
            colours=style.method_colours(methods),
            x_kind=x_kind if x_kind in ("depth", "params", "compute", "loops") else None,
            declared_methods=declared_methods,
        )

    def filtered(self, filters: Filters) -> SweepData:
        if filters.is_all:
            return self
        fits = self.fits
        if fits is not None and filters.methods is not None:
            fits = fits.for_methods(filters.methods)
        return replace(
            self,
            points=filters.mask(self.points),
            cells=filters.mask(self.cells),
            curves=filters.mask(self.curves),
            fits=fits,
        )

    # Derived facts -------------------------------------------------------------------------

    @cached_property
    def _ranks(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.sizes)}

    def size_rank(self, size: str) -> int:
        return self._ranks.get(size, len(self.sizes))

    def size_shade(self, method: str, size: str) -> str:
        return style.shade(self.colours.get(method, style.MUTED), self.size_rank(size), len(self.sizes))

    @property
    def is_depth_sweep(self) -> bool:
        return bool(self.sizes) and all(depth_of_label(s) is not None for s in self.sizes)

    @cached_property
    def is_classification(self) -> bool:
        """An image-classification sweep (the ViT family): losses are cross-entropy per image."""
        families = set(self.points["family"].drop_nulls().unique()) | set(self.cells["family"].drop_nulls().unique())
        return bool(families) and families <= {f.name for f in model_families() if f.classifies_sequences}

    @cached_property
    def objective_label(self) -> str:
        if self.is_classification:
            # `train.objective` is loss or error (1 - top-1 accuracy); the finished points tell which
            scored = self.points.filter(pl.col("objective").is_not_null() & pl.col("loss").is_not_null())
            if scored.height and float((scored["objective"] - scored["loss"]).abs().max() or 0.0) < 1e-12:
                return "Final eval loss (cross-entropy)"
            return "Top-1 error (final)"
        return "Final eval loss (nats/token)"

    @cached_property
    def _size_values(self) -> dict[str, dict[str, float]]:
        return self._compute_size_values()

    def size_values(self) -> dict[str, dict[str, float]]:
        return self._size_values

    def _compute_size_values(self) -> dict[str, dict[str, float]]:
        """Per size label: its depth (blocks), loop count (a loop-count sweep), parameters and training
        compute (FLOPs), where known."""
        out: dict[str, dict[str, float]] = {}
        if self.points.height:
            agg = (
                self.points.group_by("size")
                .agg(
                    pl.col("depth").drop_nulls().first(),
                    pl.col("loops").drop_nulls().first(),
                    pl.col("params").drop_nulls().first(),
                    (pl.col("flops_per_token") * pl.col("tokens"))
                    .filter(pl.col("state") == "ok")
                    .median()
                    .alias("compute"),
                )
                .sort("size")
            )
            for row in agg.iter_rows(named=True):
                out[row["size"]] = {k: float(row[k]) for k in SIZE_VALUES if row[k] is not None}
        if self.cells.height:
            for row in (
                self.cells.select("size", "depth", "loops", "params").unique(subset="size").sort("size")
                .iter_rows(named=True)
            ):
                entry = out.setdefault(row["size"], {})
                for key in ("depth", "loops", "params"):
                    if key not in entry and row[key] is not None:
                        entry[key] = float(row[key])
        return out


SIZE_VALUES = ("depth", "loops", "params", "compute")


def order_sizes(points: pl.DataFrame, cells: pl.DataFrame) -> list[str]:
    """Size labels from smallest to largest: by loop count or depth, then parameters, then label."""
    keys: dict[str, tuple[float, float]] = {}
    for frame in (cells, points):
        if not frame.height:
            continue
        for row in frame.select("size", "depth", "loops", "params").unique(subset="size", keep="first").iter_rows(named=True):
            if row["size"] is None:
                continue
            along = row["loops"] if row["loops"] is not None else row["depth"]
            depth = float(along) if along is not None else math.inf
            params = float(row["params"]) if row["params"] is not None else math.inf
            old = keys.get(row["size"])
            keys[row["size"]] = (depth, params) if old is None else min(old, (depth, params))
    return sorted(keys, key=lambda s: (keys[s][0], keys[s][1], s))


def sweep_name(sweep_dir: str | os.PathLike[str], manifest: Manifest) -> str:
    """The sweep's name as every figure and the dashboard header show it: marked when simulated."""
    name = manifest.name or Path(sweep_dir).resolve().name
    if manifest.is_imported:
        return f"{name} [IMPORTED: recorded runs from {manifest.imported.source}]"  # type: ignore[union-attr]
    return f"{name} [SIMULATED: planted losses]" if manifest.is_simulated else name


def load_sweep(sweep_dir: str | os.PathLike[str]) -> SweepData:
    """Everything the figures need from a sweep directory (raises UserError for a bad one)."""
    manifest = read_manifest(sweep_dir)
    return SweepData.build(
        sweep_name(sweep_dir, manifest),
        load_points(sweep_dir),
        load_cells(sweep_dir),
        load_curves(sweep_dir),
        load_fits(sweep_dir),
        x_kind=manifest.x,
        declared_methods=tuple(dict.fromkeys(c.method for c in manifest.cells.values() if c.method)),
    )


def empty_frames() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    return pl.DataFrame(schema=POINTS_SCHEMA), pl.DataFrame(schema=CELLS_SCHEMA), pl.DataFrame(schema=CURVES_SCHEMA)


def finite(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]
