"""Rebuild a sweep's results store from its ledger (`sweeper status DIR --repair`, and
`sweeper launch` on a damaged store).

The ledger (Optuna) is the record; the Parquet store is derived from it. Rebuilding moves
the old store aside (never deletes it), writes one point row per ledger point, keeps every
learning-curve chunk that still reads, and rewrites the cells snapshot from the points with
each cell's LR policy (from the latest YAML copy in the sweep directory), through the same
fold as every other reader (`sweeper.records.fold`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from sweeper.core.errors import UserError
from sweeper.records.fold import current_points, summarize
from sweeper.core.ids import cell_id, size_labels
from sweeper.records.ledger import Ledger
from sweeper.core.rows import CellFacts
from sweeper.records.storage_errors import as_user_error
from sweeper.records.store import StoreWriter, read_curve_chunk
from sweeper.core.grid import LRPolicy
from sweeper.spec.schema import load_sweep


def rebuild_store(sweep_dir: Path, ledger: Ledger, *, facts: Mapping[str, CellFacts] | None = None,
                  loop_axis: bool = False) -> Path:
    """Returns where the old store was moved. The ledger is read completely before anything is
    touched: an unreadable or empty ledger leaves the store where it is (rebuilding from it would
    replace every result with an empty table).

    `facts`: the planner's facts of the cells it knows (a launch), else the ledger's; `loop_axis`:
    a loop-count sweep (see `CellFacts.from_attrs`)."""
    store = sweep_dir / "store"
    try:
        cells = ledger.cells()
        entries = ledger.load(loop_axis=loop_axis)
    except Exception as exc:
        raise as_user_error(exc, ledger.url, what="the store was left as it is; nothing to rebuild from") from None
    if not entries and any(store.glob("points/*.parquet")):
        raise UserError(f"{ledger.url}: the ledger holds no points but the store has results; the ledger was "
                        "replaced or emptied, so the store was left as it is (restore the ledger from a backup)")
    known = dict(facts or {})
    cell_facts = {cid: known.get(cid) or CellFacts.from_attrs(cid, attrs, loop_axis=loop_axis)
                  for cid, attrs in cells.items()}
    rows = [entry.with_facts(cell_facts[entry.row.cell.cell_id]).row for entry in entries]
    rows.sort(key=lambda r: (r.finished_at or 0.0, r.point_id))
    moved = sweep_dir / f"store.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    if store.exists():
        shutil.move(str(store), moved)
    writer = StoreWriter(sweep_dir)
    writer.append_points(rows)
    salvaged = []
    curves_dir = moved / "curves"
    if curves_dir.is_dir():
        for path in sorted(curves_dir.glob("*.parquet")):
            try:  # the store's reader: a damaged chunk raises (checksums), it never aborts or reads wrong values
                salvaged.append(read_curve_chunk(path))
            except UserError:
                continue
    if salvaged:
        writer.append_curves(pl.concat(salvaged).to_dicts())
    writer.write_cells(summarize(cell_facts, current_points(rows), policies_from_yaml(sweep_dir), time.time()))
    return moved


def policies_from_yaml(sweep_dir: Path) -> dict[str, LRPolicy]:
    """Each cell's LR policy from the latest YAML copy in the sweep directory ({} if none reads)."""
    copies = sorted(sweep_dir.glob("sweep*.yaml"), key=lambda p: (len(p.name), p.name))
    if not copies:
        return {}
    try:
        cfg = load_sweep(copies[-1], need_data=False).config
    except Exception:
        return {}
    sizes = size_labels(depths=cfg.model.depths, loops=cfg.model.loops, sizes=[s.name for s in cfg.model.sizes or []])
    return {
        cell_id(m.name, size, seed): cfg.lr_for(m).to_policy()
        for m in cfg.methods for size in sizes for seed in cfg.seeds
    }
