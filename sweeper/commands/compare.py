"""`sweeper compare DIR --methods A,B`: per size, the lead of B over A seed by seed (the same seed's cells
paired), its mean and a Student-t 95% interval with (seeds - 1) degrees of freedom
(`sweeper.analysis.compare`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sweeper.commands.cliargs import add_format


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="the lead of one method over another per size, paired by seed, with t-intervals",
        description=(
            "Per size: each seed's lead of B over A (lead = A's best loss - B's best loss at the same seed; positive: "
            "B is better), using each cell's grid-best measured loss (not the interpolated parabola, a model), their "
            "mean, a 95%% Student-t interval with (seeds - 1) degrees of freedom and whether it excludes 0. One "
            "seed: no interval and no claim. A seed where either cell has no usable optimum (diverged, stalled, "
            "failed, running, or at the grid's edge) is left out and named."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    parser.add_argument("--methods", required=True, metavar="A,B",
                        help="the two methods: the lead is of B over A (loss of A minus loss of B)")
    parser.add_argument("--x", choices=("depth", "params"), default=None,
                        help="the size axis shown and sorted on (default: the sweep's, else depth)")
    parser.add_argument("--include-edge", action="store_true",
                        help="use cells whose best LR is at the edge of the swept grid (their loss is an upper bound)")
    add_format(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.analysis.compare import compare
    from sweeper.core.errors import UserError

    methods = [m.strip() for m in str(args.methods).split(",") if m.strip()]
    if len(methods) != 2:
        raise UserError(f"--methods: give two methods as A,B (got {args.methods!r})")
    result = compare(args.dir, methods[0], methods[1], x=args.x, include_edge=args.include_edge)
    if args.format == "json":
        print(json.dumps({"dir": str(args.dir), **result.to_json()}, indent=2))
        return 0
    print_table(args.dir, result)
    return 0


def print_table(where: Any, result: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    from sweeper.records.table import fmt, make_console

    table = Table(header_style="bold", title_justify="left",
                  title=f"{where}: lead of {result.b} over {result.a} ({result.a}'s loss - {result.b}'s, same seed)")
    for name in ("size", result.x, "per-seed leads", "mean lead", "95% t-interval", "df", "excludes 0", "left out"):
        table.add_column(name, justify="left" if name in ("size", "per-seed leads", "left out") else "right")
    for c in result.sizes:
        x = fmt(c.x_a, ".4g") if c.x_a == c.x_b else f"{fmt(c.x_a, '.4g')} / {fmt(c.x_b, '.4g')}"
        leads = " ".join(f"s{s.seed} {s.lead:+.4f}" for s in c.per_seed) or "—"
        ci = c.ci
        interval = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else ("no interval (1 seed)" if c.n_seeds == 1 else "—")
        sig: Any = "—" if c.significant is None else (Text("yes", style="bold green") if c.significant else "no")
        left = "; ".join(f"s{m.seed}: {m.reason}" for m in c.missing) or ""
        table.add_row(c.size, x, leads, fmt(c.mean, "+.4f") if c.mean is not None else "—", interval, str(c.df), sig,
                      left)
    console = make_console()
    console.print(table)
    console.print("lead: the difference of the cells' grid-best measured losses at the same seed (positive: "
                  f"{result.b} is better); the interval is mean ± t(0.975, df)·sd/√n over the n seeds, df = n - 1; "
                  "with one seed no interval exists and no claim is made", highlight=False, style="dim")
