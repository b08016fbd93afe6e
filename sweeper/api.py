"""Results from Python: `sweeper.open(DIR)` for notebooks and scripts.

A `Sweep` reads a sweep directory (running or finished) through the same readers as the command
line, so its numbers are the CLI's: `points()`, `curves()` and `cells()` are the store's tables
(`cells()` is what `sweeper status --json` prints), `optima()` is `sweeper optima --format json`'s
cells, `compare(a, b)` is `sweeper compare`'s paired leads, `fits()` is `fits.json` (what `sweeper fit` wrote) as typed objects, and `figure(name)`
is one of the dashboards' Plotly figures (`sweeper plots` draws the same). Every call reads the
directory again, so a notebook cell re-run during a sweep shows its progress.

    >>> import sweeper
    >>> sweep = sweeper.open("runs/depth")
    >>> sweep.optima().filter(status="bracketed").select("method", "size", "interp_lr")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sweeper.analysis.compare import Comparison, CompareX
from sweeper.analysis.compare import compare as compare_methods
from sweeper.analysis.fits import document
from sweeper.analysis.fits.document import FitsDocument, load_fits
from sweeper.records.manifest import Manifest, read_manifest
from sweeper.records.results import cell_rows
from sweeper.records.results import optima as optima_rows
from sweeper.records.store import load_cells, load_curves, load_points

# `optima()`'s columns, in order (`sweeper.records.results.optima`'s keys).
OPTIMA_SCHEMA: dict[str, pl.DataType] = {
    "cell_id": pl.Utf8, "method": pl.Utf8, "size": pl.Utf8, "seed": pl.Int64, "depth": pl.Int64, "params": pl.Int64,
    "status": pl.Utf8, "best_lr": pl.Float64, "best_loss": pl.Float64, "best_loss_se": pl.Float64,
    "neighbour_lr": pl.Float64, "neighbour_gap": pl.Float64, "neighbour_gap_se": pl.Float64,
    "neighbour_gap_paired": pl.Boolean, "within_noise": pl.Boolean, "best_objective": pl.Float64,
    "interp_lr": pl.Float64, "interp_objective": pl.Float64, "n_points": pl.Int64, "n_diverged": pl.Int64,
    "n_stalled": pl.Int64, "n_failed": pl.Int64, "n_infra_failed": pl.Int64, "n_running": pl.Int64,
    "best_lambada_ppl": pl.Float64, "best_loop_losses": pl.Utf8, "stalled_loss": pl.Float64,
    # the seeds' noise (`sweeper.records.seed_noise`) and which noise `within_noise` used (eval | seeds)
    "seed_sd_best_loss": pl.Float64, "n_seeds": pl.Int64, "seed_sd_at_best_lr": pl.Float64,
    "seed_sd_at_neighbour_lr": pl.Float64, "seed_sd_gap": pl.Float64, "n_seeds_gap": pl.Int64, "noise": pl.Utf8,
    # where the best point sits in what was tried (`sweeper.records.edges.neighbour_fields`)
    "edge": pl.Utf8, "low_lr": pl.Float64, "low_state": pl.Utf8, "low_gap": pl.Float64, "high_lr": pl.Float64,
    "high_state": pl.Utf8, "high_gap": pl.Float64,
}


# ----------------------------------------------------------------------------------------------
# fits.json as frozen objects: a reader's view of `sweeper.analysis.fits.document.FitsDocument`
# (field names are the document's, but `loss` and `lr` for `loss_fit` and `lr_fit`; None where it holds null)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Estimate:
    """A fitted number with its bootstrap 95% interval (lo, hi: None without an interval)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None

    @classmethod
    def of(cls, est: document.EstimateValue | None) -> Estimate:
        est = est or document.EstimateValue()
        return cls(_float(est.value), _float(est.lo), _float(est.hi))


@dataclass(frozen=True)
class Prediction:
    """A fit's prediction at one `--to` target x, with its band."""

    x: float
    value: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def of(cls, row: document.PredictionRow) -> Prediction:
        return cls(float(row.x), _float(row.value), _float(row.lo), _float(row.hi))


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
    def of(cls, fit: document.LossFitSection) -> LossFit:
        return cls(
            E=Estimate.of(fit.E), A=Estimate.of(fit.A), alpha=Estimate.of(fit.alpha),
            loglog_slope=Estimate.of(fit.loglog_slope),
            points=tuple((float(x), float(y)) for x, y in fit.points),  # type: ignore[arg-type]
            targets=tuple(Prediction.of(t) for t in fit.targets),
            status=str(fit.status), n_points=int(fit.n_points or 0),
            trustworthy=bool(fit.trustworthy), warnings=tuple(fit.warnings),
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
    def of(cls, fit: document.PowerLawSection | None) -> LRFit:
        fit = fit or document.PowerLawSection()
        return cls(
            coef=Estimate.of(fit.coef), exponent=Estimate.of(fit.exponent),
            points=tuple((float(x), float(y)) for x, y in fit.points),  # type: ignore[arg-type]
            targets=tuple(Prediction.of(t) for t in fit.targets),
            status=str(fit.status), n_points=int(fit.n_points or 0),
            trustworthy=bool(fit.trustworthy), warnings=tuple(fit.warnings),
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
    partial: bool = False  # some seed of the size had no usable optimum (fitted only with --allow-partial)

    @classmethod
    def of(cls, row: document.SizeRow) -> SizeFit:
        return cls(size=str(row.size), x=_float(row.x), loss=_float(row.loss), lr_opt=_float(row.lr_opt),
                   seeds=tuple(row.seeds), cells=tuple(row.cells), partial=bool(row.partial))  # type: ignore[arg-type]


@dataclass(frozen=True)
class MethodFits:
    """Every fit of one method."""

    method: str
    sizes: tuple[SizeFit, ...]
    loss: LossFit
    lr: LRFit
    compute_exponent: Estimate | None  # α of L = E + A·C^(-α); None when it could not be fitted

    @classmethod
    def of(cls, method: str, section: document.MethodSection) -> MethodFits:
        ce = section.compute_exponent
        return cls(method=method, sizes=tuple(SizeFit.of(s) for s in section.sizes),
                   loss=LossFit.of(section.loss_fit), lr=LRFit.of(section.lr_fit),
                   compute_exponent=Estimate.of(ce) if ce is not None else None)


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
    def of(cls, doc: FitsDocument) -> Fits:
        return cls(
            sweep=str(doc.sweep), x=str(doc.x), x_label=str(doc.x_label),
            targets=tuple(float(t) for t in doc.targets),
            methods={m: MethodFits.of(m, section) for m, section in doc.methods.items()},
            ranking=tuple(r.method for r in doc.ranked()), warnings=tuple(doc.warnings),
            document=doc.to_json(),
        )


# ----------------------------------------------------------------------------------------------
# A sweep directory


class Sweep:
    """One sweep directory, read on every call (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.manifest: Manifest = read_manifest(self.path)  # a UserError names what is wrong with the path

    @property
    def name(self) -> str:
        return self.manifest.name_or(self.path)

    def points(self) -> pl.DataFrame:
        """Every point's current row (the store's `points` table, one row per point, in write order), with
        `train_seconds` the point's share of its Tune trial's training time (a trial trains a stack of points at
        once: its time over its members, so that the shares sum to the sweep's training time) and
        `trial_train_seconds` the whole trial's (what the store keeps on every member)."""
        points = load_points(self.path)
        if not points.height:
            return points.with_columns(pl.col("train_seconds").alias("trial_train_seconds"))
        trial = pl.col("train_seconds").max().over("trial_id")
        members = pl.len().over("trial_id")
        share = pl.when(pl.col("trial_id").is_null()).then(pl.col("train_seconds")).otherwise(trial / members)
        return points.with_columns(trial.alias("trial_train_seconds"), share.alias("train_seconds"))

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

    def compare(self, a: str, b: str, *, x: CompareX | None = None, include_edge: bool = False) -> Comparison:
        """The lead of method `b` over method `a` per size, paired by seed, with Student-t 95% intervals
        (`sweeper compare DIR --methods a,b`; `.to_json()` is its `--format json`)."""
        return compare_methods(self.path, a, b, x=x, include_edge=include_edge)

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


FIGURE_NAMES: Sequence[str] = ("status", "loss_vs_lr", "scaling", "optimal_lr", "leads", "learning_curves",
                                "progress")


def open_sweep(path: str | os.PathLike[str]) -> Sweep:
    """The sweep in directory `path` (what `sweeper launch` wrote)."""
    return Sweep(path)
