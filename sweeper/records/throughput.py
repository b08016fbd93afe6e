"""What a sweep directory already holds, for a plan of it (`sweeper launch --dry-run` on an existing directory):
each cell's status, and the training rate its trials measured.

A trial trains a stack of points (one per learning rate) at once, and every member's row carries the trial's
training seconds: a trial's time is its members' largest `train_seconds`, its work the sum of its members'
`flops_per_token × tokens`. The measured rate of a (method, size) is its trials' work over their time (FLOP/s per
trial, on the trial's own resources), the number the plan's `--cpu-throughput` / `--throughput` assume otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.core.states import CellStatus, PointState
from sweeper.records.manifest import is_sweep_dir
from sweeper.records.store import load_cells, load_points

FINISHED = tuple(s.value for s in PointState if s.is_finished)


@dataclass(frozen=True)
class Rate:
    """Training FLOP/s per trial, measured over `trials` trials of `seconds` training in all."""

    flops_per_s: float
    trials: int
    seconds: float


@dataclass(frozen=True)
class SweepState:
    """A sweep directory's cells (id → status) and measured rates by (method, size) and by method."""

    statuses: dict[str, str]
    rates: dict[tuple[str, str], Rate]
    method_rates: dict[str, Rate]
    points: int  # finished points

    def done(self, cell_id: str) -> bool:
        """Finished for a launch: a status other than pending, running or infra_failed (retried by a launch)."""
        status = self.statuses.get(cell_id)
        return status is not None and CellStatus(status).is_done and status != CellStatus.INFRA_FAILED

    def rate_for(self, method: str, size: str) -> tuple[Rate, str] | None:
        """The measured rate of this (method, size), else of the method's other sizes (a new size), with which."""
        if (method, size) in self.rates:
            return self.rates[(method, size)], "this size"
        if method in self.method_rates:
            return self.method_rates[method], "the method's other sizes"
        return None


def sweep_state(sweep_dir: str | Path) -> SweepState | None:
    """The directory's cells and measured rates; None when it is not a sweep directory or holds no results."""
    root = Path(sweep_dir)
    if not is_sweep_dir(root):
        return None
    cells = load_cells(root)
    points = load_points(root)
    if not cells.height and not points.height:
        return None
    statuses = {str(r["cell_id"]): str(r["status"]) for r in cells.select("cell_id", "status").iter_rows(named=True)}
    trials: dict[str, tuple[str, str, float, float]] = {}  # trial id → (method, size, FLOPs, seconds)
    n_points = 0
    if points.height:
        wanted = [c for c in ("trial_id", "method", "size", "state", "tokens", "flops_per_token", "train_seconds",
                              "cell_id", "lr") if c in points.columns]
        latest = points.select(wanted).unique(subset=["cell_id", "lr"], keep="last", maintain_order=True)
        for row in latest.iter_rows(named=True):
            if row.get("state") not in FINISHED:
                continue
            n_points += 1
            tid, fpt, tokens = row.get("trial_id"), row.get("flops_per_token"), row.get("tokens")
            seconds = row.get("train_seconds") or 0.0
            if not tid or not fpt or not tokens or seconds <= 0:
                continue
            method, size, flops, longest = trials.get(tid, (str(row["method"]), str(row["size"]), 0.0, 0.0))
            trials[tid] = (method, size, flops + float(fpt) * float(tokens), max(longest, float(seconds)))
    return SweepState(statuses, _rates(trials, by_method=False), _rates(trials, by_method=True), n_points)  # type: ignore[arg-type]


def _rates(trials: dict[str, tuple[str, str, float, float]], *, by_method: bool) -> dict[object, Rate]:
    sums: dict[object, tuple[float, float, int]] = {}
    for method, size, flops, seconds in trials.values():
        key = method if by_method else (method, size)
        f, s, n = sums.get(key, (0.0, 0.0, 0))
        sums[key] = (f + flops, s + seconds, n + 1)
    return {k: Rate(f / s, n, s) for k, (f, s, n) in sums.items() if s > 0}
