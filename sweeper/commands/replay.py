"""`sweeper replay TABLE.csv --yaml SWEEP.yaml`: the sweep's LR policy replayed on recorded LR grids.

How many runs a cell needs and how close to the exhaustive optimum it ends, measured on real
loss landscapes (e.g. StepLaw's) with the very `decide` the driver runs. The logic lives in
`sweeper.search.replay`; this module reads the arguments, builds each distinct LR policy of
the sweep (top-level `lr`, then methods' overrides, then `--policy KEY=VALUE`), and prints.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from sweeper.commands.cliargs import add_format
from sweeper.core.errors import UserError

# `--shifts -3..3`: argparse reads an argument that starts with '-' as an option unless it looks
# like a negative number; teach this command's parser that a negative range is a value.
_NEGATIVE_VALUE = re.compile(r"^-\d+(\.\.-?\d+)?$|^-\d+(,-?\d+)+$|^-\d*\.\d+$")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay recorded LR grids (e.g. StepLaw's) through a sweep's LR policy",
        description=(
            "Replay recorded learning-rate grids through the sweep's own LR policy (its bounds, caps and initial "
            "grid; the driver's `decide`). Each group of the table starts at its recorded optimum shifted by k steps "
            "of the table's grid ratio; a proposed LR reads the recorded loss at that LR (within --tolerance) or is "
            "a failed point. Groups whose recorded optimum is at the edge of their grid are skipped. Reports, per "
            "policy: points per replay, fraction bracketed, regret against the group's recorded best, and the "
            "fraction within the near-optimal band."
        ),
    )
    parser._negative_number_matcher = _NEGATIVE_VALUE  # type: ignore[attr-defined]
    parser.add_argument("table", help="CSV of recorded runs: group columns, a learning rate and a final loss per row")
    parser.add_argument("--yaml", required=True, metavar="SWEEP.yaml", help="the sweep whose LR policy is replayed")
    parser.add_argument("--group", required=True, metavar="COLS",
                        help="comma-separated columns that identify one LR grid (e.g. N,D,bs)")
    parser.add_argument("--lr-column", default="lr", metavar="COL", help="learning-rate column (default: lr)")
    parser.add_argument("--loss-column", default="loss", metavar="COL", help="final-loss column (default: loss)")
    parser.add_argument("--shifts", default="-3..3", metavar="K",
                        help="starting centres, in grid steps from each group's recorded optimum: a range A..B or a "
                             "list (default: -3..3)")
    parser.add_argument("--tolerance", type=float, default=0.01, metavar="REL",
                        help="relative distance within which a proposed LR reads a recorded one (default: 0.01)")
    parser.add_argument("--band", type=float, default=0.25, metavar="PERCENT",
                        help="near-optimal band: regret at most this counts as found (default: 0.25, StepLaw's)")
    parser.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of the sweep's `lr` section for this replay (repeatable), "
                             "e.g. --policy points=3 --policy refine=false")
    parser.add_argument("--duplicates", choices=("min", "mean", "error"), default="min",
                        help="several runs of one group at one learning rate: keep the lowest loss (min, the "
                             "default), average them (mean), or refuse the table (error)")
    add_format(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        shifts = parse_shifts(args.shifts)
    except ValueError as exc:
        raise UserError(f"--shifts {args.shifts}: {exc}; write a range like -3..3 or a list like -2,0,2") from None
    if not 0 < args.tolerance < 0.5:
        raise UserError(f"--tolerance {args.tolerance:g}: must lie in (0, 0.5)")
    if not args.band >= 0:
        raise UserError(f"--band {args.band:g}: must be a percentage >= 0")
    columns = [c.strip() for c in args.group.split(",") if c.strip()]
    if not columns:
        raise UserError("--group: name at least one column, e.g. --group N,D,bs")
    from sweeper.search.policies import sweep_policies  # pydantic: only once the arguments are good
    from sweeper.search.replay import load_table, replay  # polars, likewise

    policies = sweep_policies(args.yaml, args.policy)
    table = load_table(args.table, columns, args.lr_column, args.loss_column, tolerance=args.tolerance,
                       duplicates=args.duplicates)
    results = []
    for label, methods, section in policies:
        summary = replay(table, section.to_policy(), shifts, tolerance=args.tolerance, band=args.band)
        results.append({"policy": label, "methods": methods, "lr": section.model_dump(mode="json"),
                        **summary.to_dict()})
    head = results[0]
    doc = {
        "table": args.table, "yaml": args.yaml, "group_columns": columns, "rows": table.rows,
        "grid_ratio": table.ratio, "duplicates": args.duplicates,
        "merged_runs": table.merged, "shifts": shifts, "tolerance": args.tolerance,
        **{k: v for k, v in head.items() if k != "by_shift"}, "by_shift": head["by_shift"], "policies": results,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    _print(doc)
    return 0


def parse_shifts(text: str) -> list[int]:
    """`-3..3` (a range, both ends included) or `-2,0,2` (a list); ValueError otherwise."""
    text = text.strip()
    if ".." in text:
        a, _, b = text.partition("..")
        lo, hi = int(a), int(b)
        if lo > hi:
            raise ValueError(f"empty range {text!r} (write the lower end first)")
        return list(range(lo, hi + 1))
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values:
        raise ValueError("no shifts given")
    return sorted(set(values))


def _print(doc: dict[str, Any]) -> None:
    # start-up time: imported when used, not on every CLI start
    from rich.table import Table

    from sweeper.records.table import make_console
    from sweeper.records.table import fmt

    console = make_console()
    console.print(
        f"{doc['table']}: {doc['rows']} runs, grid ratio ×{doc['grid_ratio']:.4g}, grouped by "
        f"{', '.join(doc['group_columns'])}; shifts {doc['shifts'][0]}..{doc['shifts'][-1]} steps from each "
        "group's recorded optimum", highlight=False)
    table = Table(header_style="bold", title=f"LR policies of {doc['yaml']} replayed", title_justify="left")
    for name in ("policy", "methods", "groups (skipped)", "replays", "points mean", "max", "bracketed",
                 "regret mean %", "max %", f"within {doc['band']:g}%"):
        table.add_column(name, justify="left" if name in ("policy", "methods") else "right")
    for r in doc["policies"]:
        table.add_row(
            r["policy"], ", ".join(r["methods"]), f"{r['groups']} ({r['skipped_edge']})", str(r["replays"]),
            f"{r['points_per_group_mean']:.2f}", str(r["points_per_group_max"]), f"{100 * r['bracketed_fraction']:.1f}%",
            fmt(r["regret_mean"], ".3f"), fmt(r["regret_max"], ".3f"), f"{100 * r['within_band_fraction']:.1f}%",
        )
    console.print(table)
    console.print(f"exhaustive search: {doc['policies'][0]['exhaustive_points_mean']:.2f} recorded LRs per replayed "
                  "group", highlight=False, style="dim")
    skipped = doc["policies"][0]["skipped_edge"]
    if skipped:
        console.print(f"{skipped} groups skipped: their recorded optimum is at the edge of their recorded grid",
                      highlight=False, style="dim")
    unrecorded = doc["policies"][0]["unrecorded_points"]
    if unrecorded:
        console.print(f"{unrecorded} proposed LRs were not in the table (counted as failed points)", highlight=False,
                      style="dim")
    if doc.get("merged_runs"):
        rule = {"min": "the lowest loss kept", "mean": "their losses averaged"}[doc["duplicates"]]
        console.print(f"{doc['merged_runs']} runs shared a group and a learning rate with another run: {rule} "
                      "(--duplicates)", highlight=False, style="dim")
