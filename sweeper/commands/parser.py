"""The `sweeper` argument parser: one subcommand per module of `sweeper.commands` (`COMMANDS`).

Shared by the entry point (`sweeper.cli.main`) and `sweeper completion` (shtab reads the same
parser). Each command module is imported here by name, when the parser is built: they import
only the standard library at module level, so building it stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sweeper import __version__

COMMANDS = [
    "validate",
    "schema",
    "models",
    "trial",
    "launch",
    "doctor",
    "status",
    "optima",
    "compare",
    "export",
    "replay",
    "import",
    "fit",
    "track",
    "dashboard",
    "plots",
    "bench",
    "gamma",
    "data",
    "completion",
]

MODULES = {"import": "import_table"}  # `import` is a keyword: its module is named otherwise


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
            module = importlib.import_module(f"sweeper.commands.{MODULES.get(name, name)}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sweeper.commands.{MODULES.get(name, name)}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser
