"""Two methods of a sweep compared seed by seed: the lead of B over A at every size, with a Student-t interval.

The lead at one (size, seed) is `objective(A) - objective(B)`: positive when B is better. Each cell's objective
is its **grid-best** measured loss (`best_objective` of `sweeper optima`: the evaluation loss of a language
model, the error of the ViT), not the interpolated parabola's value, which is a model and undershoots every
measured point beside a divergence cliff; the fits use the same number. Pairing by seed removes what the two
cells of a seed share (the data order and initialisation seed, and the held-out batches, common to every point),
so the leads' spread across seeds is the noise of a lead.

Per size: the mean lead over the seeds where both cells have a usable optimum, and a 95% Student-t interval
`mean ± t(0.975, n-1)·sd/√n` with `n - 1` degrees of freedom (n seeds). It is *significant* when the interval
excludes 0. With one seed there is no interval (0 degrees of freedom) and no significance claim. A seed where
either cell has no usable optimum (diverged, stalled, failed, still running, or at the grid's edge unless
`include_edge`) is left out and named with the reason.

Reads the rows of `sweeper.records.results.optima`, so its numbers are `sweeper optima`'s.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from scipy import stats

from sweeper.core.errors import UserError
from sweeper.records.manifest import read_manifest
from sweeper.records.results import optima

USABLE = ("bracketed", "fixed")  # cells with an optimum (a fixed recipe: the loss at the recipe)
LEVEL = 0.95

CompareX = Literal["depth", "params"]


@dataclass(frozen=True)
class SeedLead:
    seed: int
    lead: float  # objective(A) - objective(B)
    a: float
    b: float


@dataclass(frozen=True)
class Missing:
    seed: int
    reason: str


@dataclass(frozen=True)
class SizeComparison:
    """The lead of B over A at one size."""

    size: str
    x_a: float | None
    x_b: float | None
    per_seed: tuple[SeedLead, ...]
    missing: tuple[Missing, ...] = field(default_factory=tuple)

    @property
    def n_seeds(self) -> int:
        return len(self.per_seed)

    @property
    def df(self) -> int:
        return max(self.n_seeds - 1, 0)

    @property
    def mean(self) -> float | None:
        return sum(s.lead for s in self.per_seed) / self.n_seeds if self.per_seed else None

    @property
    def sd(self) -> float | None:
        """The seeds' spread of the leads (None below 2 seeds)."""
        if self.n_seeds < 2:
            return None
        m = self.mean
        assert m is not None
        return math.sqrt(sum((s.lead - m) ** 2 for s in self.per_seed) / (self.n_seeds - 1))

    @property
    def ci(self) -> tuple[float, float] | None:
        """The 95% Student-t interval of the mean lead (None below 2 seeds: no interval exists)."""
        if self.n_seeds < 2:
            return None
        m, sd = self.mean, self.sd
        assert m is not None and sd is not None
        half = float(stats.t.ppf(0.5 + LEVEL / 2, self.df)) * sd / math.sqrt(self.n_seeds)
        return (m - half, m + half)

    @property
    def significant(self) -> bool | None:
        """The interval excludes 0 (None without an interval: no claim)."""
        ci = self.ci
        return None if ci is None else bool(ci[0] > 0 or ci[1] < 0)

    def to_json(self, x: CompareX) -> dict[str, Any]:
        return {
            "size": self.size, "x": self.x_a if self.x_a == self.x_b else None, "x_axis": x,
            "x_a": self.x_a, "x_b": self.x_b,
            "per_seed": [{"seed": s.seed, "lead": s.lead, "a": s.a, "b": s.b} for s in self.per_seed],
            "mean": self.mean, "sd": self.sd, "ci": list(self.ci) if self.ci else None, "df": self.df,
            "significant": self.significant, "n_seeds": self.n_seeds,
            "missing_seeds": [m.seed for m in self.missing],
            "missing": [{"seed": m.seed, "reason": m.reason} for m in self.missing],
        }


@dataclass(frozen=True)
class Comparison:
    """Every size's lead of `b` over `a` (`sweeper compare`)."""

    a: str
    b: str
    x: CompareX
    sizes: tuple[SizeComparison, ...]
    include_edge: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "x": self.x, "lead": "objective(a) - objective(b), grid best",
                "level": LEVEL, "include_edge": self.include_edge,
                "comparisons": [s.to_json(self.x) for s in self.sizes]}


def compare_rows(rows: list[dict[str, Any]], a: str, b: str, *, x: CompareX = "depth",
                 include_edge: bool = False, where: str = "the sweep") -> Comparison:
    """The comparison from `optima`'s rows; UserError for an unknown or repeated method."""
    methods = sorted({str(r["method"]) for r in rows})
    for m in (a, b):
        if m not in methods:
            raise UserError(f"--methods: no method {m!r} in {where}; its methods are {', '.join(methods) or 'none'}")
    if a == b:
        raise UserError(f"--methods: compare two different methods (got {a!r} twice)")
    usable = (*USABLE, "edge") if include_edge else USABLE
    by_cell = {(str(r["method"]), str(r["size"]), int(r["seed"] or 0)): r for r in rows if r["method"] in (a, b)}
    sizes: dict[str, list[int]] = {}
    for (_, size, seed) in by_cell:
        sizes.setdefault(size, []).append(seed)
    out = []
    for size in sizes:
        leads, missing = [], []
        for seed in sorted(set(sizes[size])):
            ra, rb = by_cell.get((a, size, seed)), by_cell.get((b, size, seed))
            why = [_why(m, r, usable) for m, r in ((a, ra), (b, rb))]
            reasons = [w for w in why if w]
            if reasons:
                missing.append(Missing(seed, "; ".join(reasons)))
                continue
            assert ra is not None and rb is not None
            va, vb = float(ra["best_objective"]), float(rb["best_objective"])
            leads.append(SeedLead(seed, va - vb, va, vb))
        ra0 = next((r for (m, s, _), r in sorted(by_cell.items()) if m == a and s == size), None)
        rb0 = next((r for (m, s, _), r in sorted(by_cell.items()) if m == b and s == size), None)
        out.append(SizeComparison(size, _x(ra0, x), _x(rb0, x), tuple(leads), tuple(missing)))
    out.sort(key=lambda c: (c.x_a if c.x_a is not None else c.x_b if c.x_b is not None else math.inf, c.size))
    return Comparison(a, b, x, tuple(out), include_edge)


def compare(sweep_dir: str | os.PathLike[str], a: str, b: str, *, x: CompareX | None = None,
            include_edge: bool = False) -> Comparison:
    """The lead of method `b` over method `a` at every size of the sweep in `sweep_dir`."""
    manifest = read_manifest(sweep_dir)  # a UserError when the directory is not a sweep
    axis: CompareX = x or ("params" if manifest.x == "params" else "depth")
    return compare_rows(optima(sweep_dir), a, b, x=axis, include_edge=include_edge, where=str(sweep_dir))


def _why(method: str, row: dict[str, Any] | None, usable: tuple[str, ...]) -> str | None:
    if row is None:
        return f"{method}: no cell"
    status = str(row["status"])
    if status not in usable:
        what = "at the grid's edge (--include-edge to use it)" if status == "edge" else status
        return f"{method}: {what}"
    if row.get("best_objective") is None:
        return f"{method}: no ok point"
    return None


def _x(row: dict[str, Any] | None, x: CompareX) -> float | None:
    if row is None or row.get(x) is None:
        return None
    return float(row[x])
