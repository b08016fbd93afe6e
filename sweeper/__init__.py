"""The controller, in layers (README's "Architecture"; a module imports only from its layer or those
below): the command line (`cli`, `commands`) on top; results from Python (`api`, through
`sweeper.open`) and the benchmark wing (`bench`); running a sweep on Ray Tune (`run`); the simulation
wing (`sim`); experiment trackers (`tracking`); what is computed from stored results (`analysis`);
what a sweep keeps (`records`); which points to train (`search`); the sweep file (`spec`); and the
leaves every layer reads (`core`: ids, states, rows, errors; `stats`). Only `run` (and the commands
and benchmarks that use it) imports Ray; outside the benchmark harnesses, nothing here imports torch at
module level.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    import os as _os

    from sweeper.api import Sweep


def open(path: "str | _os.PathLike[str]") -> "Sweep":  # noqa: A001 (`sweeper.open`, as `io.open`)
    """A sweep directory's results for Python (`sweeper.api.Sweep`: points, curves, cells, optima
    as polars frames, fits, figures)."""
    # polars loads on the first call, not with the package: `sweeper validate` starts without it.
    from sweeper.api import open_sweep

    return open_sweep(path)
