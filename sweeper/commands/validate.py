"""`sweeper validate FILE [KEY=VALUE ...]`: check a sweep file without running or writing anything.

It runs every check `sweeper launch` makes before it trains: the schema (every problem at once, each
as FILE:LINE: field: problem), then the planner that `launch` and `launch --dry-run` use (every cell's
model, counted; with `stack: auto`, every cell's single member fitting its trial's memory), so that a
file that validates is never refused by launch's planning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format, add_overrides, plural
from sweeper.core.ids import size_labels
from sweeper.search.bracketing import initial_grid


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a sweep YAML file (every problem at once; nothing is written)",
        description="Check a sweep YAML file. Prints one line per problem and exits 2 if there are any.",
    )
    parser.add_argument("file", help="the sweep YAML file")
    add_overrides(parser)
    add_format(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.spec.schema import load_sweep  # pydantic

    validated = load_sweep(args.file, overrides=args.overrides)
    cfg = validated.config
    from sweeper.search.planner import build_plan  # the planner launch uses (models' counting): once the file is valid

    plan = build_plan(cfg, source=Path(args.file))
    from sweeper.run.machine import checked_memory  # (see above)

    checked_memory(plan)  # stack: auto refuses a cell that cannot fit one member, as launch does
    for warning in validated.warnings:
        sys.stderr.write(f"warning: {warning}\n")
    sizes = size_labels(depths=cfg.model.depths, loops=cfg.model.loops, sizes=[s.name for s in cfg.model.sizes or []])
    cells = len(cfg.methods) * len(sizes) * len(cfg.seeds)
    if args.json:
        doc: dict[str, Any] = {"ok": True, "cells": cells, "sizes": sizes, "config": cfg.model_dump(mode="json")}
        doc["warnings"] = validated.warnings
        doc["overrides"] = validated.overrides
        print(json.dumps(doc, indent=2))
        return 0
    print(
        f"{args.file}: ok: {plural(len(cfg.methods), 'method')} × {plural(len(sizes), 'size')} × "
        f"{plural(len(cfg.seeds), 'seed')} = {plural(cells, 'cell')}"
    )
    for method in cfg.methods:
        grid = initial_grid(cfg.lr_for(method).to_policy())
        label = method.name if method.scheme_name == method.name else f"{method.name} ({method.scheme_name})"
        print(f"  {label}: initial grid {', '.join(f'{lr:.3g}' for lr in grid)}")
    return 0
