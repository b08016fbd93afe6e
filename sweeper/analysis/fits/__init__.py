"""Power-law fits of sweep results: loss against scale, optimal LR against size, LR sensitivity.

Pure numpy/scipy (neither Ray nor torch). The pure statistics under them (`Estimate`, the log-log power
law, the LR law `LR* = c·x^b` and `predict_optimal_lr`) are `sweeper.stats`, which the planner's prior
uses too. Modules:
- `powerlaw`: `L = E + A·x^(-α)` by α scan + non-negative least squares, log-log slope, bootstrap intervals;
- `shared`: the same form with one E shared across methods;
- `sensitivity`: Wortsman LR sensitivity and the near-optimal LR range of a cell;
- `collect`: the per-(method, size) results of a sweep directory, read through `sweeper.records.store`;
- `report`: everything above assembled into the `fits.json` document;
- `document`: that document's type, `FitsDocument`, and fits.json's only reader and writer (`load_fits`,
  `write_fits`), which `sweeper fit`, the dashboards and `sweeper.open` share.

The names below load on first use (PEP 562), so that `sweeper.analysis.fits.units` and friends import
without scipy: the CLI's argument errors must answer in well under a second.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LossFit": "sweeper.analysis.fits.powerlaw",
    "fit_loss_curve": "sweeper.analysis.fits.powerlaw",
    "Sensitivity": "sweeper.analysis.fits.sensitivity",
    "lr_sensitivity": "sweeper.analysis.fits.sensitivity",
    "parse_size": "sweeper.analysis.fits.units",
}

__all__ = [
    "LossFit",
    "Sensitivity",
    "fit_loss_curve",
    "lr_sensitivity",
    "parse_size",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sweeper.analysis.fits' has no attribute {name!r}")
