"""`sweeper bench MODE ...`: the benchmark wing's harnesses beside one cell's training throughput
(`sweeper bench [options]`) and the GPU suite (`sweeper bench --suite gpu`). One sub-parser per mode:

    sweeper bench model {deep,step,plain} [...]   the networks alone: a deep step's memory, training steps, stacked vs plain
    sweeper bench memory [...]                    the memory model against a CPU measurement of a few steps
    sweeper bench dashboard [...]                 the dashboard: first payload, updates, browser, sweep slowdown
    sweeper bench simcheck DIR [--timings]        a simulated sweep against its planted truth (and its readers' times)
    sweeper bench prior --yaml SWEEP [...]        points per cell of `prior: extrapolate` on planted methods
    sweeper bench coverage [...]                  how often the fits' 95% intervals hold the truth
    sweeper bench corpus                          the built-in corpus: size, build and reopen times, near-twins

(and the hidden `sweeper bench worker PLAN RESULTS`, the GPU suite's worker process). Each harness lives in
`sweeper.bench` or `sweeper.sim`; a mode imports it when it runs, not at the top (start-up time: the CLI
imports every command module on each start).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format


def register_modes(parser: argparse.ArgumentParser) -> None:
    """The modes as sub-parsers of `sweeper bench` (no mode: the training throughput of one cell)."""
    modes = parser.add_subparsers(dest="bench_mode", metavar="MODE", parser_class=_mode_parser(type(parser)), prog="sweeper bench",
                                  title="other benchmarks (sweeper bench MODE --help)")

    p = modes.add_parser("model", help="the networks alone: deep (one forward+backward of a deep model: time, "
                                       "memory), step (training steps vs the matmul peak), plain (stacked vs nn.Linear)",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.bench.model"
    p.add_argument("which", choices=["deep", "step", "plain"], help="which benchmark")
    p.add_argument("--depth", type=int, default=None, help="blocks (default 512 deep, 8 otherwise)")
    p.add_argument("--scheme", default="pre", help="normalization scheme (default pre)")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 2 deep, 8 otherwise)")
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence of `deep` (default 64)")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary (default 32000 step, 256 plain)")
    p.add_argument("--stack", type=int, default=1, help="members of the stacked model of `step` (default 1)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5; at most 3 for deep)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of `plain` (default 3)")
    p.set_defaults(func=run_model)

    p = modes.add_parser("memory", help="stack: auto's memory model against a CPU measurement of a few training steps",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.bench.memory"
    for name, default, meaning in (("stack", 2, "members"), ("width", 128, "model width"), ("depth", 8, "blocks"),
                                   ("seq-len", 128, "tokens per sequence"), ("batch", 16, "sequences per step"),
                                   ("vocab", 4096, "vocabulary"), ("micro-batch", 0, "sequences per forward (0: all)"),
                                   ("steps", 3, "training steps")):
        p.add_argument(f"--{name}", type=int, default=default, help=f"{meaning} (default {default})")
    p.add_argument("--no-fused-loss", action="store_true", help="the model's own head + cross-entropy")
    p.set_defaults(func=run_memory)

    p = modes.add_parser("dashboard", help="the dashboard on a synthetic store: first payload, incremental updates, "
                                           "browser render, how much a polled dashboard slows a sweep",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.bench.dashboard"
    p.add_argument("--points", type=int, default=10_000, help="points in the synthetic store (default 10000)")
    p.add_argument("--curve-rows", type=int, default=1_000_000, help="learning-curve rows (default 1000000)")
    p.add_argument("--updates", type=int, default=10, help="incremental updates to time (default 10)")
    p.add_argument("--dir", help="build the store here (default: a temporary folder, removed after)")
    p.add_argument("--no-browser", action="store_true", help="skip the Chromium measurements")
    p.add_argument("--no-writer", action="store_true", help="skip the sweep-slowdown measurement")
    add_format(p)
    p.set_defaults(func=run_dashboard)

    p = modes.add_parser("simcheck", help="a simulated sweep (launch --simulate) against its planted truth",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.sim.check"
    p.add_argument("dir", metavar="DIR", help="the simulated sweep's directory")
    p.add_argument("--band", type=float, default=0.25, help="percent above the planted optimum (default 0.25)")
    p.add_argument("--surface", help="the surface file (default: the one the manifest names)")
    p.add_argument("--timings", action="store_true",
                   help="also time sweeper status / optima / fit and the dashboard's first payload on DIR")
    add_format(p)
    p.set_defaults(func=run_simcheck)

    p = modes.add_parser("prior", help="points per cell of `prior: extrapolate` on planted methods (confidence vs "
                                       "prediction interval)",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.sim.prior"
    p.add_argument("--yaml", required=True, help="a sweep with `model.depths` (its top-level lr policy is used)")
    p.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE", help="override an lr key")
    p.add_argument("--replicates", type=int, default=200, help="planted methods per interval kind (default 200)")
    p.add_argument("--exponent", type=float, default=-0.6, help="planted LR-law exponent in depth (default -0.6)")
    p.add_argument("--scatter", type=float, default=0.2, help="sd of log optimum about the law (default 0.2)")
    p.add_argument("--noise", type=float, default=0.0005, help="relative seed noise of a final loss (default 0.0005)")
    p.add_argument("--first-error", type=float, default=2.0,
                   help="the smallest depth's optimum lies within this many √2 steps of the YAML's centre (default 2)")
    p.add_argument("--seed", type=int, default=0, help="the planted methods' seed (default 0)")
    p.set_defaults(func=run_prior)

    p = modes.add_parser("coverage", help="how often the fits' 95%% intervals contain the planted truth",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.bench.coverage"
    p.add_argument("--draws", type=int, default=400, help="synthetic sweeps per setting (default 400)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per fit (default 1000)")
    p.add_argument("--noise", type=float, default=0.01, help="standard deviation of the loss noise (default 0.01)")
    p.add_argument("--points", type=int, nargs="+", default=[4, 5, 6, 8], help="numbers of sizes (default 4 5 6 8)")
    p.add_argument("--schemes", nargs="+", default=None, help="bootstrap schemes (default: every one)")
    p.add_argument("--shared-e", action="store_true", help="measure the shared-E fit (3 methods) instead")
    p.set_defaults(func=run_coverage)

    p = modes.add_parser("corpus", help="the built-in corpus: its size, the first build, a reopen, near-twins",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.doc_module = "sweeper.bench.corpus"
    p.set_defaults(func=run_corpus)

    # The GPU suite's worker process (`sweeper.bench.suite.worker_command`): no help, so not listed.
    p = modes.add_parser("worker", description="the GPU suite's worker: runs PLAN's checks, appends events to RESULTS")
    p.add_argument("plan", metavar="PLAN", help="the checks to run (JSON)")
    p.add_argument("results", metavar="RESULTS", help="where to append one JSON line per event")
    p.set_defaults(func=run_worker)


def _mode_parser(base: type[argparse.ArgumentParser]) -> type[argparse.ArgumentParser]:
    """`base` (the CLI's parser: exit code 2, one line) whose --help shows its harness module's docstring,
    read only when help is asked for (reading them on every start would slow every command)."""

    class ModeParser(base):  # type: ignore[valid-type, misc]
        doc_module: str | None = None

        def format_help(self) -> str:
            if self.doc_module and self.description is None:
                self.description = _doc(self.doc_module)
            return super().format_help()

    return ModeParser


def _doc(module: str) -> str:
    """A module's docstring without importing it (it may load torch)."""
    import ast  # here: only for --help
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return ""
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""


def run_model(args: argparse.Namespace) -> int:
    from sweeper.bench.model import run  # torch: only when the mode runs

    print(json.dumps(run(args.which, args)))
    return 0


def run_memory(args: argparse.Namespace) -> int:
    from sweeper.bench.memory import measure  # torch: only when the mode runs

    print(json.dumps(measure(args)))
    return 0


def run_dashboard(args: argparse.Namespace) -> int:
    from sweeper.bench.dashboard import print_report, run  # polars, plotly: only when the mode runs

    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(report)
    return 0


def run_simcheck(args: argparse.Namespace) -> int:
    from sweeper.sim.check import check  # polars, pydantic: only when the mode runs

    out: dict[str, Any] = check(args.dir, args.band, args.surface)
    if args.timings:
        from sweeper.bench.readers import reader_timings  # the dashboard: only with --timings

        out["reader_timings"] = reader_timings(args.dir)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    rows = out.pop("cell_rows")
    for key, value in out.items():
        print(f"{key}: {json.dumps(value, default=str)}")
    print(f"(per cell: {len(rows)} rows; --json for them)")
    return 0


def run_prior(args: argparse.Namespace) -> int:
    from sweeper.sim.prior import print_report  # numpy, scipy: only when the mode runs

    print_report(args)
    return 0


def run_coverage(args: argparse.Namespace) -> int:
    from sweeper.analysis.fits.powerlaw import SCHEMES  # scipy: only when the mode runs
    from sweeper.bench.coverage import print_coverage
    from sweeper.core.errors import UserError

    args.schemes = list(SCHEMES) if args.schemes is None else args.schemes
    unknown = [s for s in args.schemes if s not in SCHEMES]
    if unknown:
        raise UserError(f"--schemes {' '.join(unknown)}: unknown (choose from {', '.join(SCHEMES)})")
    print_coverage(args)
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    from sweeper.bench.corpus import print_timings  # numpy: only when the mode runs

    print_timings()
    return 0


def run_worker(args: argparse.Namespace) -> int:
    from sweeper.bench.worker import run  # torch: only in the worker process

    run(Path(args.plan), Path(args.results))
    return 0
