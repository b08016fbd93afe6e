"""`sweeper doctor [--address ADDR] [--storage URI] [--yaml SWEEP.yaml] [--format json]`: can every node
run this sweep?

Each node (a Ray task pinned to each alive node with `--address`; this machine without) writes a
marker in the sweep's storage, reads it back and deletes it, looks for the data a sweep file names,
writes to its cache and scratch folders, and reports its GPUs, CPUs and free disk. Exit 0 when every
check passed, 1 with one line per problem (a storage problem says "storage"), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format, add_wide
from sweeper.core.errors import UserError

DEFAULT_STORAGE = "runs"  # where a sweep without `output` or `ray.storage` writes (runs/NAME/ray)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check that every node can reach the sweep's storage and data, and list its GPUs, CPUs and disk",
        description=(
            "One check per node: write, read back and delete a marker in the storage, read the data a sweep "
            "file names, write the cache and scratch folders; report GPUs (name, memory), CPUs and free disk. "
            "Exit 0 when all is well, 1 with each problem named."
        ),
    )
    parser.add_argument("--address", help="a Ray cluster to check every node of ('auto' or HOST:PORT; default: "
                                          "this machine only, without starting Ray)")
    parser.add_argument("--storage", metavar="URI",
                        help="the storage to check (a path, s3://bucket/path, gs://...; default: the sweep file's "
                             f"ray.storage, else its output's ray/ folder, else ./{DEFAULT_STORAGE})")
    parser.add_argument("--yaml", metavar="SWEEP.yaml", help="a sweep file: its data paths, storage and scratch")
    add_format(parser)
    add_wide(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.run.ray_address import check_address
    from trials.storage import Storage, resolve

    check_address(args.address)
    scratch, data_paths = None, []
    if args.yaml:
        storage, scratch, data_paths = _from_yaml(args.yaml, args.storage)
    else:
        uri = args.storage or os.path.abspath(DEFAULT_STORAGE)
        try:
            storage = Storage(uri, resolve(uri)[1])
        except OSError as exc:
            raise UserError(f"--storage {uri}: {exc}") from None
    if args.address:
        from sweeper.run import doctor  # Ray: only to check a cluster

        doctor.join(args.address)
        try:
            found = doctor.check_cluster(storage, scratch, data_paths)
        finally:
            import ray  # (see above)

            ray.shutdown()
    else:
        from sweeper.run.nodes import check_local  # (see above)

        found = check_local(storage, scratch, data_paths)
    if args.json:
        print(json.dumps(found.to_dict(), indent=2, default=str))
    else:
        _print(found, wide=args.wide)
    return 0 if found.ok else 1


def _from_yaml(path: str, storage: str | None) -> tuple[Any, str | None, list[str]]:
    """(the sweep's storage, scratch, data paths) from a sweep file (`storage`: --storage instead of its own)."""
    from sweeper.run.storage import sweep_storage  # (see `run`)
    from sweeper.search.planner import build_plan
    from sweeper.spec.schema import load_sweep

    validated = load_sweep(path, need_data=False)
    plan = build_plan(validated.config, source=Path(path))
    paths: list[str] = []
    for cell in plan.cells:
        for value in (cell.data.path, cell.data.val_path):
            if value and "://" not in value and value not in paths:
                paths.append(value)
    return sweep_storage(plan, storage), plan.config.ray.scratch, paths


def _print(found: Any, wide: bool = False) -> None:
    from sweeper.records.layout import Col, Layout, print_layout  # (see `run`)
    from sweeper.records.table import make_console

    console = make_console()
    table = Layout(f"storage: {found.storage}", [
        Col("node", keep=True, justify="left"), Col("storage", keep=True, justify="left"),
        Col("GPUs", priority=2, justify="left"), Col("CPUs", priority=3, justify="left"),
        Col("scratch free GB", priority=3, short="free GB", justify="left"), Col("data", priority=2, justify="left")])
    for n in found.nodes:
        gpus = ", ".join(f"{g['name']} {g['memory_gb']:g} GiB" for g in n.get("gpus") or []) or "none"
        data = n.get("data") or {}
        table.add_row(str(n.get("node")), {True: "ok", False: "FAILED", None: "—"}[n.get("storage_ok")], gpus,
                      str(n.get("cpus")), str(n.get("disk_free_gb")),
                      f"{sum(data.values())}/{len(data)} readable" if data else "—")
    print_layout(console, table, wide=wide)
    for problem in found.problems:
        console.print(f"problem: {problem}", highlight=False, soft_wrap=True)
    console.print("ok" if found.ok else f"{len(found.problems)} problem(s)", highlight=False)
