"""`sweeper export DIR [--cell CELL ...] --out OUT`: the best weights each cell kept, as safetensors.

A sweep keeps, per cell, the final weights of its current best point (`keep_weights: best`, the
default; `sweeper.run.weights`). This writes them to OUT/<method>_<size>_s<seed>/ as
`model.safetensors` plus a `config.json` whose `model` entry `models.build_model` takes
(`models.exported.load_exported` does both). Nothing in the sweep directory changes.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format, add_out
from sweeper.core.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write each cell's best weights (safetensors + config) to a folder",
        description=(
            "Copy the weights each cell kept (the final weights of its best point) to OUT/<cell>/: "
            "model.safetensors and config.json (the ModelConfig, LR, point and loss). Load one with "
            "models.exported.load_exported(folder)."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    parser.add_argument("--cell", action="append", default=[], metavar="CELL",
                        help="only these cells: a cell id (layerrope/L48/s0) or a pattern (layerrope/*); repeatable")
    add_out(parser, "the folder to write into (created if missing)", required=True, metavar="DIR")
    add_format(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.records.manifest import read_manifest
    from sweeper.run.weights import WEIGHTS, folder_name, kept_point

    manifest = read_manifest(args.dir)
    if manifest.is_imported:
        raise manifest.no_ledger(args.dir, "no trained weights to export")
    root = Path(args.dir)
    cells = sorted(manifest.cells)
    chosen = [c for c in cells if not args.cell or any(fnmatch.fnmatchcase(c, p) for p in args.cell)]
    unmatched = [p for p in args.cell if not any(fnmatch.fnmatchcase(c, p) for c in cells)]
    if unmatched:
        from sweeper.spec.catalog import suggest  # difflib: for this message only

        raise UserError(f"--cell {unmatched[0]}: no such cell in {root}{suggest(unmatched[0], cells)} "
                        f"(cells: {', '.join(cells[:6])}{', ...' if len(cells) > 6 else ''})")
    found = {c: root / WEIGHTS / folder_name(c) for c in chosen}
    have = {c: f for c, f in found.items() if (f / "model.safetensors").is_file() and kept_point(f)}
    if not have:
        why = ("the sweep was launched with keep_weights: none" if manifest.keep_weights == "none" else
               "no cell has finished a point yet, or the sweep ran before weights were kept")
        raise UserError(f"{root}: no kept weights for {'these cells' if args.cell else 'any cell'} ({why})")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    written = []
    for cid, folder in have.items():
        target = out / folder.name
        tmp = out / f".{folder.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        info = json.loads((target / "config.json").read_text())
        written.append({"cell_id": cid, "folder": str(target), "point_id": info.get("point_id"), "lr": info.get("lr"),
                        "loss": info.get("loss"), "steps": info.get("steps")})
    missing = [c for c in chosen if c not in have]
    if args.json:
        print(json.dumps({"out": str(out), "cells": written, "without_weights": missing}, indent=2))
        return 0
    for row in written:
        loss = f"{row['loss']:.4f}" if isinstance(row["loss"], (int, float)) else "—"
        print(f"{row['cell_id']}: lr {row['lr']:.3g}, loss {loss} -> {row['folder']}")
    if missing:
        print(f"no kept weights yet for {len(missing)} cell(s): {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}")
    print(f"wrote {len(written)} model(s) to {out}; load one with models.exported.load_exported(folder)")
    return 0
