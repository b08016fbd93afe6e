"""Results from Python: `sweeper.open(DIR)` for notebooks and scripts.

A `Sweep` reads a sweep directory (running or finished) through the same readers as the command
line, so its numbers are the CLI's: `points()`, `curves()` and `cells()` are the store's tables
(`cells()` is what `sweeper status --json` prints), `optima()` is `sweeper optima --format json`'s
cells, `fits()` is `fits.json` (what `sweeper fit` wrote) as typed objects, and `figure(name)`
is one of the dashboards' Plotly figures (`sweeper plots` draws the same). Every call reads the
directory again, so a notebook cell re-run during a sweep shows its progress.

    >>> import sweeper
    >>> sweep = sweeper.open("runs/depth")
    >>> sweep.optima().filter(status="bracketed").select("method", "size", "interp_lr")
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sweeper.records.results import cell_rows
from sweeper.records.results import optima as optima_rows
from sweeper.records.store import load_cells, load_curves, load_fits, load_points, read_manifest

# `optima()`'s columns, in order (`sweeper.records.results.optima`'s keys).
OPTIMA_SCHEMA: dict[str, pl.DataType] = {
    "cell_id": pl.Utf8, "method": pl.Utf8, "size": pl.Utf8, "seed": pl.Int64, "depth": pl.Int64, "params": pl.Int64,
    "status": pl.Utf8, "best_lr": pl.Float64, "best_loss": pl.Float64, "best_loss_se": pl.Float64,
    "neighbour_lr": pl.Float64, "neighbour_gap": pl.Float64, "neighbour_gap_se": pl.Float64,
    "neighbour_gap_paired": pl.Boolean, "within_noise": pl.Boolean, "best_objective": pl.Float64,
    "interp_lr": pl.Float64, "interp_objective": pl.Float64, "n_points": pl.Int64, "n_diverged": pl.Int64,
    "n_stalled": pl.Int64, "n_failed": pl.Int64, "n_running": pl.Int64, "best_lambada_ppl": pl.Float64,
    "best_loop_losses": pl.Utf8,
}


# ----------------------------------------------------------------------------------------------
# fits.json as typed objects (field names are the document's keys; None where it holds null)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Estimate:
    """A fitted number with its bootstrap 95% interval (lo, hi: None without an interval)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> Estimate:
        doc = doc or {}
        return cls(_float(doc.get("value")), _float(doc.get("lo")), _float(doc.get("hi")))


@dataclass(frozen=True)
class Prediction:
    """A fit's prediction at one `--to` target x, with its band."""

    x: float
    value: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def of(cls, doc: Mapping[str, Any], key: str) -> Prediction:
        return cls(float(doc["x"]), _float(doc.get(key)), _float(doc.get("lo")), _float(doc.get("hi")))


@dataclass(frozen=True)
class LossFit:
    """L = E + A·x^(-α) for one method (`loss_fit`)."""

    E: Estimate
    A: Estimate
    alpha: Estimate
    loglog_slope: Estimate
    points: tuple[tuple[float, float], ...]  # (x, loss) that were fitted
    targets: tuple[Prediction, ...]
    status: str  # ok | insufficient | ...
    n_points: int
    trustworthy: bool
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> LossFit:
        return cls(
            E=Estimate.of(doc.get("E")), A=Estimate.of(doc.get("A")), alpha=Estimate.of(doc.get("alpha")),
            loglog_slope=Estimate.of(doc.get("loglog_slope")),
            points=tuple((float(x), float(y)) for x, y in doc.get("points") or []),
            targets=tuple(Prediction.of(t, "loss") for t in doc.get("targets") or []),
            status=str(doc.get("status")), n_points=int(doc.get("n_points") or 0),
            trustworthy=bool(doc.get("trustworthy")), warnings=tuple(doc.get("warnings") or []),
        )


@dataclass(frozen=True)
class LRFit:
    """LR* = coef · x^exponent for one method (`lr_fit`)."""

    coef: Estimate
    exponent: Estimate
    points: tuple[tuple[float, float], ...]  # (x, optimal LR) that were fitted
    targets: tuple[Prediction, ...]
    status: str
    n_points: int
    trustworthy: bool
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> LRFit:
        return cls(
            coef=Estimate.of(doc.get("coef")), exponent=Estimate.of(doc.get("exponent")),
            points=tuple((float(x), float(y)) for x, y in doc.get("points") or []),
            targets=tuple(Prediction.of(t, "lr") for t in doc.get("targets") or []),
            status=str(doc.get("status")), n_points=int(doc.get("n_points") or 0),
            trustworthy=bool(doc.get("trustworthy")), warnings=tuple(doc.get("warnings") or []),
        )


@dataclass(frozen=True)
class SizeFit:
    """One size of a method as the fits saw it (mean over seeds)."""

    size: str
    x: float | None
    loss: float | None
    lr_opt: float | None
    seeds: tuple[int, ...]
    cells: tuple[str, ...]

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> SizeFit:
        return cls(size=str(doc["size"]), x=_float(doc.get("x")), loss=_float(doc.get("loss")),
                   lr_opt=_float(doc.get("lr_opt")), seeds=tuple(doc.get("seeds") or []),
                   cells=tuple(doc.get("cells") or []))


@dataclass(frozen=True)
class MethodFits:
    """Every fit of one method."""

    method: str
    sizes: tuple[SizeFit, ...]
    loss: LossFit
    lr: LRFit
    compute_exponent: Estimate | None  # α of L = E + A·C^(-α); None when it could not be fitted

    @classmethod
    def of(cls, method: str, doc: Mapping[str, Any]) -> MethodFits:
        ce = doc.get("compute_exponent")
        return cls(method=method, sizes=tuple(SizeFit.of(s) for s in doc.get("sizes") or []),
                   loss=LossFit.of(doc.get("loss_fit") or {}), lr=LRFit.of(doc.get("lr_fit") or {}),
                   compute_exponent=Estimate.of(ce) if ce else None)


@dataclass(frozen=True)
class Fits:
    """`fits.json`: per method its fits, the ranking, and every warning. `document` is the whole
    file as read (keys this class does not name are there)."""

    sweep: str
    x: str  # the scale axis: depth | params | compute
    x_label: str
    targets: tuple[float, ...]
    methods: dict[str, MethodFits]
    ranking: tuple[str, ...]  # methods, lowest loss at the largest common size first
    warnings: tuple[str, ...]
    document: dict[str, Any]

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Fits:
        ranking = sorted(doc.get("ranking") or [], key=lambda r: r.get("rank") or 0)
        return cls(
            sweep=str(doc.get("sweep")), x=str(doc.get("x")), x_label=str(doc.get("x_label")),
            targets=tuple(float(t) for t in doc.get("targets") or []),
            methods={m: MethodFits.of(m, section) for m, section in (doc.get("methods") or {}).items()},
            ranking=tuple(str(r["method"]) for r in ranking), warnings=tuple(doc.get("warnings") or []),
            document=doc,
        )


# ----------------------------------------------------------------------------------------------
# A sweep directory


class Sweep:
    """One sweep directory, read on every call (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.manifest: dict[str, Any] = read_manifest(self.path)  # a UserError names what is wrong with the path

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.path.name)

    def points(self) -> pl.DataFrame:
        """Every point's current row (the store's `points` table, one row per point, in write order)."""
        return load_points(self.path)

    def curves(self) -> pl.DataFrame:
        """Learning-curve rows: train loss every report, eval loss when evaluated, against `step` and `tokens`."""
        return load_curves(self.path)

    def cells(self) -> pl.DataFrame:
        """Each cell's status and optimum as the driver last wrote them, with the point counts and best loss
        of `optima()` beside them (`sweeper status --json`)."""
        cells = load_cells(self.path)
        extra = [c for c in OPTIMA_SCHEMA if c not in cells.columns]
        by_id = {row["cell_id"]: row for row in cell_rows(self.path)}
        added = pl.DataFrame([{c: by_id[cid].get(c) for c in extra} for cid in cells["cell_id"]],
                             schema={c: OPTIMA_SCHEMA[c] for c in extra}, orient="row")
        return pl.concat([cells, added], how="horizontal")

    def optima(self) -> pl.DataFrame:
        """Per cell: status, grid-best LR and loss, interpolated optimum, point counts (`sweeper optima`)."""
        return pl.DataFrame(optima_rows(self.path), schema=OPTIMA_SCHEMA, orient="row")

    def fits(self) -> Fits | None:
        """`fits.json` (written by `sweeper fit`) as typed objects; None before the first fit."""
        doc = load_fits(self.path)
        return Fits.of(doc) if doc is not None else None

    def figure(self, name: str = "loss_vs_lr") -> Any:
        """A `plotly.graph_objects.Figure`: one of `FIGURE_NAMES`, as `sweeper plots` draws it."""
        # The dashboards (and plotly's figure classes) load only for a figure: reading frames stays light.
        from dashboards.data import load_sweep
        from dashboards.figures import FIGURES, to_figure

        if name not in FIGURES:
            raise ValueError(f"no figure {name!r}; the figures are {', '.join(FIGURES)}")
        return to_figure(FIGURES[name][1](load_sweep(self.path)))

    def __repr__(self) -> str:
        return f"Sweep({str(self.path)!r})"


FIGURE_NAMES: Sequence[str] = ("status", "loss_vs_lr", "scaling", "optimal_lr", "learning_curves", "progress")


def open_sweep(path: str | os.PathLike[str]) -> Sweep:
    """The sweep in directory `path` (what `sweeper launch` wrote)."""
    return Sweep(path)
