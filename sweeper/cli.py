"""The `sweeper` command line: one subcommand per module in `sweeper.commands`.

Each command module defines `register(subparsers)` (adds its parser and sets
`func=run`) and `run(args) -> int`. Commands import heavy libraries (torch, Ray)
inside `run`, never at module import, so that `sweeper validate` and every error
about bad input answer in well under a second.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from sweeper import __version__
from sweeper.cliargs import finish, subparser_of
from sweeper.core.errors import UserError

COMMANDS = [
    "validate",
    "schema",
    "models",
    "trial",
    "launch",
    "status",
    "optima",
    "export",
    "replay",
    "fit",
    "track",
    "dashboard",
    "plots",
    "bench",
    "gamma",
    "data",
    "completion",
]


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 2 and a one-line message for bad arguments (its default too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sweeper", description="LR sweeps, fits and dashboards for depth-scaling studies.")
    parser.add_argument("--version", action="version", version=f"layerrope-sweeper {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"sweeper.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sweeper.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    extra = finish(args, extra)
    if extra:  # argparse would print the top-level usage; the subcommand's is the helpful one
        subparser_of(parser, getattr(args, "command", None)).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        for line in exc.lines():
            sys.stderr.write(f"error: {line}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        # `sweeper optima DIR | head`: the reader left; not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # after BrokenPipeError (an OSError too): a full disk, a size limit... one line, exit 1
        from sweeper.records.storage_errors import DISK_ERRNOS, describe  # sqlite3 and co.: not on every start

        if exc.errno not in DISK_ERRNOS:
            raise
        sys.stderr.write(f"error: {describe(exc)}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
