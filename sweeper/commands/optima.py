"""`sweeper optima DIR`: per (method, size, seed) the grid-best and interpolated optimal learning rate; with
them, where the sweep recorded them, the best point's LAMBADA perplexity and a looped model's loss at each
evaluation loop count."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from typing import Any

from sweeper.commands.cliargs import add_format, add_wide

COLUMNS = ("method", "size", "seed", "status", "best_lr", "best_loss", "best_loss_se", "within_noise", "noise",
           "neighbour_lr", "neighbour_gap", "neighbour_gap_se", "seed_sd_gap", "n_seeds_gap", "seed_sd_best_loss",
           "seed_sd_at_best_lr", "seed_sd_at_neighbour_lr", "stalled_loss", "interp_lr", "interp_objective", "n_points",
           "n_diverged", "n_stalled", "n_failed", "n_infra_failed", "n_running", "best_lambada_ppl", "best_loop_losses",
           "params", "depth", "cell_id")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "optima",
        help="print each cell's optimal learning rate (grid best and interpolated)",
        description=(
            "Per (method, size, seed): status, grid-best LR and loss ± its evaluation SE (over the eval batches), "
            "with two or more seeds the seeds' sd of the best loss, and a flag when the best point and a neighbour "
            "differ by less than 2× the noise of their difference (bracket within noise): the seeds' sd of that "
            "difference where two or more seeds trained both LRs (noise: seeds), else its paired evaluation SE "
            "(noise: eval); the "
            "interpolated optimum (parabola in log LR through the best point and its neighbours), points, diverged "
            "and stalled points (stalled: trained to the end at the loss of predicting by token frequencies; "
            "never an optimum), and the average number of points per bracketed cell."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    parser.add_argument("--edges", action="store_true",
                        help="the bracket audit: list only the cells whose optimum is at an edge of the learning "
                             "rates tried (which side, the range tried, and the LRs a bracketing search would try "
                             "next), and the cells with no optimum (every run diverged)")
    add_format(parser, choices=("table", "csv", "json"))
    add_wide(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from rich.text import Text

    from sweeper.records.layout import Layout, print_layout
    from sweeper.records.manifest import read_manifest
    from sweeper.records.results import noise_note, optima, points_per_bracketed_cell
    from sweeper.records.table import STATUS_STYLE, fmt, make_console

    if args.edges:
        return run_edges(args)
    rows = optima(args.dir)
    average = points_per_bracketed_cell(rows)
    manifest = read_manifest(args.dir)
    simulated = manifest.simulated_label or manifest.imported_label
    if args.format == "json":
        print(json.dumps({"name": manifest.name, "dir": str(args.dir), "cells": rows,
                          "points_per_bracketed_cell": average, "simulated": manifest.is_simulated,
                          "imported": manifest.is_imported},
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
    title = f"{manifest.name} ({args.dir}): optima"  # as `sweeper status` titles it
    title += f" · {simulated}" if simulated else ""
    counts = loop_counts(rows)  # a looped model evaluated at several loop counts: one more column
    lambada = any(r.get("best_lambada_ppl") is not None for r in rows)
    failed = any(r.get("n_failed") or r.get("n_infra_failed") for r in rows)
    seeds = any(r.get("seed_sd_best_loss") is not None for r in rows)
    table = Layout(title, optima_columns(counts, lambada, failed, seeds))
    for r in rows:
        extra = ([loops_text(r, counts)] if counts else []) + ([fmt(r.get("best_lambada_ppl"), ".4g")] if lambada else [])
        fails = [str(r.get("n_failed") or 0), str(r.get("n_infra_failed") or 0)] if failed else []
        table.add_row(
            r["method"], r["size"], str(r["seed"]), Text(status_text(r), style=STATUS_STYLE.get(r["status"], "")),
            fmt(r["best_lr"], ".3g"), best_loss_text(r),
            fmt(r.get("best_loss_se"), ".4f") if r["best_loss"] is not None else "—",
            *([fmt(r.get("seed_sd_best_loss"), ".4f")] if seeds else []), *extra,
            neighbour_text(r), fmt(r["interp_lr"], ".3g"), fmt(r["interp_objective"], ".4f"), str(r["n_points"]),
            str(r["n_diverged"]), Text(str(r["n_stalled"]), style="magenta") if r["n_stalled"] else "0", *fails,
        )
    console = make_console()
    print_layout(console, table, wide=args.wide)
    if average["all"] is not None:
        per = ", ".join(f"{m} {v:.1f}" for m, v in average["by_method"].items())
        console.print(f"average points per bracketed cell: {average['all']:.1f} over {average['bracketed_cells']} "
                      f"cells ({per})", highlight=False)
    else:
        console.print("no bracketed cells yet")
    print_noise_notes(console, rows, seeds)
    if any(r["status"] in ("diverged", "stalled") for r in rows):
        console.print("all diverged / all stalled: the cell found no usable learning rate (the method fails at this "
                      "size)", highlight=False, style="dim")
    if any(r["n_stalled"] for r in rows):
        console.print("stalled: trained to the end without beating the loss of predicting by token frequencies "
                      "by divergence.stall_margin; counts like a diverged point (never an optimum, never in a fit)",
                      highlight=False, style="dim")
    if any(r["status"] == "fixed" for r in rows):
        console.print("fixed: a fixed-recipe cell (lr.fixed): its best lr is the recipe's, not an optimum",
                      highlight=False, style="dim")
    if counts:
        console.print(f"loss at T=...: the best point's final evaluation loss after {', '.join(map(str, counts))} "
                      "iterations of the core (the best loss is the largest count's)", highlight=False, style="dim")
    if lambada:
        console.print("LAMBADA ppl: the best point's last-word perplexity on LAMBADA (exp of the mean negative "
                      "log-likelihood of each passage's last word; eval.tasks)", highlight=False, style="dim")
    console.print("interp lr: the vertex of a parabola in log LR through the best grid point and its two neighbours; "
                  "interp objective: the parabola's value there (a model, not a measured loss: fits use the best loss)",
                  highlight=False, style="dim")
    return 0


def optima_columns(counts: list[int], lambada: bool, failed: bool, seeds: bool = False) -> list[Any]:
    """The table's columns: the cell (method, size, seed) and its answer (best lr, best loss) always shown;
    at 80 columns the SE, the neighbour gap, the interpolated objective and the per-loop losses go first."""
    from sweeper.records.layout import Col  # (see `run`)

    return [
        Col("method", keep=True, justify="left"), Col("size", keep=True, justify="left"), Col("seed", keep=True),
        Col("status", priority=1, justify="left"), Col("best lr", keep=True), Col("best loss", keep=True),
        Col("± eval SE", priority=4, short="± SE"),
        *([Col("seeds' sd", priority=4, short="seed sd")] if seeds else []),
        *([Col(f"loss at T={'/'.join(map(str, counts))}", priority=5, short="loss per T")] if counts else []),
        *([Col("LAMBADA ppl", priority=3, short="LAMBADA")] if lambada else []),
        Col("vs neighbour", priority=6, justify="left"), Col("interp lr", priority=3),
        Col("interp objective", priority=7, short="interp obj"), Col("points", priority=2, short="pts"),
        Col("diverged", priority=2, short="div"), Col("stalled", priority=2, short="stall"),
        *([Col("failed", priority=4, short="fail"), Col("infra_failed", priority=4, short="infra")] if failed else []),
    ]


EDGE_COLUMNS = ("cell_id", "method", "size", "seed", "side", "best_lr", "best_loss", "tried_lo", "tried_hi", "n_points",
                "ratio", "next_lrs")


def run_edges(args: argparse.Namespace) -> int:
    """`--edges`: the bracket audit (`sweeper.records.edges.edge_audit`)."""
    from sweeper.records.edges import edge_audit
    from sweeper.records.manifest import read_manifest
    from sweeper.records.table import fmt, make_console

    audit = edge_audit(args.dir)
    manifest = read_manifest(args.dir)
    if args.format == "json":
        print(json.dumps({"name": manifest.name, "dir": str(args.dir), "imported": manifest.is_imported, **audit},
                         indent=2, default=str))
        return 0
    if args.format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(EDGE_COLUMNS), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in audit["edges"]:
            writer.writerow({**row, "tried_lo": row["tried"][0], "tried_hi": row["tried"][1],
                             "next_lrs": " ".join(f"{v:.6g}" for v in row["next_lrs"])})
        sys.stdout.write(buffer.getvalue())
        return 0
    from sweeper.records.layout import Col, Layout, print_layout

    console = make_console()
    title = f"{manifest.name} ({args.dir}): optima at an edge of the learning rates tried"
    table = Layout(title, [
        Col("method", keep=True, justify="left"), Col("size", keep=True, justify="left"), Col("seed", keep=True),
        Col("side", keep=True, justify="left"), Col("best lr", keep=True), Col("best loss", keep=True),
        Col("tried", priority=2, justify="left"), Col("pts", priority=3), Col("next lr", keep=True, justify="left")])
    for r in audit["edges"]:
        table.add_row(r["method"], r["size"], str(r["seed"]), r["side"], fmt(r["best_lr"], ".4g"),
                      fmt(r["best_loss"], ".4f"), f"{r['tried'][0]:.4g}..{r['tried'][1]:.4g}", str(r["n_points"]),
                      " ".join(f"{v:.4g}" for v in r["next_lrs"]))
    print_layout(console, table, wide=args.wide)
    console.print(f"{len(audit['edges'])} of {audit['cells_with_optimum']} optima are one-sided (low: the lowest LR "
                  "tried is the best, high: the highest, both: one LR); next lr: what a bracketing search would try "
                  "next (decide, stepping by the grid ratio)", highlight=False)
    if audit["no_optimum"]:
        console.print(f"{len(audit['no_optimum'])} cells have no optimum (every run diverged): "
                      + ", ".join(r["cell_id"] for r in audit["no_optimum"]), highlight=False, style="dim")
    return 0


def loop_counts(rows: list[dict[str, Any]]) -> list[int]:
    """Every loop count some cell's best point was evaluated at, ascending (none: no column)."""
    from sweeper.core.rows import decode_loop_losses  # (see `run`)

    return sorted({c for r in rows for c in (decode_loop_losses(r.get("best_loop_losses")) or {})})


def loops_text(row: dict[str, Any], counts: list[int]) -> str:
    """'3.521 3.310 3.224 3.201': the best point's loss at each count ('—' where it has none)."""
    from sweeper.core.rows import decode_loop_losses  # (see `run`)

    losses = decode_loop_losses(row.get("best_loop_losses")) or {}
    return " ".join(f"{losses[c]:.3f}" if c in losses else "—" for c in counts) if losses else "—"


def status_text(row: dict[str, Any]) -> str:
    """The cell's status; a cell that found no usable learning rate says why."""
    status = str(row["status"])
    if status == "stalled":
        return "all diverged/stalled" if row.get("n_diverged") else "all stalled"
    if status == "diverged":
        return "all diverged"
    return status


def print_noise_notes(console: Any, rows: list[dict[str, Any]], seeds: bool) -> None:
    """What each noise column is (the evaluation SE, the seeds' sd, which one `vs neighbour` used)."""
    from sweeper.records.results import noise_note  # (see `run`)

    console.print("eval SE: the best point's standard error over the held-out batches (common to every point: all are "
                  "evaluated on the same batches); it says nothing of how another seed would have trained",
                  highlight=False, style="dim")
    if seeds:
        console.print("seeds' sd: across the seeds of the (method, size), the standard deviation of the cells' best "
                      "losses (the training noise; with 2 seeds, 1 degree of freedom)", highlight=False, style="dim")
    console.print("vs neighbour: the nearest ok neighbour's loss minus the best, in units of the noise of that "
                  "difference: 'seed sd' = the seeds' sd of the same difference (2+ seeds trained both LRs), "
                  "'eval SE' = its paired evaluation SE", highlight=False, style="dim")
    if any(r["within_noise"] for r in rows):
        console.print(noise_note(), highlight=False, style="dim")
    if any(r.get("stalled_loss") is not None for r in rows):
        console.print("(stalled): a cell with no ok point shows its stalled points' lowest loss, never an optimum",
                      highlight=False, style="dim")


def best_loss_text(row: dict[str, Any]) -> str:
    from sweeper.records.table import fmt  # beside the table's other imports (start-up time)

    if row["best_loss"] is None and row.get("stalled_loss") is not None:
        return f"{row['stalled_loss']:.4f} (stalled)"
    return fmt(row["best_loss"], ".4f")  # its evaluation SE is the next column


def neighbour_text(row: dict[str, Any]) -> Any:
    """'+0.012 (1.4 SE) within noise' for the best point's nearest ok neighbour (a styled Text when within noise)."""
    from rich.text import Text  # (see `run`)

    if row.get("neighbour_gap") is None:
        return gaps_text(row)
    seeds = row.get("noise") == "seeds"
    se = row["seed_sd_gap"] if seeds else row["neighbour_gap_se"]
    unit = "seed sd" if seeds else "eval SE"
    ratio = row["neighbour_gap"] / se if se else math.inf
    text = (f"{row['neighbour_gap']:+.4f} ({ratio:.1f} {unit})" if ratio < 100 else
            f"{row['neighbour_gap']:+.4f} (>99 {unit})")
    return Text(f"{text} within noise", style="bold yellow") if row["within_noise"] else text


def gaps_text(row: dict[str, Any]) -> str:
    """Without standard errors (an imported table): the loss gap to each neighbour, 'low +0.0120 · high diverged';
    'edge' on a side with none tried; '—' without a best point."""
    if row.get("best_lr") is None:
        return "—"
    parts = []
    for side in ("low", "high"):
        state, gap = row.get(f"{side}_state"), row.get(f"{side}_gap")
        parts.append(f"{side} " + ("edge" if state is None else f"{gap:+.4f}" if gap is not None else str(state)))
    return " · ".join(parts)
