"""`sweeper schema`: the JSON Schema of sweep files, for editor completion and checking."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sweeper.commands.cliargs import add_out
from sweeper.core.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of sweep YAML files",
        description=(
            "Print the JSON Schema of sweep files. With yaml-language-server (VS Code's YAML extension), "
            "put `# yaml-language-server: $schema=sweep.schema.json` at the top of a sweep file."
        ),
    )
    add_out(parser, "write to this file instead of standard output", aliases=("-o", "--output"), metavar="FILE")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.spec.schema import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=False)
    if args.out:
        try:
            with open(args.out, "w") as fh:
                fh.write(text + "\n")
        except OSError as exc:
            raise UserError(f"{args.out}: cannot write ({exc.strerror or exc})") from None
    else:
        print(text)
    return 0
