"""Running a sweep on Ray Tune (`sweeper launch`).

`launch` (the script) → `sweep_dir` (checks, manifest, lock, store) → `tune_session` (Ray, the
Tune run, the Searcher/Callback/Stopper adapters) → `sweep_run` (one launch's sweep), which
wires the pure `book` (points, queues, decisions), `tune_trials` (live Tune trials, the
concurrency gate, time accounting) and the `recorder` (the only writer: ledger, then store);
`display` shows it live.

Words: a *point* is one learning rate of a cell; a *Tune trial* (here often just "trial")
trains a stack of one cell's points; a *ledger entry* (an Optuna trial) records one point.
"""
