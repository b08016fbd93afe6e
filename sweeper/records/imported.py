"""`sweeper import`: a table of recorded runs (CSV or Parquet) as a sweep directory every reader reads.

The table is read and checked by the replay command's reader (`sweeper.search.replay.table_from_frame`:
missing columns, non-numeric values, duplicate learning rates name the row). Each group of the `--group`
columns becomes one cell (`<method>/<size>/s0`), each recorded learning rate one point, written with the
store's own writer (`StoreWriter`): the readers fold the store as they fold a trained sweep's.

What an imported directory holds, and what it does not:
- `manifest.json` with an `imported` entry (`ImportedEntry`: the table's path and SHA-256, the columns,
  the rules, the date, each cell's group values) and `x: params` (the size column's values are the
  cells' `params`: the fits' x axis);
- `store/points` (one `ok` or `diverged` row per point) and `store/cells.parquet`;
- no ledger, no sweep.yaml, no weights: nothing can be relaunched (`sweeper launch` refuses), repaired
  from a ledger (`status --repair` refuses) or mixed with trained results.

A cell's status is decided by `decide` with bounds at the cell's lowest and highest recorded LR and no
refinement: `bracketed` when the best run has a recorded neighbour on each side (a diverged one counts as
worse), `edge` when it is the lowest or highest LR tried, `diverged` when every run diverged. A recorded
sweep is over: no cell is ever `running`.

Divergence: a NaN or infinite loss is a diverged run; so is a loss above `diverged_above` when given
(none by default: a table rarely records the loss at initialisation, so only non-finite losses are
diverged unless told).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import re
import time
from importlib.metadata import PackageNotFoundError, version
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.core.errors import UserError
from sweeper.core.grid import LRPolicy
from sweeper.core.ids import CellId
from sweeper.core.rows import CellFacts, CellRow, PointRow
from sweeper.core.states import PointState
from sweeper.records.fold import decision_of
from sweeper.records.manifest import STORE_VERSION, CellEntry, ImportedEntry, Manifest, write_manifest
from sweeper.records.store import StoreWriter
from sweeper.search.recorded import RecordedGroup, RecordedTable
from sweeper.search.replay import grid_ratio, read_frame, table_from_frame

SEED = 0
METHOD_JOIN = "+"  # between a method's `col=value` parts: not ",", which `compare --methods A,B` splits on
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)


def size_number(value: Any) -> float | None:
    """A size as a number: 214663680, 2.1e8, '130m', '1.2B' (k, M, B or G, T suffixes); None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) and value > 0 else None
    match = _SIZE.match(str(value))
    if match is None:
        return None
    number = float(match.group(1)) * _SUFFIX.get(match.group(2).lower(), 1.0)
    return number if math.isfinite(number) and number > 0 else None


@dataclass(frozen=True)
class ImportSummary:
    out: Path
    cells: int
    points: int
    diverged: int
    statuses: dict[str, int]
    size_column: str | None
    merged: int
    dropped: int


def choose_size_column(table: RecordedTable, size_column: str | None) -> str | None:
    """`--size-column` when given (it must be a group column with a size in every group), else the
    first group column whose every value reads as a size (`size_number`); None when none does."""
    columns = table.group_columns
    if size_column is not None:
        if size_column not in columns:
            raise UserError(f"--size-column {size_column}: not one of the --group columns ({', '.join(columns)})")
        bad = [g.key[size_column] for g in table.groups if size_number(g.key[size_column]) is None]
        if bad:
            raise UserError(f"--size-column {size_column}: value {bad[0]!r} is not a positive number "
                            "(a number, or one with a k, M, B or T suffix)")
        return size_column
    for column in columns:
        if all(size_number(g.key[column]) is not None for g in table.groups):
            return column
    return None


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, int) and abs(value) >= 100_000:
        return f"{value:.6g}".replace("e+0", "e").replace("e+", "e")
    return str(value).replace("/", "_").strip() or "_"


def cell_names(table: RecordedTable, size_column: str | None) -> list[CellId]:
    """One cell id per group: the size column's value is the size label, the other group columns
    (`col=value`, joined by `METHOD_JOIN`) the method ('recorded' when there are none)."""
    ids = []
    for group in table.groups:
        size = _text(group.key[size_column]) if size_column else "all"
        rest = [c for c in table.group_columns if c != size_column]
        method = METHOD_JOIN.join(f"{c}={_text(group.key[c])}" for c in rest) or "recorded"
        ids.append(CellId(method, size, SEED))
    if len(set(ids)) != len(ids):  # two values that print alike at 6 digits: use them as written
        ids = [CellId(METHOD_JOIN.join(f"{c}={group.key[c]}" for c in table.group_columns if c != size_column)
                      or "recorded",
                      str(group.key[size_column]).replace("/", "_") if size_column else "all", SEED)
               for group in table.groups]
    return ids


def _policy(group: RecordedGroup, ratio: float) -> LRPolicy:
    """Bounds at the recorded LRs: a search that may not leave what was tried (edge, never running)."""
    lo = min(group.lrs)
    return LRPolicy(lo=lo, hi=max(max(group.lrs), lo * 1.000001), center=lo, factor=max(ratio, 1.0001),
                    refine=False, max_points=10_000)


def group_points(cell: CellFacts, group: RecordedGroup, rule: str, now: float) -> list[PointRow]:
    points = []
    for lr, loss in zip(group.lrs, group.losses):
        if math.isfinite(loss):
            points.append(PointRow(cell=cell, lr=lr, state=PointState.OK, objective=loss, loss=loss,
                                   attempt=1, finished_at=now))
        else:
            points.append(PointRow(cell=cell, lr=lr, state=PointState.DIVERGED, reason=f"recorded loss {rule}",
                                   attempt=1, finished_at=now))
    return points


def check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory; import into a new one")


def import_table(
    path: str | Path, out: str | Path, group_columns: Sequence[str], *, lr_column: str = "lr",
    loss_column: str = "loss", size_column: str | None = None, duplicates: str = "error",
    missing_loss: str = "error", diverged_above: float | None = None, name: str | None = None,
) -> ImportSummary:
    """Read `path` and write the sweep directory `out` (see the module docstring). Every check runs
    before anything is written: a bad table or `--out` raises UserError and leaves no directory."""
    out, source = Path(out), str(path)
    check_out(out)
    if diverged_above is not None and not math.isfinite(diverged_above):
        raise UserError(f"--diverged-above {diverged_above}: must be a finite number")
    frame = read_frame(path)
    table = table_from_frame(frame, list(group_columns), lr_column, loss_column, source=source,
                             duplicates=duplicates, missing_loss=missing_loss, diverged=True,
                             diverged_above=diverged_above, require_grid=False)
    try:
        ratio, on_grid = grid_ratio(table.groups, source=source), True
    except UserError:
        ratio, on_grid = table.ratio, False
    size_col = choose_size_column(table, size_column)
    ids = cell_names(table, size_col)
    now = time.time()
    rule = "NaN or infinite" + (f", or above {diverged_above:g}" if diverged_above is not None else "")
    facts: list[CellFacts] = []
    points: list[PointRow] = []
    rows: list[CellRow] = []
    for cid, group in zip(ids, table.groups):
        size = size_number(group.key[size_col]) if size_col else None
        cell = CellFacts(cell_id=str(cid), method=cid.method, size=cid.size, seed=SEED,
                         params=int(round(size)) if size else None)
        mine = group_points(cell, group, rule, now)
        facts.append(cell)
        points += mine
        rows.append(CellRow.of(cell, mine, decision_of(mine, _policy(group, ratio)), now))
    raw = Path(path).read_bytes()
    entry = ImportedEntry(
        source=source, path=str(Path(path).resolve()), format="parquet" if frame_is_parquet(path) else "csv",
        sha256=hashlib.sha256(raw).hexdigest(), rows=table.rows, group_columns=list(table.group_columns),
        lr_column=lr_column, loss_column=loss_column, size_column=size_col,
        method_columns=[c for c in table.group_columns if c != size_col], duplicates=duplicates,
        merged=table.merged, missing_loss=missing_loss, dropped=table.dropped, diverged_rule=rule,
        diverged_above=diverged_above, n_diverged=sum(p.state is PointState.DIVERGED for p in points),
        grid_ratio=ratio, on_grid=on_grid, imported_at=now,
        imported_date=_dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat(timespec="seconds"),
        version=_version(), groups={str(cid): dict(g.key) for cid, g in zip(ids, table.groups)},
    )
    manifest = Manifest(
        store_version=STORE_VERSION, name=name or Path(path).stem, created=now, updated=now,
        x="params" if size_col else None,
        cells={c.cell_id: CellEntry.from_json({k: v for k, v in c.attrs().items() if v is not None}) for c in facts},
        imported=entry,
    )
    out.mkdir(parents=True, exist_ok=True)
    writer = StoreWriter(out)
    writer.append_points(points)
    writer.write_cells(rows)
    write_manifest(out, manifest)  # last: a directory without it is no sweep (an interrupted import reads as none)
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[str(row.status)] = statuses.get(str(row.status), 0) + 1
    return ImportSummary(out, len(rows), len(points), entry.n_diverged or 0, statuses, size_col, table.merged,
                         table.dropped)


def frame_is_parquet(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".parquet", ".pq")


def _version() -> str:
    try:
        return version("layerrope-sweeper")
    except PackageNotFoundError:
        return "unknown"
