"""Read-side views of a sweep directory: the optimum of every cell and run progress.

Used by `sweeper status`, `sweeper optima` (and anything else that wants per-cell
optima): the stored rows go through the fold every reader shares (`sweeper.records.fold`),
and the grid best and interpolated optimum come from `sweeper.search.bracketing`, from the
points as stored, so every reader agrees with the driver. The best loss comes with its
standard error over the eval batches, and a bracket whose best point and a neighbour differ by
less than 2 SEs of their difference is flagged (`sweeper.records.noise`).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import polars as pl

from sweeper.records.edges import neighbour_fields
from sweeper.records.fold import current_points
from sweeper.records.noise import NOISE_SES, closest_neighbour
from sweeper.records.seed_noise import add_seed_noise
from sweeper.core.rows import CellFacts, PointRow, cell_order
from sweeper.core.states import PointState
from sweeper.records.manifest import read_manifest
from sweeper.records.store import load_cells, load_points
from sweeper.search.bracketing import interpolate_optimum


def optima(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One row per (method, size, seed) cell: status, grid best, interpolated optimum, counts."""
    sweep_dir = Path(sweep_dir)
    manifest = read_manifest(sweep_dir)
    points = current_points(PointRow.from_columns(row) for row in load_points(sweep_dir).iter_rows(named=True))
    cells = {row["cell_id"]: row for row in load_cells(sweep_dir).to_dicts()}
    rows = []
    losses: dict[str, dict[float, float]] = {}  # per cell, each ok point's final loss by LR (the seeds' noise)
    for cid in sorted(set(points) | set(cells)):
        pts = list(points.get(cid, {}).values())
        stored = cells.get(cid)  # the driver's latest row of the cell; before its first one, the manifest's entry
        entry = manifest.cells.get(cid)
        facts = (CellFacts.from_attrs(cid, stored) if stored is not None else
                 entry.facts(cid) if entry is not None else CellFacts.from_attrs(cid, {}))
        grid = [p.grid_point() for p in pts]
        losses[cid] = {p.lr: p.loss for p in pts if p.state is PointState.OK and p.loss is not None}
        stalled = [p.loss for p in pts if p.state is PointState.STALLED and p.loss is not None]
        ok = [g for g in grid if g.is_ok]
        best = min(ok, key=lambda g: (g.objective, g.lr)) if ok else None
        best_row = next((p for p in pts if best is not None and p.lr == best.lr), None)
        interp = interpolate_optimum(grid)
        gap = closest_neighbour(pts, best_row) if best_row is not None else None
        row = {
            "cell_id": cid,
            "method": facts.method,
            "size": facts.size,
            "seed": facts.seed,
            "depth": facts.depth,
            "params": facts.params,
            "status": (stored or {}).get("status") or ("running" if pts else "pending"),
            "best_lr": best.lr if best else None,
            "best_loss": best_row.loss if best_row else None,
            "best_loss_se": best_row.loss_se if best_row else None,  # the evaluation SE of the best point
            # the best point against its nearest ok neighbour (in SEs of their difference)
            "neighbour_lr": gap.neighbour_lr if gap else None,
            "neighbour_gap": gap.difference if gap else None,
            "neighbour_gap_se": gap.se if gap else None,
            "neighbour_gap_paired": gap.paired if gap else None,
            "within_noise": gap.within_noise if gap else None,
            "best_objective": best.objective if best else None,
            "interp_lr": interp[0] if interp else None,
            "interp_objective": interp[1] if interp else None,
            "n_points": sum(p.state.is_finished for p in pts),
            "n_diverged": sum(p.state is PointState.DIVERGED for p in pts),
            "n_stalled": sum(p.state is PointState.STALLED for p in pts),
            "n_failed": sum(p.state is PointState.FAILED for p in pts),
            "n_infra_failed": sum(p.state is PointState.INFRA_FAILED for p in pts),
            "n_running": sum(p.state.is_active for p in pts),
            # the best point's other final numbers: LAMBADA (eval.tasks), and a looped model's loss per loop count
            "best_lambada_ppl": best_row.lambada_ppl if best_row else None,
            "best_loop_losses": best_row.loop_losses if best_row else None,  # a JSON map {"count": loss}
            # a cell with no ok point keeps its stalled points' lowest loss (never an optimum: marked stalled)
            "stalled_loss": min(stalled) if stalled and best_row is None else None,
        }
        row.update(neighbour_fields([p for p in pts if p.state.is_finished], best_row))  # edge side, gaps
        rows.append((cell_order({**row, "loops": facts.loops}), row))
    out = [row for _, row in sorted(rows, key=lambda item: item[0])]
    add_seed_noise(out, losses)
    return out


def lambada_by_size(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Per (method, size), over the seeds whose best point has one: the LAMBADA perplexity of the best point
    (geometric mean over seeds: exp of the mean per-word NLL) beside its loss (arithmetic mean), in the order
    the tables list cells. Empty when the sweep recorded no LAMBADA perplexity."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in optima(sweep_dir):  # already in table order
        if row.get("best_lambada_ppl") is not None and row.get("best_loss") is not None:
            groups.setdefault((row["method"], row["size"]), []).append(row)
    out = []
    for (method, size), rows in groups.items():
        out.append({
            "method": method, "size": size, "params": rows[0].get("params"), "seeds": [r["seed"] for r in rows],
            "loss": sum(r["best_loss"] for r in rows) / len(rows),
            "lambada_ppl": math.exp(sum(math.log(r["best_lambada_ppl"]) for r in rows) / len(rows)),
        })
    return out


def noise_note() -> str:
    return (f"within noise: the best point and a neighbour differ by less than {NOISE_SES:g} times the noise of "
            "their difference: the seeds' sd of that difference (noise: seeds, where two or more seeds trained "
            "both LRs), else its paired evaluation SE (noise: eval, over the same eval batches); the optimum is "
            "uncertain by a grid step")


def cell_rows(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """The cells as the driver last wrote them, with the fields `optima` adds (best_loss, n_failed, ...)
    under the same names: what `sweeper status --json` prints and `sweeper.open(DIR).cells()` returns."""
    rows = load_cells(sweep_dir).to_dicts()
    by_id = {row["cell_id"]: row for row in optima(sweep_dir)}
    for row in rows:
        row.update({k: v for k, v in by_id.get(row["cell_id"], {}).items() if k not in row})
    return rows


def points_per_bracketed_cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Average finished points per bracketed cell, overall and per method (what a prior saves)."""
    out: dict[str, Any] = {}
    bracketed = [r for r in rows if r["status"] == "bracketed"]
    out["all"] = sum(r["n_points"] for r in bracketed) / len(bracketed) if bracketed else None
    out["bracketed_cells"] = len(bracketed)
    out["by_method"] = {}
    for method in sorted({r["method"] for r in bracketed}):
        mine = [r for r in bracketed if r["method"] == method]
        out["by_method"][method] = sum(r["n_points"] for r in mine) / len(mine)
    return out


def progress(sweep_dir: str | Path) -> dict[str, str]:
    """'step 120/300 ×5' for cells with running points, from the store."""
    sweep_dir = Path(sweep_dir)
    entries = read_manifest(sweep_dir).cells
    points = load_points(sweep_dir)
    if not points.height:
        return {}
    running = points.filter(pl.col("state") == PointState.RUNNING.value)
    out = {}
    for row in running.group_by("cell_id").agg(pl.col("steps").max(), pl.len().alias("n")).to_dicts():
        entry = entries.get(row["cell_id"])
        total = entry.steps if entry is not None else None
        out[row["cell_id"]] = f"step {row['steps'] or 0}/{total or '?'} ×{row['n']}"
    return out


def stall_baselines(sweep_dir: str | Path) -> list[float]:
    """The frequency-only losses the finished points were judged against (`unigram_loss`: predicting by training
    frequencies on the point's own eval batches), distinct to 4 decimals; empty before the first result."""
    points = load_points(sweep_dir)
    if not points.height or "unigram_loss" not in points.columns:
        return []
    values = points["unigram_loss"].drop_nulls().to_list()
    return sorted({round(float(v), 4) for v in values if math.isfinite(v)})


def freshness(sweep_dir: str | Path) -> float | None:
    """Seconds since the driver last wrote the cells snapshot."""
    cells = load_cells(sweep_dir)
    if not cells.height:
        return None
    last = cells["updated_at"].max()
    return time.time() - float(last) if last is not None else None
