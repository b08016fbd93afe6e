"""`sweeper completion SHELL`: a tab-completion script for bash, zsh or tcsh, generated from the
same argparse parser the CLI runs (shtab), so it never drifts from the commands and their flags."""

from __future__ import annotations

import argparse
from typing import Any

from sweeper.commands.parser import build_parser

SHELLS = ("bash", "zsh", "tcsh")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, tcsh)",
        description=(
            "Print a tab-completion script for SHELL. bash: `sweeper completion bash > "
            "~/.local/share/bash-completion/completions/sweeper`; zsh: `sweeper completion zsh > "
            "\"${fpath[1]}/_sweeper\"`; or `eval \"$(sweeper completion bash)\"` in your shell's rc file."
        ),
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top (start-up time): the CLI imports every command module when it starts.
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0
