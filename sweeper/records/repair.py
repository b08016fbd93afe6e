"""Rebuild a sweep's results store from its ledger (`sweeper status DIR --repair`).

The ledger (Optuna) is the record; the Parquet store is derived from it. Rebuilding moves
the old store aside (never deletes it), writes one point row per ledger point, keeps every
learning-curve chunk that still reads, and rewrites the cells snapshot from the points.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import polars as pl

from sweeper.errors import UserError
from sweeper.records.store import CURVES_SCHEMA, StoreWriter, _read_chunks


def rebuild_store(sweep_dir: Path, ledger: Any) -> Path:
    """Returns where the old store was moved. The ledger is read completely before anything is
    touched: an unreadable or empty ledger leaves the store where it is (rebuilding from it would
    replace every result with an empty table)."""
    from sweeper.records.storage_errors import as_user_error

    store = sweep_dir / "store"
    try:
        cells = ledger.cells()
        ledger_points = ledger.load()
    except Exception as exc:
        raise as_user_error(exc, ledger.url, what="the store was left as it is; nothing to rebuild from") from None
    if not any(ledger_points.values()) and any(store.glob("points/*.parquet")):
        raise UserError(f"{ledger.url}: the ledger holds no points but the store has results; the ledger was "
                        "replaced or emptied, so the store was left as it is (restore the ledger from a backup)")
    moved = sweep_dir / f"store.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    if store.exists():
        shutil.move(str(store), moved)
    writer = StoreWriter(sweep_dir)
    rows = []
    for cid, points in ledger_points.items():
        attrs = cells.get(cid, {})
        for p in points:
            m = p.metrics
            rows.append({
                "point_id": p.point_id, "cell_id": cid, "method": attrs.get("method"), "family": attrs.get("family"),
                "size": attrs.get("size"), "depth": attrs.get("depth"), "width": attrs.get("width"),
                "seed": attrs.get("seed"), "params": attrs.get("params"),
                "params_nonembed": attrs.get("params_nonembed"), "flops_per_token": attrs.get("flops_per_token"),
                "lr": p.lr, "state": p.state, "objective": p.objective if p.state == "ok" else None,
                "loss": m.get("loss"), "accuracy": m.get("accuracy"), "init_loss": m.get("init_loss"),
                "diverged_step": m.get("diverged_step"), "reason": m.get("reason"), "steps": m.get("steps"),
                "tokens": m.get("tokens"), "train_seconds": m.get("train_seconds"), "trial_id": p.tune_trial_id,
                "attempt": p.attempt, "started_at": m.get("started_at"), "finished_at": m.get("finished_at"),
                "corpus": m.get("corpus"),
            })
    rows.sort(key=lambda r: (r["finished_at"] or 0.0, r["point_id"]))
    writer.append_points(rows)
    salvaged = []
    curves_dir = moved / "curves"
    if curves_dir.is_dir():
        for path in sorted(curves_dir.glob("*.parquet")):
            try:  # the store's reader: a damaged chunk raises (checksums), it never aborts or reads wrong values
                salvaged.append(_read_chunks([path], CURVES_SCHEMA))
            except UserError:
                continue
    if salvaged:
        writer.append_curves(pl.concat(salvaged).to_dicts())
    writer.write_cells(cell_rows_from_points(rows, cells, policies_from_yaml(sweep_dir)))
    return moved


def policies_from_yaml(sweep_dir: Path) -> dict[str, Any]:
    """Each cell's LR policy from the latest YAML copy in the sweep directory ({} if none reads)."""
    from sweeper.spec.schema import load_sweep

    copies = sorted(sweep_dir.glob("sweep*.yaml"), key=lambda p: (len(p.name), p.name))
    if not copies:
        return {}
    try:
        cfg = load_sweep(copies[-1]).config
    except Exception:
        return {}
    sizes = [f"L{d}" for d in cfg.model.depths] if cfg.model.depths else [s.name for s in cfg.model.sizes or []]
    return {
        f"{m.name}/{size}/s{seed}": cfg.lr_for(m).to_policy()
        for m in cfg.methods for size in sizes for seed in cfg.seeds
    }


def cell_rows_from_points(rows: list[dict[str, Any]], cells: dict[str, dict[str, Any]],
                          policies: dict[str, Any]) -> list[dict[str, Any]]:
    """Cell snapshot rows re-derived from point rows with the bracketing policy."""
    from sweeper.search.bracketing import GridPoint, LRPolicy, decide

    by_cell: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_cell.setdefault(row["cell_id"], []).append(row)
    out = []
    now = time.time()
    for cid, attrs in cells.items():
        points = by_cell.get(cid, [])
        grid = [GridPoint(r["lr"], r["state"], r["objective"]) for r in points]
        d = decide(grid, policies.get(cid) or LRPolicy(lo=1e-12, hi=1e3, max_points=10_000))
        status = d.status if d.done else ("running" if points else "pending")
        out.append({
            "cell_id": cid, "method": attrs.get("method"), "family": attrs.get("family"), "size": attrs.get("size"),
            "depth": attrs.get("depth"), "width": attrs.get("width"), "seed": attrs.get("seed"),
            "params": attrs.get("params"), "status": status,
            "n_points": sum(r["state"] in ("ok", "diverged", "failed") for r in points),
            "n_running": sum(r["state"] in ("queued", "running") for r in points),
            "n_diverged": sum(r["state"] == "diverged" for r in points),
            "best_lr": d.best.lr if d.best else None, "best_objective": d.best.objective if d.best else None,
            "interp_lr": d.interp_lr, "interp_objective": d.interp_objective, "updated_at": now,
        })
    return out
