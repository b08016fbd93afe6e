"""What a sweep directory holds, reduced to one result per (method, size): the input of every fit.

Rules (stated in `sweeper fit`'s output and in fits.json's `inputs`):
- A cell contributes only when its status is `bracketed`: its best point has a finished
  neighbour on each side. `edge` cells (best at the edge of the swept grid, so the true
  optimum may lie beyond it) are **excluded** by default and listed with the reason;
  `include_edge=True` takes them in, each named in a warning, because their loss is only an
  upper bound and their LR a bound. Pending, running, all-diverged and all-stalled cells are
  excluded (a `diverged` or `stalled` cell found no usable learning rate: the method fails at
  that size; `SweepResults.failed` lists them for the figures).
- A cell's loss is its best objective among `ok` points; diverged, stalled (trained to the end
  at the loss of predicting by token frequencies) and failed points never enter a loss fit. Its optimal LR is the driver's interpolated optimum (parabola in log
  LR, `sweeper.search.bracketing.interpolate_optimum`, stored in cells.parquet) when available,
  otherwise the grid best (`lr_source="grid"` forces the grid best).
- A fixed-recipe cell (`lr: {fixed: X}`, status `fixed`) contributes its one point's objective as the
  loss *at the recipe*, and the recipe's LR with `lr_source="fixed"`: no optimum is claimed, so its
  method gets no LR law (`sweeper.analysis.fits.report`), and methods are ranked as comparable only at
  equal recipe. A method whose sizes mix fixed-recipe and bracketed cells keeps the bracketed ones (the
  fixed ones are excluded with the reason).
- **Partial sizes.** A (method, size) whose seeds did not all give a usable optimum (one seed's cell
  stalled, diverged, failed, at the grid's edge or not finished, while another's is bracketed) is
  *partial*: the surviving seeds' mean is not the size's mean (the failing seed is the regime a depth
  study is about), so it is **left out of the fits** unless `allow_partial=True`, and listed in
  `SweepResults.partial` either way, with each missing seed and why.
- Several seeds of one (method, size): the loss is the mean of the seeds' best objectives,
  the optimal LR the geometric mean; the seeds' spread is kept for the output, and so is each
  best point's standard error over the eval batches (`loss_se`).
- Sensitivity is computed per finished cell (bracketed, edge, diverged or stalled) from all its
  finished points except failed ones (a crash says nothing about the loss); a stalled point
  counts as diverged there.

Reads through `sweeper.records.store` only (polars); the fitting modules never touch the store.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sweeper.analysis.fits.sensitivity import Sensitivity, lr_sensitivity
from sweeper.core.errors import UserError
from sweeper.records.manifest import read_manifest
from sweeper.records.store import load_cells, load_points

XAxis = Literal["depth", "params", "compute"]
NDef = Literal["nonembed", "total"]
CDef = Literal["flops", "6nd"]

FITTABLE = ("bracketed", "fixed")
FINISHED_CELL = ("bracketed", "edge", "diverged", "stalled")
NO_OPTIMUM = ("diverged", "stalled")  # done, and every informative point diverged or stalled
WORSE_THAN_OK = ("diverged", "stalled")  # point states that count as worse than any ok point


@dataclass(frozen=True)
class Scale:
    """What a size is, in every unit a fit may use (from the store's point rows)."""

    depth: int | None
    params: int | None
    params_nonembed: int | None
    flops_per_token: float | None
    tokens: float | None  # tokens trained per point

    def n_value(self, n_def: NDef) -> float | None:
        v = self.params_nonembed if n_def == "nonembed" else self.params
        return float(v) if v else None

    def compute(self, c_def: CDef, n_def: NDef) -> float | None:
        if not self.tokens:
            return None
        if c_def == "flops":
            return self.flops_per_token * self.tokens if self.flops_per_token else None
        n = self.n_value(n_def)
        return 6.0 * n * self.tokens if n else None

    def x(self, axis: XAxis, n_def: NDef, c_def: CDef) -> float | None:
        if axis == "depth":
            return float(self.depth) if self.depth else None
        if axis == "params":
            return self.n_value(n_def)
        return self.compute(c_def, n_def)


def _scale(rows: list[dict[str, Any]]) -> Scale:
    first = rows[0]
    # Diverged points stop early: their token counts are not the planned budget.
    trained = [r for r in rows if r.get("state") == "ok"] or rows
    tokens = [float(r["tokens"]) for r in trained if r["tokens"]]
    along = first["loops"] if first.get("loops") is not None else first["depth"]  # a loop-count sweep: its loop count
    return Scale(
        depth=int(along) if along is not None else None,
        params=int(first["params"]) if first["params"] is not None else None,
        params_nonembed=int(first["params_nonembed"]) if first["params_nonembed"] is not None else None,
        flops_per_token=_f(first["flops_per_token"]),
        tokens=float(np.mean(tokens)) if tokens else None,
    )


@dataclass
class SizeResult:
    """One (method, size), averaged over its seeds' cells."""

    method: str
    size: str
    scale: Scale
    objective: float
    objective_seeds: list[float]
    lr_opt: float
    lr_opt_seeds: list[float]
    lr_sources: list[str]
    seeds: list[int]
    statuses: list[str]
    cell_ids: list[str]
    loss_se_seeds: list[float | None] = field(default_factory=list)  # each seed's best point: SE over the eval batches
    # seeds of this (method, size) in the sweep with no usable optimum: {"seed", "cell_id", "status", "reason"}
    missing: list[dict[str, Any]] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """Some seed of the size gave no usable optimum: its mean is over the survivors only."""
        return bool(self.missing)

    @property
    def fixed_recipe(self) -> bool:
        """Trained at a fixed recipe's LR (no search): its loss is the recipe's, `lr_opt` the recipe's LR."""
        return all(source == "fixed" for source in self.lr_sources)

    @property
    def objective_sd(self) -> float | None:
        """The seeds' spread: the standard deviation of their best objectives."""
        return float(np.std(self.objective_seeds, ddof=1)) if len(self.objective_seeds) > 1 else None

    @property
    def objective_se(self) -> float | None:
        """The standard error of the mean over seeds: from their spread with two or more seeds (it
        includes the evaluation noise), else the one seed's evaluation SE."""
        if len(self.objective_seeds) > 1:
            return float(np.std(self.objective_seeds, ddof=1) / math.sqrt(len(self.objective_seeds)))
        return self.loss_se_seeds[0] if self.loss_se_seeds else None

    @property
    def eval_se(self) -> float | None:
        """The evaluation noise alone of the seeds' mean: sqrt(sum of the best points' SE²) / n."""
        ses = [v for v in self.loss_se_seeds if v is not None]
        if not ses or len(ses) != len(self.objective_seeds):
            return None
        return float(math.sqrt(sum(v * v for v in ses)) / len(ses))


@dataclass
class CellSensitivity:
    cell_id: str
    method: str
    size: str
    seed: int
    status: str
    lrs: np.ndarray
    losses: np.ndarray
    diverged: np.ndarray
    init_loss: float | None
    scale: Scale
    result: Sensitivity


@dataclass
class SweepResults:
    name: str
    default_x: XAxis
    sizes: list[SizeResult]
    excluded: list[dict[str, str]] = field(default_factory=list)
    edge_included: list[str] = field(default_factory=list)
    cells: list[CellSensitivity] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)  # cells with no usable LR (diverged or stalled)
    n_cells: int = 0
    loops_axis: bool = False  # a loop-count sweep of the looped family: `Scale.depth` is the loop count
    # partial sizes (some seed without a usable optimum); in `sizes` too only with allow_partial
    partial: list[SizeResult] = field(default_factory=list)
    allow_partial: bool = False

    def methods(self) -> list[str]:
        return sorted({s.method for s in self.sizes} | {c.method for c in self.cells})


def _f(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def collect(
    sweep_dir: str | os.PathLike[str],
    *,
    include_edge: bool = False,
    lr_source: Literal["interp", "grid"] = "interp",
    allow_partial: bool = False,
) -> SweepResults:
    """The per-(method, size) results of a sweep; UserError when there is nothing to fit. A partial size
    (see the module's docstring) enters `sizes` only with `allow_partial`."""
    root = Path(sweep_dir)
    manifest = read_manifest(root)
    points = load_points(root)
    cells = load_cells(root)
    name = manifest.name_or(root)
    default_x: XAxis = "params" if manifest.x == "params" else "depth"
    if cells.height == 0:
        what = f"{points.height} points recorded" if points.height else "no points recorded"
        raise UserError(f"{root}: no finished cells yet (no cell snapshot in store/cells.parquet; {what}); "
                        "wait for the sweep to bracket a cell, or check it with `sweeper status`")

    by_cell: dict[str, list[dict[str, Any]]] = {}
    for row in points.iter_rows(named=True):
        by_cell.setdefault(row["cell_id"], []).append(row)

    fittable: list[dict[str, Any]] = []
    excluded: list[dict[str, str]] = []
    edge_included: list[str] = []
    sens: list[CellSensitivity] = []
    failed_cells: list[dict[str, Any]] = []
    for cell in cells.sort("cell_id").iter_rows(named=True):
        cid, status = cell["cell_id"], cell["status"]
        rows = by_cell.get(cid, [])
        finished = [r for r in rows if r["state"] in ("ok", *WORSE_THAN_OK)]
        ok = [r for r in finished if r["state"] == "ok" and _f(r["objective"]) is not None]
        if status in FINISHED_CELL and finished and any(
                r["state"] in WORSE_THAN_OK or _f(r["loss"]) is not None or _f(r["objective"]) is not None
                for r in finished):
            sens.append(_cell_sensitivity(cell, finished))
        if status in NO_OPTIMUM:
            failed_cells.append({"cell_id": cid, "method": cell["method"], "size": cell["size"],
                                 "seed": int(cell["seed"] or 0), "status": status,
                                 "n_diverged": sum(r["state"] == "diverged" for r in rows),
                                 "n_stalled": sum(r["state"] == "stalled" for r in rows)})
        if status == "edge" and not include_edge:
            excluded.append({"cell_id": cid, "reason": "edge: best LR at the edge of the swept grid "
                             "(optimum may lie beyond; --include-edge to fit it anyway)"})
            continue
        if status not in FITTABLE and status != "edge":
            reason = {"diverged": "every finished point diverged",
                      "stalled": "every finished point diverged or stalled (learned nothing beyond token frequencies)",
                      "failed": "every point failed (crashed)",
                      "pending": "not started", "running": "still running"}.get(status, f"status {status}")
            excluded.append({"cell_id": cid, "reason": reason})
            continue
        if not ok:
            excluded.append({"cell_id": cid, "reason": f"{status} but no ok point in the store"})
            continue
        best = min(ok, key=lambda r: (float(r["objective"]), float(r["lr"])))
        interp = _f(cell.get("interp_lr"))
        use_interp = lr_source == "interp" and status == "bracketed" and interp is not None and interp > 0
        if status == "edge":
            edge_included.append(cid)
        fittable.append({
            "cell": cell, "best": best, "objective": float(best["objective"]),
            "lr_opt": interp if use_interp else float(best["lr"]),
            "lr_source": "fixed" if status == "fixed" else "interp" if use_interp else "grid",
        })
    searched = {item["cell"]["method"] for item in fittable if item["lr_source"] != "fixed"}
    for item in [it for it in fittable if it["lr_source"] == "fixed" and it["cell"]["method"] in searched]:
        fittable.remove(item)
        excluded.append({"cell_id": item["cell"]["cell_id"], "reason": "fixed recipe among the method's searched "
                         "cells: a loss at one LR is not comparable with optima"})

    if not fittable:
        counts: dict[str, int] = {}
        for cell in cells.iter_rows(named=True):
            counts[cell["status"]] = counts.get(cell["status"], 0) + 1
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        hint = ""
        if counts.get("edge") and not include_edge:
            hint = "; rerun with --include-edge to fit edge cells anyway"
        elif counts.get("diverged") and len(counts) == 1:
            hint = "; every cell diverged: lower the LR range in the sweep's YAML"
        elif set(counts) <= set(NO_OPTIMUM):
            hint = "; no cell found a usable learning rate (every point diverged or stalled)"
        raise UserError(f"{root}: no bracketed cells to fit ({summary}){hint}")

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for item in fittable:
        groups.setdefault((item["cell"]["method"], item["cell"]["size"]), []).append(item)
    why = {e["cell_id"]: e["reason"] for e in excluded}
    every: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in cells.sort("cell_id").iter_rows(named=True):
        every.setdefault((cell["method"], cell["size"]), []).append(cell)
    sizes, partial = [], []
    for (method, size), items in sorted(groups.items()):
        used = {item["cell"]["cell_id"] for item in items}
        result = _size_result(method, size, items)
        result.missing = [{"seed": int(c["seed"] or 0), "cell_id": c["cell_id"], "status": c["status"],
                           "reason": why.get(c["cell_id"], str(c["status"]))}
                          for c in every.get((method, size), []) if c["cell_id"] not in used]
        if result.partial:
            partial.append(result)
            if not allow_partial:
                gone = ", ".join(f"s{m['seed']} {m['status']}" for m in result.missing)
                excluded += [{"cell_id": cid, "reason": f"partial size: {gone} (no usable optimum); the other seeds' "
                              "mean is not the size's (--allow-partial to fit it)"} for cid in result.cell_ids]
                continue
        sizes.append(result)
    if not sizes:
        raise UserError(f"{root}: every size with a usable optimum is partial (some seed without one: "
                        f"{', '.join(f'{p.method} {p.size}' for p in partial)}); --allow-partial fits the surviving "
                        "seeds' means")
    return SweepResults(name=name, default_x=default_x, sizes=sizes, excluded=excluded,
                        edge_included=edge_included, cells=sens, failed=failed_cells, n_cells=cells.height,
                        loops_axis=manifest.loop_axis, partial=partial, allow_partial=allow_partial)


def _size_result(method: str, size: str, items: list[dict[str, Any]]) -> SizeResult:
    items = sorted(items, key=lambda it: int(it["cell"]["seed"] or 0))
    best = [it["best"] for it in items]
    objectives = [it["objective"] for it in items]
    lrs = [it["lr_opt"] for it in items]
    return SizeResult(
        method=method,
        size=size,
        scale=_scale(best),
        objective=float(np.mean(objectives)),
        objective_seeds=objectives,
        lr_opt=float(np.exp(np.mean(np.log(lrs)))),
        lr_opt_seeds=lrs,
        lr_sources=[it["lr_source"] for it in items],
        seeds=[int(it["cell"]["seed"] or 0) for it in items],
        statuses=[str(it["cell"]["status"]) for it in items],
        cell_ids=[str(it["cell"]["cell_id"]) for it in items],
        loss_se_seeds=[_f(b.get("loss_se")) for b in best],
    )


def _cell_sensitivity(cell: dict[str, Any], finished: list[dict[str, Any]]) -> CellSensitivity:
    finished = [r for r in finished if r["state"] in WORSE_THAN_OK or _f(r["loss"]) is not None
                or _f(r["objective"]) is not None]
    lrs = np.array([float(r["lr"]) for r in finished])
    diverged = np.array([r["state"] in WORSE_THAN_OK for r in finished])
    losses = np.array([
        (_f(r["loss"]) if _f(r["loss"]) is not None else _f(r["objective"])) if r["state"] == "ok" else None
        for r in finished
    ], dtype=float)
    inits = [v for v in (_f(r["init_loss"]) for r in finished) if v is not None]
    init = float(np.median(inits)) if inits else None
    return CellSensitivity(
        cell_id=cell["cell_id"], method=cell["method"], size=cell["size"], seed=int(cell["seed"] or 0),
        status=cell["status"], lrs=lrs, losses=losses, diverged=diverged, init_loss=init, scale=_scale(finished),
        result=lr_sensitivity(lrs, losses, diverged, init),
    )
