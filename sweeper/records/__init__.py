"""What a sweep keeps, and the one shape of each thing kept.

- the one shape of each thing kept is in `sweeper.core` (ids, states, `PointRow`, `CellRow`,
  `CurvePoint` and the tables' columns), which every layer reads;
- `ledger` (the record: Optuna, behind the `Ledger` protocol), `store` (Parquet tables read while
  the sweep runs, behind `Store`), `manifest` (`Manifest`, the directory's index, `manifest.json`:
  its only reader and writer), `document` (the lossless typed-JSON base of the manifest and of
  fits.json), `durable` (every atomic file write), `storage_errors`;
- `fold` (point rows to cells, for every reader), `repair` (the store rebuilt from the ledger),
  `results` (optima, progress), `table` (the per-cell table of `launch` and `status`).

Invariant (crash consistency): everything a relaunch needs is durable before it matters, so a
kill at any moment changes no result. The ledger is written before the store (the store is
rebuilt from it); a point's ledger entry exists before its Tune trial starts; and the entry is
created in one commit with its cell's *plan* — every learning rate the cell had decided to
train so far (its first grid, a prior's grid, refinements, extensions) — so a relaunch queues
again what was planned and not yet assigned and re-derives nothing that depended on timing
(`OptunaLedger.plans`, `sweeper.run.book.CellBook.load`). A decision none of whose points was
assigned is re-derived from the finished results alone, which `decide` makes order-independent.
Attributes of a cell written in several commits are completed by the next launch that uses it.

Dashboards may read everything here; nothing here imports `sweeper.run`.
"""
