"""`DIR/fits.json`, what `sweeper fit` writes and the dashboards and `sweeper.open` read, as one typed
document: `FitsDocument` (CONTRACTS.md, version 1; `sweeper.analysis.fits.report` builds it).

Its sections: the header and provenance (sweep, axis and its label, the definitions of N and C,
the E model, the `--to` targets, the selection rule and what it excluded, the bootstrap options);
per method (`MethodSection`) the fitted sizes, the recipe, the loss fit `E + A·x^(-α)`
(`LossFitSection`: estimates with their intervals, the dense curve and band, the predictions at
the targets, the leave-largest-out check, the plain log-log power law), the optimal-LR law
(`PowerLawSection`), the compute exponent and its fit, the LR sensitivity per size; the
shared-E fits (`SharedESection`, with `--shared-e`); the ranking; the warnings; the two-variable LR
law and the leave-largest-out forecasts when asked (`sweeper.analysis.fits.document_laws`).

`load_fits` and `write_fits` are its only reader and writer. Every number is a `Number`: the
builder's values, counts included, are written as they come (an int stays an int, a numpy
scalar becomes the plain number), as before the types. Every key may be missing (a
document of an earlier version, or the dashboards' synthetic one, holds fewer): missing reads as
the field's default, and is written back missing; keys this version does not name are kept (the
contract: "add keys, never remove"). A document that does not fit is a one-line UserError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field

from sweeper.analysis.fits.document_laws import HoldoutSection, LRLawSection
from sweeper.core.errors import UserError
from sweeper.records.document import JsonValue, Number, Record
from sweeper.records.durable import write_json_atomic

FITS = "fits.json"

CurveRow = tuple[float, float, float | None, float | None]


class EstimateValue(Record):
    """A fitted number with its bootstrap 95% interval (lo, hi: null without one)."""

    value: Number | None = None
    lo: Number | None = None
    hi: Number | None = None

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    def text(self, spec: str = ".4g") -> str | None:
        """'3.21 [3.18, 3.24]', the value alone without an interval, None without a value."""
        if self.value is None:
            return None
        out = format(self.value, spec)
        if self.has_interval:
            out += f" [{format(self.lo, spec)}, {format(self.hi, spec)}]"
        return out

    def covers(self, truth: float) -> bool | None:
        """Whether the interval holds `truth`; None without an interval."""
        return self.lo <= truth <= self.hi if self.has_interval else None  # type: ignore[operator]


class PredictionRow(Record):
    """A fit's prediction at one `--to` target: the loss (loss fits) or the LR (LR laws), with its band."""

    x: Number
    loss: Number | None = None
    lr: Number | None = None
    lo: Number | None = None
    hi: Number | None = None
    beyond_largest: Number | None = None  # loss fits: the target over the largest fitted x

    @property
    def value(self) -> float | None:
        return self.lr if self.has("lr") else self.loss

    @property
    def estimate(self) -> EstimateValue:
        return EstimateValue(value=self.value, lo=self.lo, hi=self.hi)


class HoldoutCheck(Record):
    """Leave-largest-out: the fit without the largest x, its prediction there against the measured value."""

    x: Number | None = None
    actual: Number | None = None
    predicted: Number | None = None
    lo: Number | None = None  # the prediction interval for one observation
    hi: Number | None = None
    ci_lo: Number | None = None  # the curve's interval
    ci_hi: Number | None = None
    rel_error: Number | None = None
    interval: str | None = None
    fit_warnings: list[str] = Field(default_factory=list)
    within: bool | None = None


class CurveSection(Record):
    """A fitted law's dense curve (rows `[x, prediction, lo, hi]`), its fitted points and its predictions."""

    points: list[list[Number | None]] = Field(default_factory=list)  # [x, y] that were fitted
    curve: list[list[Number | None]] = Field(default_factory=list)
    targets: list[PredictionRow] = Field(default_factory=list)
    status: str | None = None  # ok | insufficient | ...
    n_points: Number | None = None
    dof: Number | None = None
    warnings: list[str] = Field(default_factory=list)
    trustworthy: bool | None = None

    def curve_rows(self) -> list[CurveRow]:
        """The curve's rows with an x > 0 and a prediction, as floats, sorted by x (a band edge may be None)."""
        rows = []
        for row in self.curve:
            if len(row) >= 2 and row[0] is not None and row[1] is not None and row[0] > 0:
                lo, hi = (row[2] if len(row) > 2 else None), (row[3] if len(row) > 3 else None)
                rows.append((float(row[0]), float(row[1]), None if lo is None else float(lo),
                             None if hi is None else float(hi)))
        return sorted(rows)  # type: ignore[type-var]

    def xy(self) -> list[tuple[float, float]]:
        """The fitted points (x, y) as floats, without any that lacks either."""
        return [(float(p[0]), float(p[1])) for p in self.points
                if len(p) >= 2 and p[0] is not None and p[1] is not None]

    @property
    def trusted(self) -> bool:
        """Trustworthy, or a document that does not say (no `trustworthy` key; null is not trusted)."""
        return bool(self.trustworthy) if self.has("trustworthy") else True


class PowerLawSection(CurveSection):
    """y = coef · x^exponent: the optimal-LR law (`lr_fit`, with its form) or a loss fit's plain log-log law."""

    coef: EstimateValue = Field(default_factory=EstimateValue)
    exponent: EstimateValue = Field(default_factory=EstimateValue)
    form: str | None = None


class LossFitSection(CurveSection):
    """L = E + A·x^(-α) for one method (`loss_fit`; also the compute fit, whose curve is left out)."""

    E: EstimateValue = Field(default_factory=EstimateValue)
    A: EstimateValue = Field(default_factory=EstimateValue)
    A_at_xref: EstimateValue = Field(default_factory=EstimateValue)
    alpha: EstimateValue = Field(default_factory=EstimateValue)
    loglog_slope: EstimateValue = Field(default_factory=EstimateValue)
    holdout: HoldoutCheck | None = None
    rss: Number | None = None
    x_ref: Number | None = None
    optimizer: dict[str, JsonValue] | None = None  # the optimiser's diagnostics (method, convergence, ...)
    loglog: PowerLawSection | None = None
    e_model: str | None = None  # "shared" when E is the one shared by every method


class ComputeExponent(EstimateValue):
    """α of L = E + A·C^(-α), with the log-log slope on compute."""

    loglog_slope: EstimateValue = Field(default_factory=EstimateValue)
    trustworthy: bool | None = None
    e_model: str | None = None


class Recipe(Record):
    """How a method's LR was chosen: at its optimum, or a fixed recipe's LRs (no LR law then)."""

    kind: str = "optimum"  # optimum | fixed
    lrs: list[Number] = Field(default_factory=list)


class MissingSeed(Record):
    """A seed of a size whose cell gave no usable optimum (stalled, diverged, edge, failed, not finished)."""

    seed: Number = 0
    cell_id: str | None = None
    status: str | None = None
    reason: str | None = None


class SizeRow(Record):
    """One size of a method as the fits saw it: mean over seeds, with the seeds' spread and SEs. `partial`:
    some seed of the size gave no usable optimum (`missing_seeds`); such a size is fitted only with
    `--allow-partial`. `weight`: its weight in the loss fit (inverse variance of its mean, `se_used`)."""

    size: str
    x: Number | None = None
    depth: Number | None = None
    params: Number | None = None
    params_nonembed: Number | None = None
    compute: Number | None = None
    tokens: Number | None = None
    loss: Number | None = None
    loss_seeds: list[Number | None] = Field(default_factory=list)
    loss_sd: Number | None = None
    loss_se: Number | None = None
    loss_eval_se: Number | None = None
    loss_se_seeds: list[Number | None] | None = None
    lr_opt: Number | None = None
    lr_opt_seeds: list[Number | None] = Field(default_factory=list)
    lr_source: list[str] = Field(default_factory=list)
    seeds: list[Number] = Field(default_factory=list)
    status: list[str] = Field(default_factory=list)
    cells: list[str] = Field(default_factory=list)
    partial: bool | None = None
    missing_seeds: list[MissingSeed] = Field(default_factory=list)
    weight: Number | None = None
    se_used: Number | None = None


class PartialSize(Record):
    """A partial size of a method (`SizeRow.partial`), listed whether or not it was fitted: the surviving
    seeds' mean, their losses, and the missing seeds."""

    method: str
    size: str
    x: Number | None = None
    loss: Number | None = None
    loss_seeds: list[Number | None] = Field(default_factory=list)
    seeds: list[Number] = Field(default_factory=list)
    missing_seeds: list[MissingSeed] = Field(default_factory=list)
    fitted: bool = False


class SensitivityRow(Record):
    """LR sensitivity of one size of a method (Wortsman), and its near-optimal LR range."""

    size: str
    x: Number | None = None
    value: Number | None = None
    value_seeds: list[Number | None] = Field(default_factory=list)
    value_common: Number | None = None
    near_opt_lo: Number | None = None
    near_opt_hi: Number | None = None
    near_opt_at_edge: bool = False
    best_loss: Number | None = None
    n_lrs: Number = 0  # finished points summed over seeds (an LR swept by two seeds counts twice)
    n_distinct_lrs: Number | None = None  # distinct learning rates over the seeds (None: a fits.json from before)
    n_diverged: Number = 0  # diverged points summed over seeds (before issue 33: diverged + stalled)
    n_stalled: Number | None = None  # stalled points summed over seeds (None: a fits.json from before)
    lr_min: Number | None = None
    lr_max: Number | None = None
    seeds: list[Number] = Field(default_factory=list)
    status: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class MethodSection(Record):
    """Every fit of one method. With `--shared-e` the independent fits stay under `*_independent`."""

    sizes: list[SizeRow] = Field(default_factory=list)
    recipe: Recipe = Field(default_factory=Recipe)
    loss_fit: LossFitSection = Field(default_factory=LossFitSection)
    lr_fit: PowerLawSection | None = None  # None for a fixed recipe (no optimum was searched)
    compute_exponent: ComputeExponent | None = None
    compute_fit: LossFitSection | None = None
    sensitivity: list[SensitivityRow] = Field(default_factory=list)
    loss_fit_independent: LossFitSection | None = None
    compute_fit_independent: LossFitSection | None = None


class RankRow(Record):
    """One method in the ranking by loss at the largest size every method reached."""

    method: str
    rank: Number | None = None
    loss_at_largest: Number | None = None
    x_at_largest: Number | None = None
    comparable: bool | None = None
    recipe: Recipe | None = None
    compute_exponent: Number | None = None
    compute_exponent_lo: Number | None = None
    compute_exponent_hi: Number | None = None
    compute_exponent_trustworthy: bool | None = None
    lowest_at_every_common_size: bool | None = None
    n_sizes: Number | None = None
    rank_by_compute_exponent: Number | None = None
    compute_exponent_e_model: str | None = None  # shared (the default for ranking) | per-method


class SharedEFit(Record):
    """One joint fit with a single E: E with its interval, the methods in it and those left out (why)."""

    E: EstimateValue = Field(default_factory=EstimateValue)
    dof: Number | None = None
    methods: list[str] = Field(default_factory=list)
    left_out: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


class SharedESection(Record):
    """`--shared-e`: the joint fit on the fit's axis (`loss`) and on compute, and its warnings."""

    warnings: list[str] = Field(default_factory=list)
    loss: SharedEFit | None = None
    compute: SharedEFit | None = None


class ExcludedCell(Record):
    cell_id: str
    reason: str


class FailedCell(Record):
    """A cell with no usable learning rate: every point diverged or stalled."""

    cell_id: str
    method: str
    size: str
    seed: Number = 0
    status: str
    n_diverged: Number = 0
    n_stalled: Number = 0


class InputsSection(Record):
    """What entered the fits: the selection rule, the LR source, and the cells left out (why)."""

    rule: str | None = None
    lr_source: str | None = None
    n_cells: Number | None = None
    excluded: list[ExcludedCell] = Field(default_factory=list)
    edge_included: list[str] = Field(default_factory=list)
    failed: list[FailedCell] = Field(default_factory=list)
    partial: list[PartialSize] = Field(default_factory=list)  # sizes some seed of which has no usable optimum
    allow_partial: bool | None = None  # were they fitted (--allow-partial)
    weights: str | None = None  # how the loss fits weigh the sizes


class OptionsSection(Record):
    """The bootstrap's options and the definitions of N and C the fits used."""

    resamples: Number | None = None
    seed: Number | None = None
    bootstrap: str | None = None
    level: Number | None = None
    n_def: str | None = None
    c_def: str | None = None
    weighted: bool | None = None  # sizes weighted by their seed variance (`inputs.weights` says how)
    bootstrap_levels: str | None = None  # the sizes alone, or the sizes then the seeds within each


class FitsDocument(Record):
    """`fits.json` (see the module docstring)."""

    version: Number | None = None
    created: Number | None = None
    elapsed_s: Number | None = None  # how long `sweeper fit` took
    sweep: str | None = None
    x: str | None = None  # the scale axis: depth | params | compute
    x_label: str | None = None
    n_definition: str | None = None
    c_definition: str | None = None
    e_model: str | None = None  # per-method | shared
    shared_e: SharedESection | None = None
    targets: list[Number] = Field(default_factory=list)
    inputs: InputsSection = Field(default_factory=InputsSection)
    options: OptionsSection = Field(default_factory=OptionsSection)
    methods: dict[str, MethodSection] = Field(default_factory=dict)
    ranking: list[RankRow] = Field(default_factory=list)
    ranking_note: str | None = None  # how the ranking's compute exponents were fitted (a shared E)
    warnings: list[str] = Field(default_factory=list)
    lr_law: LRLawSection | None = None  # `--lr-law X1,X2` (sweeper.analysis.fits.document_laws)
    holdout: HoldoutSection | None = None  # `--holdout largest`

    def ranked(self) -> list[RankRow]:
        """The ranking, first place first (rows without a rank last, in their order)."""
        return sorted(self.ranking, key=lambda r: r.rank or 0)

    def method(self, name: str) -> MethodSection | None:
        return self.methods.get(name)

    def for_methods(self, names: frozenset[str]) -> FitsDocument:
        """The document with only these methods' sections (a dashboard filter)."""
        return self.model_copy(update={"methods": {m: s for m, s in self.methods.items() if m in names}})


def load_fits(sweep_dir: str | os.PathLike[str]) -> FitsDocument | None:
    """The sweep's fits.json; None before the first `sweeper fit`; a UserError when it is damaged."""
    path = Path(sweep_dir) / FITS
    if not path.exists():
        return None
    try:
        return FitsDocument.from_json(json.loads(path.read_text()))
    except ValueError as exc:  # not JSON, or a DocumentError: not the document's shape
        raise UserError(f"{path}: unreadable fits ({exc}); rerun `sweeper fit {sweep_dir}`") from None


def write_fits(sweep_dir: str | os.PathLike[str], doc: FitsDocument) -> Path:
    """Write fits.json whole or not at all (`sweeper.records.durable`); returns its path."""
    path = Path(sweep_dir) / FITS
    write_json_atomic(path, doc.to_json())
    return path
