"""From point rows to cells: the one fold every reader of a sweep's points goes through.

Rows come from the ledger (a relaunch, `sweeper status --repair`) or from the store
(`sweeper status`, `sweeper optima`, the dashboards); in both, the last row of a point is the
point (`current_points`). A cell's row is then made from its points and a bracketing decision
(`CellRow.of`): `summarize` decides with the cell's LR policy, as the driver does (the cell book
in `sweeper.run.book` keeps its decisions as it goes and makes its rows the same way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sweeper.core.rows import CellFacts, CellRow, PointRow
from sweeper.core.grid import CellDecision, LRPolicy
from sweeper.search.bracketing import decide

# A policy for a cell whose YAML is gone: no bound or cap stops the search, so a cell is done
# only when bracketed, or when every point failed.
OPEN_POLICY = LRPolicy(lo=1e-12, hi=1e3, max_points=10_000)


def current_points(rows: Iterable[PointRow]) -> dict[str, dict[str, PointRow]]:
    """Cell id -> point id -> the point's last row (rows in the order they were recorded)."""
    out: dict[str, dict[str, PointRow]] = {}
    for row in rows:
        out.setdefault(row.cell.cell_id, {})[row.point_id] = row
    return out


def decision_of(points: Iterable[PointRow], policy: LRPolicy | None) -> CellDecision:
    return decide([p.grid_point() for p in points], policy or OPEN_POLICY)


def summarize(cells: Mapping[str, CellFacts], points: Mapping[str, Mapping[str, PointRow]],
              policies: Mapping[str, LRPolicy], now: float) -> list[CellRow]:
    """A row per cell of `cells`, decided from its points with its policy (OPEN_POLICY if none)."""
    rows = []
    for cid, facts in cells.items():
        mine = list(points.get(cid, {}).values())
        rows.append(CellRow.of(facts, mine, decision_of(mine, policies.get(cid)), now))
    return rows
