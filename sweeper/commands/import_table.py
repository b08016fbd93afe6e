"""`sweeper import TABLE --group COLS --out DIR`: recorded runs (CSV or Parquet) as a sweep directory that
`optima`, `fit`, `plots`, `dashboard` and `sweeper.open` read (`sweeper.records.imported`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sweeper.commands.cliargs import add_format


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import",
        help="read a table of recorded runs (CSV or Parquet) into a sweep directory the readers read",
        description=(
            "One cell per group of the --group columns, one point per recorded learning rate. The size column "
            "(--size-column, default: the first group column whose values are all sizes, e.g. 214663680 or 130m) "
            "is the fits' x; the other group columns name the cell's method. A NaN or infinite loss is a diverged "
            "run, and so is a loss above --diverged-above when given (default: only non-finite losses). A cell is "
            "bracketed when its best run has a recorded neighbour on each side, else at the grid's edge. The "
            "directory is marked imported (its manifest names the table, its SHA-256, the columns and rules): it "
            "has no ledger and can never be relaunched. A bad table (missing columns, non-numeric values, "
            "duplicate learning rates with --duplicates error) exits 2 and writes nothing."
        ),
    )
    parser.add_argument("table", help="the table of recorded runs (.csv, or .parquet / .pq)")
    parser.add_argument("--group", required=True, metavar="COLS",
                        help="comma-separated columns that identify one cell (e.g. N,D)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the sweep directory to write (new or empty)")
    parser.add_argument("--lr-column", default="lr", metavar="COL", help="learning-rate column (default: lr)")
    parser.add_argument("--loss-column", default="loss", metavar="COL", help="final-loss column (default: loss)")
    parser.add_argument("--size-column", default=None, metavar="COL",
                        help="the group column whose values are the cells' size, the fits' x (default: the first "
                             "group column whose every value is a number, or one with a k/M/B/T suffix)")
    parser.add_argument("--duplicates", default="error", choices=("min", "mean", "error"),
                        help="several runs of one cell at one LR (e.g. batch sizes): keep the lowest loss, the "
                             "mean, or refuse the table (default: error)")
    parser.add_argument("--missing-loss", default="error", choices=("error", "drop"),
                        help="a run with an empty loss (not finished): refuse the table, or leave it out "
                             "(default: error)")
    parser.add_argument("--diverged-above", type=float, default=None, metavar="LOSS",
                        help="a loss above this is a diverged run (default: only NaN or infinite losses)")
    parser.add_argument("--name", default=None, help="the sweep's name (default: the table's file name)")
    add_format(parser, choices=("table", "json"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.records.imported import import_table
    from sweeper.records.table import make_console

    groups = [c.strip() for c in str(args.group).split(",") if c.strip()]
    summary = import_table(args.table, args.out, groups, lr_column=args.lr_column, loss_column=args.loss_column,
                           size_column=args.size_column, duplicates=args.duplicates, missing_loss=args.missing_loss,
                           diverged_above=args.diverged_above, name=args.name)
    figures = {"dir": str(summary.out), "cells": summary.cells, "points": summary.points,
               "diverged_points": summary.diverged, "statuses": summary.statuses, "size_column": summary.size_column,
               "merged_runs": summary.merged, "dropped_runs": summary.dropped}
    if args.format == "json":
        print(json.dumps(figures, indent=2))
        return 0
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(summary.statuses.items()))
    console = make_console()
    console.print(f"imported {args.table} into {summary.out}: {summary.cells} cells ({statuses}), {summary.points} "
                  f"points ({summary.diverged} diverged); size column: {summary.size_column or 'none'}"
                  + (f"; {summary.merged} runs merged ({args.duplicates})" if summary.merged else "")
                  + (f"; {summary.dropped} runs without a loss left out" if summary.dropped else ""),
                  highlight=False)
    console.print(f"read it with `sweeper optima {summary.out}` (--edges: the one-sided optima) and "
                  f"`sweeper fit {summary.out}`", highlight=False, style="dim")
    return 0
