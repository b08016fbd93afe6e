"""`sweeper status DIR`: the per-cell table of a running or finished sweep (from any terminal)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.commands.cliargs import add_format, add_wide
from sweeper.core.errors import UserError

if TYPE_CHECKING:
    from sweeper.records.manifest import Manifest


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show a sweep's cells (running or finished), or rebuild its store with --repair",
        description=("Show every cell of a sweep: status, points done/running/diverged/stalled, best and interpolated "
                     "LR, the stall baseline (the frequency-only loss on the eval batches a stalled point did not beat) and the "
                     "data's unigram entropy."),
    )
    parser.add_argument("dir", help="the sweep directory")
    add_format(parser)
    add_wide(parser)
    parser.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted")
    parser.add_argument("--repair", action="store_true",
                        help="rebuild the results store from the ledger (the old store is moved aside, not deleted)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.records.manifest import read_manifest
    from sweeper.records.table import make_console

    manifest = read_manifest(args.dir)
    console = make_console()
    if args.repair:
        from sweeper.records.ledger import OptunaLedger, storage_url  # Optuna (a second): for a repair only
        from sweeper.records.repair import rebuild_store

        if manifest.is_imported:
            raise manifest.no_ledger(args.dir, "nothing to rebuild the store from (import the table again)")
        url = manifest.ledger
        if not url:
            raise UserError(f"{args.dir}: the manifest names no ledger; nothing to rebuild from")
        local = Path(args.dir) / "ledger.db"
        if url.startswith("sqlite:") and url.endswith("/ledger.db") and local.is_file():
            # The default ledger lives in the sweep directory; the manifest holds its absolute path at
            # launch time, which is another sweep's ledger after the directory was moved or copied.
            url = storage_url("sqlite", Path(args.dir))
        moved = rebuild_store(Path(args.dir), OptunaLedger(url), loop_axis=manifest.loop_axis)
        console.print(f"rebuilt {args.dir}/store from the ledger ({url}); the old store is in {moved}",
                      highlight=False)
    if args.watch is not None:
        if not args.watch > 0:
            raise UserError(f"--watch: must be > 0 seconds (got {args.watch})")
        from rich.live import Live  # for --watch only

        with Live(_render(args.dir, manifest, console), console=console, auto_refresh=False) as live:
            try:
                while True:
                    time.sleep(args.watch)
                    live.update(_render(args.dir, read_manifest(args.dir), console), refresh=True)
            except KeyboardInterrupt:
                return 0
    if args.json:
        from sweeper.records.results import cell_rows, stall_baselines  # the same fields as `sweeper optima --json`

        rows = cell_rows(args.dir)
        entropy = manifest.unigram_entropy
        busy = {}
        if manifest.is_simulated:
            from sweeper.sim.devices import busy_figures  # a simulated sweep's busy log

            pool = float((manifest.simulated.pool or {}).get("gpus") or 0)  # type: ignore[union-attr]
            busy = busy_figures(args.dir, pool) or {}
        print(json.dumps({"name": manifest.name, "dir": str(args.dir), "simulated": manifest.is_simulated, **busy,
                          "unigram_entropy": entropy.to_json() if entropy is not None else None,
                          "stall_margin": manifest.stall_margin,
                          # the frequency-only losses on the eval batches the points were judged against
                          "stall_baselines": stall_baselines(args.dir), "cells": rows}, indent=2, default=str))
        return 0
    from sweeper.records.layout import print_layout  # (see above)

    parts, table = _parts(args.dir, manifest)
    for part in parts:
        console.print(part)
    print_layout(console, table, wide=args.wide)
    return 0


def _render(sweep_dir: str, manifest: Manifest, console: Any) -> Any:
    """The status as one renderable (`--watch` redraws it)."""
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from rich.console import Group

    from sweeper.records.layout import fitted

    parts, table = _parts(sweep_dir, manifest)
    return Group(*parts, fitted(console, table))


def _parts(sweep_dir: str, manifest: Manifest) -> tuple[list[Any], Any]:
    """The heading lines (counts, freshness, the stall baseline) and the cells' table (a `Layout`)."""
    from rich.text import Text  # (see `_render`)
    from sweeper.records.results import cell_rows, freshness, progress, stall_baselines
    from sweeper.records.table import cells_table, counts_line, status_counts, unigram_line

    rows = cell_rows(sweep_dir)  # the driver's cells with the failed / infra_failed counts `optima` adds
    age = freshness(sweep_dir)
    when = f"updated {age:.0f} s ago" if age is not None else "no results yet"
    last = manifest.launches[-1] if manifest.launches else None
    tail = ""
    if last is not None and last.wall_seconds is not None:
        tail = f" · last launch: wall {last.wall_seconds:.0f} s, training {last.train_seconds or 0:.0f} s summed"
    head = Text(f"{manifest.name} ({sweep_dir}): {counts_line(status_counts(rows))} · {when}{tail}", style="bold")
    label = manifest.simulated_label or manifest.imported_label
    if label:
        head.append(f"\n{label}", style="bold yellow")
    parts: list[Any] = [head]
    data = unigram_line(manifest, stall_baselines(sweep_dir))
    if data:
        parts.append(Text(data, style="dim"))
    return parts, cells_table(rows, progress=progress(sweep_dir))
