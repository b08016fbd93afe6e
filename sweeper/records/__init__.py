"""What a sweep keeps, and the one shape of each thing kept.

- `ids` (cell and point ids, size labels), `states` (`PointState`, `CellStatus`), `rows`
  (`PointRow`, `CellRow`, `CurvePoint` and the tables' columns): standard library only;
- `ledger` (the record: Optuna, behind the `Ledger` protocol), `store` (Parquet tables read while
  the sweep runs, behind `Store`), `durable` (every atomic file write), `storage_errors`;
- `fold` (point rows to cells, for every reader), `repair` (the store rebuilt from the ledger),
  `results` (optima, progress), `table` (the per-cell table of `launch` and `status`).

Dashboards may read everything here; nothing here imports `sweeper.run`.
"""
