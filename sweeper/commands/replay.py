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

from sweeper.commands.cliargs import add_format, add_wide
from sweeper.core.errors import UserError

# `--shifts -3..3`: argparse reads an argument that starts with '-' as an option unless it looks
# like a negative number; teach this command's parser that a negative range is a value.
_NEGATIVE_VALUE = re.compile(r"^-\d+(\.\.-?\d+)?$|^-\d+(,-?\d+)+$|^-\d*\.\d+$")


# Options that describe one table. Given before any `--table` (or with the positional TABLE alone) they
# are the defaults of every table; given after `--table PATH` they apply to that table only.
TABLE_OPTIONS = ("group", "lr_column", "loss_column", "duplicates", "missing_loss")


class _TableOption(argparse.Action):
    """Store a table option on the latest `--table`, or as the default when none was given yet."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        tables = getattr(namespace, "tables", None)
        if tables:
            tables[-1][self.dest] = values
        else:
            setattr(namespace, self.dest, values)


class _NewTable(argparse.Action):
    """`--table PATH`: one more table; the table options that follow apply to it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.tables = [*(getattr(namespace, "tables", None) or []), {"path": values}]


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
            "fraction within the near-optimal band. Several tables: --table PATH for each; --group, --lr-column, "
            "--loss-column, --duplicates and --missing-loss given after a --table apply to that table, given "
            "before the first --table they apply to every table; one block per table, then all tables pooled."
        ),
    )
    parser._negative_number_matcher = _NEGATIVE_VALUE  # type: ignore[attr-defined]
    parser.add_argument("table", nargs="?", default=None,
                        help="CSV of recorded runs: group columns, a learning rate and a final loss per row "
                             "(or give each table with --table)")
    parser.add_argument("--table", dest="tables", action=_NewTable, default=[], metavar="PATH",
                        help="a table to replay (repeatable); the table options after it apply to it alone")
    parser.add_argument("--yaml", required=True, metavar="SWEEP.yaml", help="the sweep whose LR policy is replayed")
    parser.add_argument("--group", action=_TableOption, default=None, metavar="COLS",
                        help="comma-separated columns that identify one LR grid (e.g. N,D,bs)")
    parser.add_argument("--lr-column", action=_TableOption, default="lr", metavar="COL",
                        help="learning-rate column (default: lr)")
    parser.add_argument("--loss-column", action=_TableOption, default="loss", metavar="COL",
                        help="final-loss column (default: loss)")
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
    parser.add_argument("--floor", action="store_true",
                        help="also report the clairvoyant floor: the fewest points any search from the same first "
                             "grid could use, knowing the table, to end bracketed within --band (a lower bound for "
                             "every policy)")
    parser.add_argument("--duplicates", action=_TableOption, choices=("min", "mean", "error"), default="min",
                        help="several runs of one group at one learning rate: keep the lowest loss (min, the "
                             "default), average them (mean), or refuse the table (error)")
    parser.add_argument("--missing-loss", action=_TableOption, choices=("error", "drop"), default="error",
                        help="runs without a finite loss (not finished, NaN): refuse the table (error, the default) "
                             "or leave them out, counted (drop): the search then reads their LR as unrecorded")
    add_format(parser)
    add_wide(parser)
    parser.set_defaults(func=run)


def table_specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each table to replay with its options: the positional TABLE (the defaults), then every `--table`
    (its own options over the defaults). UserError when there is none or one lacks its group columns."""
    defaults = {name: getattr(args, name) for name in TABLE_OPTIONS}
    specs = ([{"path": args.table, **defaults}] if args.table else []) + [
        {**defaults, **given} for given in args.tables]
    if not specs:
        raise UserError("name a table: sweeper replay TABLE.csv --yaml SWEEP.yaml --group COLS, or --table PATH ...")
    problems = []
    for spec in specs:
        columns = [c.strip() for c in (spec["group"] or "").split(",") if c.strip()]
        if not columns:
            problems.append(f"{spec['path']}: --group: name the columns that identify one LR grid, e.g. --group N,D,bs"
                            " (before the first --table for every table, after a --table for that one)")
        spec["group"] = columns
    if problems:
        raise UserError(problems[0], details=problems[1:])
    return specs


def run(args: argparse.Namespace) -> int:
    try:
        shifts = parse_shifts(args.shifts)
    except ValueError as exc:
        raise UserError(f"--shifts {args.shifts}: {exc}; write a range like -3..3 or a list like -2,0,2") from None
    if not 0 < args.tolerance < 0.5:
        raise UserError(f"--tolerance {args.tolerance:g}: must lie in (0, 0.5)")
    if not args.band >= 0:
        raise UserError(f"--band {args.band:g}: must be a percentage >= 0")
    specs = table_specs(args)
    from sweeper.search.policies import sweep_policies  # pydantic: only once the arguments are good
    from sweeper.search.replay import combine, load_table, replay  # polars, likewise

    policies = sweep_policies(args.yaml, args.policy)
    tables, problems = [], []
    for spec in specs:  # every bad table is reported, one line per problem
        try:
            tables.append(load_table(spec["path"], spec["group"], spec["lr_column"], spec["loss_column"],
                                     tolerance=args.tolerance, duplicates=spec["duplicates"],
                                     missing_loss=spec["missing_loss"]))
        except UserError as exc:
            problems += exc.lines()
    if problems:
        raise UserError(problems[0], details=problems[1:])
    docs, summaries = [], []
    for spec, table in zip(specs, tables):
        results, mine = [], []
        for label, methods, section in policies:
            summary = replay(table, section.to_policy(), shifts, tolerance=args.tolerance, band=args.band,
                             floor=args.floor)
            mine.append(summary)
            results.append({"policy": label, "methods": methods, "lr": section.model_dump(mode="json"),
                            **summary.to_dict()})
        summaries.append(mine)
        head = results[0]
        docs.append({
            "table": spec["path"], "yaml": args.yaml, "group_columns": spec["group"], "rows": table.rows,
            "grid_ratio": table.ratio, "duplicates": spec["duplicates"], "merged_runs": table.merged,
            "missing_loss": spec["missing_loss"], "dropped_runs": table.dropped, "shifts": shifts,
            "tolerance": args.tolerance,
            **{k: v for k, v in head.items() if k != "by_shift"}, "by_shift": head["by_shift"], "policies": results,
        })
    if len(docs) == 1:
        doc: dict[str, Any] = docs[0]
    else:
        combined = []
        for i, (label, methods, section) in enumerate(policies):
            pooled = combine([mine[i] for mine in summaries])
            combined.append({"policy": label, "methods": methods, **pooled.to_dict()})
        doc = {"yaml": args.yaml, "shifts": shifts, "tolerance": args.tolerance, "band": args.band,
               "tables": docs, "combined": {"tables": len(docs), "policies": combined}}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for one in docs:
        _print(one, wide=args.wide)
    if len(docs) > 1:
        _print_combined(doc)
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


def _print(doc: dict[str, Any], wide: bool = False) -> None:
    # start-up time: imported when used, not on every CLI start
    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import make_console
    from sweeper.records.table import fmt

    console = make_console()
    console.print(
        f"{doc['table']}: {doc['rows']} runs, grid ratio ×{doc['grid_ratio']:.4g}, grouped by "
        f"{', '.join(doc['group_columns'])}; shifts {doc['shifts'][0]}..{doc['shifts'][-1]} steps from each "
        "group's recorded optimum", highlight=False)
    table = Layout(f"LR policies of {doc['yaml']} replayed", [
        Col("policy", keep=True, justify="left"), Col("methods", priority=4, justify="left"),
        Col("groups (skipped)", priority=3, short="groups"), Col("replays", priority=3), Col("points mean", keep=True,
                                                                                            short="pts mean"),
        Col("max", priority=2), Col("rounds", priority=2), Col("bracketed", priority=1), Col("regret mean %", priority=1, short="regret %"),
        Col("max %", priority=2), Col(f"within {doc['band']:g}%", keep=True)])
    for r in doc["policies"]:
        table.add_row(
            r["policy"], ", ".join(r["methods"]), f"{r['groups']} ({r['skipped_edge']})", str(r["replays"]),
            f"{r['points_per_group_mean']:.2f}", str(r["points_per_group_max"]), f"{r['rounds_per_group_mean']:.2f}",
            f"{100 * r['bracketed_fraction']:.1f}%",
            fmt(r["regret_mean"], ".3f"), fmt(r["regret_max"], ".3f"), f"{100 * r['within_band_fraction']:.1f}%",
        )
    print_layout(console, table, wide=wide)
    console.print(f"exhaustive search: {doc['policies'][0]['exhaustive_points_mean']:.2f} recorded LRs per replayed "
                  "group", highlight=False, style="dim")
    for r in doc["policies"]:
        if r.get("floor_points_mean") is not None:
            which = f" ({r['policy']})" if len(doc["policies"]) > 1 else ""
            console.print(f"clairvoyant floor{which}: {r['floor_points_mean']:.2f} points per replay — the fewest any "
                          f"search from the same first grids could use, knowing the table, to end bracketed within "
                          f"{doc['band']:g}%; by shift: " + ", ".join(
                              f"{b['shift']}: {b['floor_points_mean']:.2f}" for b in r["by_shift"]),
                          highlight=False, style="dim")
    skipped = doc["policies"][0]["skipped_edge"]
    if skipped:
        console.print(f"{skipped} groups skipped: their recorded optimum is at the edge of their recorded grid",
                      highlight=False, style="dim")
    unrecorded = doc["policies"][0]["unrecorded_points"]
    if unrecorded:
        console.print(f"{unrecorded} proposed LRs were not in the table (counted as failed points)", highlight=False,
                      style="dim")
    if doc.get("dropped_runs"):
        console.print(f"{doc['dropped_runs']} runs without a finite loss left out (--missing-loss drop)",
                      highlight=False, style="dim")
    if doc.get("merged_runs"):
        rule = {"min": "the lowest loss kept", "mean": "their losses averaged"}[doc["duplicates"]]
        console.print(f"{doc['merged_runs']} runs shared a group and a learning rate with another run: {rule} "
                      "(--duplicates)", highlight=False, style="dim")


def _print_combined(doc: dict[str, Any]) -> None:
    from sweeper.records.table import make_console  # start-up time, as `_print`

    console = make_console()
    several = len(doc["combined"]["policies"]) > 1
    for r in doc["combined"]["policies"]:
        console.print(
            f"all {doc['combined']['tables']} tables pooled{', ' + r['policy'] if several else ''}: {r['replays']} "
            f"replays ({r['groups']} groups), {r['points_per_group_mean']:.2f} points per replay (max "
            f"{r['points_per_group_max']}), {100 * r['bracketed_fraction']:.1f}% bracketed, "
            f"{100 * r['within_band_fraction']:.1f}% within {doc['band']:g}%"
            + (f"; clairvoyant floor {r['floor_points_mean']:.2f} points" if r.get("floor_points_mean") is not None
               else ""), highlight=False)
