"""`sweeper optima DIR`: per (method, size, seed) the grid-best and interpolated optimal learning rate."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any

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
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from rich.table import Table

    from sweeper.records.results import optima, points_per_bracketed_cell
    from sweeper.records.table import STATUS_STYLE, fmt, make_console

    from sweeper.records.store import read_manifest, simulated_label

    rows = optima(args.dir)
    average = points_per_bracketed_cell(rows)
    simulated = simulated_label(read_manifest(args.dir))
    if args.format == "json":
        print(json.dumps({"cells": rows, "points_per_bracketed_cell": average, "simulated": simulated is not None},
                         indent=2, default=str))
        return 0
    if args.format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
        sys.stdout.write(buffer.getvalue())
        return 0
    title = f"optima of {args.dir}" + (f" · {simulated}" if simulated else "")
    table = Table(header_style="bold", title=title, title_justify="left")
    for name in ("method", "size", "seed", "status", "best lr", "best loss", "interp lr", "parabola min",
                 "points", "diverged"):
        table.add_column(name, justify="left" if name in ("method", "size", "status") else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r["method"], r["size"], str(r["seed"]), f"[{STATUS_STYLE.get(r['status'], '')}]{r['status']}[/]",
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
                  "parabola min: the parabola's value there (a model, not a measured loss: fits use the best loss)",
                  highlight=False, style="dim")
    return 0
