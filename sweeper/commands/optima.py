"""`sweeper optima DIR`: per (method, size, seed) the grid-best and interpolated optimal learning rate."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any

from sweeper.cliargs import add_format

COLUMNS = ("method", "size", "seed", "status", "best_lr", "best_loss", "interp_lr", "interp_objective",
           "n_points", "n_diverged", "n_failed", "n_running", "params", "depth", "cell_id")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "optima",
        help="print each cell's optimal learning rate (grid best and interpolated)",
        description=(
            "Per (method, size, seed): status, grid-best LR and loss, the interpolated optimum (parabola in log LR "
            "through the best point and its neighbours), points and diverged points, and the average number of "
            "points per bracketed cell."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    add_format(parser, choices=("table", "csv", "json"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from rich.table import Table
    from rich.text import Text

    from sweeper.records.results import optima, points_per_bracketed_cell
    from sweeper.records.store import read_manifest
    from sweeper.records.table import STATUS_STYLE, fmt, make_console

    rows = optima(args.dir)
    average = points_per_bracketed_cell(rows)
    if args.format == "json":
        print(json.dumps({"name": read_manifest(args.dir).get("name"), "dir": str(args.dir), "cells": rows,
                          "points_per_bracketed_cell": average}, indent=2, default=str))
        return 0
    if args.format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
        sys.stdout.write(buffer.getvalue())
        return 0
    title = f"{read_manifest(args.dir).get('name')} ({args.dir}): optima"  # as `sweeper status` titles it
    table = Table(header_style="bold", title=title, title_justify="left")
    for name in ("method", "size", "seed", "status", "best lr", "best loss", "interp lr", "interp objective",
                 "points", "diverged"):
        table.add_column(name, justify="left" if name in ("method", "size", "status") else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r["method"], r["size"], str(r["seed"]), Text(r["status"], style=STATUS_STYLE.get(r["status"], "")),
            fmt(r["best_lr"], ".3g"), fmt(r["best_loss"], ".4f"), fmt(r["interp_lr"], ".3g"),
            fmt(r["interp_objective"], ".4f"), str(r["n_points"]), str(r["n_diverged"]),
        )
    console = make_console()
    console.print(table)
    if average["all"] is not None:
        per = ", ".join(f"{m} {v:.1f}" for m, v in average["by_method"].items())
        console.print(f"average points per bracketed cell: {average['all']:.1f} over {average['bracketed_cells']} "
                      f"cells ({per})", highlight=False)
    else:
        console.print("no bracketed cells yet")
    console.print("interp lr: the vertex of a parabola in log LR through the best grid point and its two neighbours; "
                  "interp objective: the parabola's value there (a model, not a measured loss: fits use the best loss)",
                  highlight=False, style="dim")
    return 0
