"""What a sweep keeps: ids, point and cell records, the ledger of record (Optuna), the Parquet
store, its repair from the ledger, and the read-side views (optima, progress)."""
