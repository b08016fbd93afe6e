"""Run many `sweeper` command lines in one fresh Python process (the hostile-input tests' batch mode).

    python tests/reliability/cli_batch.py < commands.json > results.json

stdin: a JSON list of argument lists. For each, `sweeper.cli.main(args)` runs with its stdout and
stderr captured; the result is its exit code (SystemExit included), both outputs, the traceback of
any exception that escaped `main` (a bug: the CLI must turn bad input into `error:` lines), and its
CPU seconds. Printed at the end: every result and the heavy modules (torch, Ray, polars...) the
process imported along the way — a rejection must not need them, and across the whole batch none
may appear. One interpreter start-up for all cases instead of one per case (~0.5 s of CPU each).
"""

from __future__ import annotations

import io
import json
import sys
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout

HEAVY = ("torch", "ray", "polars", "pyarrow", "optuna", "sqlalchemy", "scipy", "plotly", "numpy")


def run_one(args: list[str]) -> dict[str, object]:
    from sweeper.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = None
    started = time.process_time()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 (reported, and the test fails on it)
            code, escaped = None, traceback.format_exc()
    return {"args": args, "code": code, "out": out.getvalue(), "err": err.getvalue(), "traceback": escaped,
            "cpu": time.process_time() - started}


def main() -> None:
    commands = json.load(sys.stdin)
    results = [run_one(args) for args in commands]
    heavy = sorted(name for name in HEAVY if name in sys.modules)
    json.dump({"results": results, "heavy_modules": heavy}, sys.stdout)


if __name__ == "__main__":
    main()
