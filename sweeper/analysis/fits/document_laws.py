"""fits.json's sections for recorded and two-variable questions (`sweeper fit --lr-law X1,X2`,
`sweeper fit --holdout largest`), kept apart from `sweeper.analysis.fits.document` so that each grows
on its own; `FitsDocument` holds them as `lr_law` and `holdout` (absent unless asked for).

`LRLawSection`: `log η* = c + a·log X1 + b·log X2` over the cells' optima (`exponents`: per variable its
value and 95% interval `ci`), and, where the cells hold near-optimal bands, the same law over every run
within 0.25% of its cell's best (`near_optimal`); `choice` says which is the headline and why.

`HoldoutSection`: per method, the largest size left out and predicted from the smaller ones (optimal LR
and loss), each with its 95% *prediction* interval (where that size's own optimum or loss will lie: the
law's uncertainty plus the scatter of sizes about it), the recorded value, and whether it falls inside.
"""

from __future__ import annotations

from pydantic import Field

from sweeper.records.document import Number, Record


class ExponentValue(Record):
    """One exponent of a two-variable law: the fitted value and its 95% bootstrap interval [lo, hi]."""

    value: Number | None = None
    ci: list[Number | None] = Field(default_factory=list)


class TwoVariableFit(Record):
    """The law over one set of rows (the cells' optima, or their near-optimal bands)."""

    over: str | None = None  # "optima" or "near-optimal band (within 0.25%)"
    exponents: dict[str, ExponentValue] = Field(default_factory=dict)
    intercept: Number | None = None  # c: η* = exp(c)·X1^a·X2^b
    intercept_ci: list[Number | None] = Field(default_factory=list)
    coefficient: Number | None = None  # exp(c)
    n_cells: Number | None = None
    n_rows: Number | None = None
    residual_sd: Number | None = None  # of log η* about the plane
    correlation: Number | None = None  # of log X1 and log X2 over the rows
    condition: Number | None = None
    skipped_resamples: Number | None = None
    warnings: list[str] = Field(default_factory=list)


class LRLawSection(TwoVariableFit):
    """`--lr-law X1,X2` (see the module docstring)."""

    variables: dict[str, str] = Field(default_factory=dict)  # name -> what it is (a column, params, tokens)
    lr_source: str | None = None
    bootstrap: str | None = None
    resamples: Number | None = None
    choice: str | None = None
    near_optimal: TwoVariableFit | None = None
    refused: str | None = None  # why no two-variable law (collinear variables, too few cells)


class HoldoutValue(Record):
    """One predicted quantity at the held-out size."""

    predicted: Number | None = None
    lo: Number | None = None
    hi: Number | None = None
    recorded: Number | None = None
    inside: bool | None = None  # the recorded value within [lo, hi]; null without an interval
    n_fitted: Number | None = None
    form: str | None = None  # which law predicted it
    note: str | None = None


class HoldoutRow(Record):
    method: str
    size: str | None = None
    x: Number | None = None
    fitted_sizes: list[str] = Field(default_factory=list)
    lr: HoldoutValue | None = None
    loss: HoldoutValue | None = None


class HoldoutSection(Record):
    """`--holdout largest` (see the module docstring)."""

    which: str | None = None
    interval: str | None = None
    rows: list[HoldoutRow] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)  # method -> why no forecast
