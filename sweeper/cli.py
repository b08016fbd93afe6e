"""The `sweeper` command line's entry point (`sweeper = sweeper.cli:main`, and `python -m sweeper.cli`):
parse the subcommand (`sweeper.commands.parser`), run it, and turn what the user can fix into one
line and an exit code.

Each command module defines `register(subparsers)` (adds its parser and sets
`func=run`) and `run(args) -> int`. Commands import heavy libraries (torch, Ray)
inside `run`, never at module import, so that `sweeper validate` and every error
about bad input answer in well under a second.

The top of the layers: nothing else in the project imports this module.
"""

from __future__ import annotations

import os
import sys

from sweeper.commands.cliargs import finish, subparser_of
from sweeper.commands.parser import build_parser
from sweeper.core.errors import UserError


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
