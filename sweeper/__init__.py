"""The controller: the sweep file (`spec`), which points to train (`search`), running a sweep on
Ray Tune (`run`), what a sweep keeps (`records`), what is computed from it (`analysis`), the
experiment trackers it logs to (`tracking`), results from Python (`api`, through `sweeper.open`),
and the `sweeper` command line (`cli`, `commands`). Only `run` (and the commands that use it)
imports Ray; nothing here imports torch at module level.
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
