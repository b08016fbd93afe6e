"""The conventions every `sweeper` command shares, in one place.

- `--format table|json[|csv]` wherever a command prints results, with `--json` as its alias
  (`args.json` stays true for `--format json`, so a command may test either);
- `--out` for the file or folder a command writes (older spellings stay as aliases);
- `KEY=VALUE` overrides of a sweep file (`train.steps=400`), on the commands that read one.

Standard library only: the CLI imports this on every start.
"""

from __future__ import annotations

import argparse
from typing import Any

FORMATS = ("table", "json")


def add_format(parser: argparse.ArgumentParser, choices: tuple[str, ...] = FORMATS, default: str = "table") -> None:
    """`--format {choices}` and its alias `--json`."""
    parser.add_argument("--format", choices=choices, default=default,
                        help=f"how to print the results: {', '.join(choices)} (default {default})")
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")
    parser.set_defaults(_has_format=True)


def add_out(parser: argparse.ArgumentParser, help: str, *, aliases: tuple[str, ...] = (), required: bool = False,
            metavar: str = "PATH") -> None:
    """`--out PATH` (and older spellings of it, kept working)."""
    parser.add_argument("--out", *aliases, dest="out", required=required, metavar=metavar, help=help)


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """Positional `KEY=VALUE` overrides of the sweep file's settings."""
    parser.add_argument(
        "overrides", nargs="*", default=[], metavar="KEY=VALUE",
        help="override a setting of the file, e.g. train.steps=400 lr.center=1e-3 methods[0].scheme_options.beta_init=0.5 "
             "(values are read as YAML)",
    )


def finish(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """After parsing: `args.json` from `--format`, and `KEY=VALUE` words argparse left over (given after an
    option) moved to the overrides. Returns what is still unrecognized."""
    if getattr(args, "_has_format", False):
        args.json = args.format == "json"
    if isinstance(getattr(args, "overrides", None), list):
        words = [w for w in extra if "=" in w and not w.startswith("-")]
        args.overrides = [*args.overrides, *words]
        extra = [w for w in extra if w not in words]
    return extra


def subparser_of(parser: argparse.ArgumentParser, command: str | None) -> Any:
    """The parser of `command` (for its usage line on an error), else `parser`."""
    for action in parser._actions:  # argparse keeps subparsers here; no public accessor
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def add_wide(parser: argparse.ArgumentParser) -> None:
    """`--wide`: every column of the command's tables, whatever the terminal's width."""
    parser.add_argument("--wide", action="store_true",
                        help="print every column, wider than the terminal if need be (by default columns that do "
                             "not fit are left out, and a footnote names them)")


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 seed', '2 seeds' ('1 bus', '2 buses' with `many`)."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"
