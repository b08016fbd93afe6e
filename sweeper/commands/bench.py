"""`sweeper bench`: how fast one cell trains here, against this machine's own matmul peak.

    sweeper bench --method pre --width 128 --depth 8 --threads 2 --compile
    sweeper bench --method pre --width 128 --depth 8 --stack 4 --compare
    sweeper bench --method layerrope --width 128 --depth 512 --stack 8 --device cuda --dtype bf16 --compile --cuda-graphs

Trains a real trial (the built-in corpus, the sweeps' training loop and optimizer) for a few
warm-up steps (reported apart: the first one compiles) and then `--steps` measured steps, and
prints tokens/s (summed over the stack's members), model FLOP/s (6 N_matmul + 12 L T d per token,
and the 6 N part alone), a dense matmul peak measured in the same run on the same device, dtype
and threads, and their ratio; wall time and CPU time, and the load average (the machine may be
shared). The measured steps include evaluations as a trial runs them (one per round by default;
`--no-eval` leaves them out). `--compare` trains K separate models and one K-stack in interleaved rounds and prints
the stack's speed-up. `--json` prints everything as one JSON object.

`--suite gpu` runs every GPU check in one command (`sweeper.bench.suite`). Every other benchmark
is a mode, `sweeper bench MODE [options]` (see `sweeper bench MODE --help`): `model` (the networks
alone), `memory` (the memory model on a CPU), `dashboard`, `simcheck DIR` (a simulated sweep against
its planted truth), `prior` (the LR prior on planted methods), `coverage` (the fits' intervals),
`corpus` (the built-in corpus).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from sweeper.commands.bench_modes import register_modes
from sweeper.commands.cliargs import add_format
from sweeper.core.errors import UserError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="training throughput of one cell (tokens/s, FLOP/s, fraction of the measured matmul peak)",
        usage=("sweeper bench [options]                  one cell's training throughput\n"
               "       sweeper bench --suite gpu [options]      every GPU check, judged against its goal\n"
               "       sweeper bench MODE [options]             MODE: model, memory, dashboard, simcheck, prior, "
               "coverage, corpus"),
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--method", default="pre", help="normalization scheme (see `sweeper models`; default pre)")
    p.add_argument("--width", type=int, default=128, help="model width d (default 128)")
    p.add_argument("--depth", type=int, default=8, help="number of blocks L (default 8)")
    p.add_argument("--heads", type=int, default=None, help="attention heads (default width / 32)")
    p.add_argument("--stack", type=int, default=1, help="learning rates trained as one stacked model (default 1)")
    p.add_argument("--compile", action="store_true", help="regional torch.compile of the blocks + compiled optimizer step")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="cpu (default), or cuda (the default with --suite)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default=None, help="fp32, or bf16 autocast (default: fp32 on cpu, bf16 on cuda)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument("--batch-size", "--batch", dest="batch", type=int, default=8, help="sequences per step (default 8)")
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary (default 256, the built-in corpus's bytes; with --data-path, the corpus's)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--steps", type=int, default=30, help="measured training steps, in 5 rounds (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps before measuring, reported apart (default 3)")
    p.add_argument("--compare", action="store_true", help="also train K = --stack separate models, interleaved, and compare")
    p.add_argument("--no-fused-loss", action="store_true", help="the model's own head + cross-entropy instead of the fused one")
    p.add_argument("--sync-every", type=int, default=None, help="steps between host reads of the losses (default 1 cpu, 16 cuda)")
    p.add_argument("--cuda-graphs", action="store_true", help="capture the whole step in one CUDA graph (cuda only)")
    p.add_argument("--micro-batch", type=int, default=None, help="sequences per forward/backward (gradients accumulated)")
    p.add_argument("--no-eval", action="store_true",
                   help="measure training steps only (default: the measured steps include evaluations, as in a trial)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="steps between evaluations (default: one per measured round, --steps / 5)")
    p.add_argument("--eval-batches", type=int, default=1, help="held-out batches per evaluation (default 1)")
    p.add_argument("--cold-compile", action="store_true",
                   help="compile into an empty cache (the first step then shows the full compile time)")
    p.add_argument("--breakdown", action="store_true",
                   help="profile 5 more steps (cpu) and show where a step's time goes: GEMMs, attention, "
                        "compiled graphs, other; with the FLOP rate GEMMs and attention reach on their own")
    p.add_argument("--data", action="store_true",
                   help="also measure the data path (read + collate, host-to-device, prefetched) against the step's tokens/s")
    p.add_argument("--data-path", default=None, metavar="PATH",
                   help="train on (and with --data measure) a prepared corpus (`sweeper data prepare`) or token file; "
                        "--vocab defaults to its vocabulary")
    p.add_argument("--no-cache", action="store_true",
                   help="do not record the measurement for cost plans (default: kept per shape, device and mode in "
                        "$LAYERROPE_SWEEPER_BENCH_CACHE or ~/.cache/layerrope-sweeper/bench.json; launch --dry-run "
                        "uses it)")
    add_format(p)
    suite = p.add_argument_group("the GPU suite (every GPU check in one run; see `sweeper.bench.suite`)")
    suite.add_argument("--suite", choices=["gpu"], default=None,
                       help="run every GPU check (throughput, CUDA graphs, stacking, MFU, memory model, determinism, "
                            "a 600-step depth-48 trial, a sweep), each judged against its goal; other options are ignored")
    suite.add_argument("--quick", action="store_true", help="with --suite: the same checks at small shapes (e.g. --device cpu)")
    suite.add_argument("--out", help="with --suite: write the JSON here after every check (partial results survive a kill)")
    suite.add_argument("--budget", type=float, default=None,
                       help="with --suite: seconds the whole suite may take (default 900, quick 900); the checks run in "
                            "their order of value (correctness, memory, throughput) and what no longer fits is skipped")
    suite.add_argument("--address", help="with --suite: the Ray cluster the sweep check joins (default: a local Ray)")
    p.set_defaults(func=run)
    register_modes(p)


def _check(args: argparse.Namespace) -> None:
    for name in ("width", "depth", "stack", "seq_len", "batch", "vocab"):
        value = getattr(args, name)
        if value < 1:
            raise UserError(f"--{name.replace('_', '-')}: must be >= 1 (got {value})")
    if args.steps < 5:
        raise UserError(f"--steps: must be >= 5 (got {args.steps}); they run in 5 rounds, a matmul peak before each")
    if args.eval_batches < 1:
        raise UserError(f"--eval-batches: must be >= 1 (got {args.eval_batches})")
    for name in ("threads", "heads", "sync_every", "micro_batch", "eval_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')}: must be >= 1 (got {value})")
    if args.warmup < 1:
        raise UserError(f"--warmup: must be >= 1 (got {args.warmup}); the first step is never measured")
    heads = args.heads or max(1, args.width // 32)
    if args.width % heads or (args.width // heads) % 2:
        raise UserError(f"--width {args.width} / --heads {heads}: the head width must be a whole even number")
    if args.cuda_graphs and args.device != "cuda":
        raise UserError("--cuda-graphs: needs --device cuda")
    if args.breakdown and args.device != "cpu":
        raise UserError("--breakdown: cpu only (on a GPU, profile with torch.profiler or Nsight Systems)")
    if args.compare and args.stack < 2:
        raise UserError("--compare: give --stack K >= 2 (K separate models against one K-stack)")
    # start-up time: imported when used, not on every CLI start
    from models.registry import scheme_names

    names = scheme_names()
    if args.method not in names:
        # start-up time: imported when used, not on every CLI start
        from sweeper.spec.catalog import suggest

        raise UserError(f"--method {args.method!r}: unknown scheme{suggest(args.method, names)} (available: {', '.join(names)})")


def _data_config(args: argparse.Namespace) -> Any:
    """The corpus of --data-path (and --vocab from it when not given); None: the bench's own data."""
    if args.data_path is None:
        args.vocab = 256 if args.vocab is None else args.vocab
        return None
    # start-up time: imported when used, not on every CLI start
    from trials.config import DataConfig
    from trials.data import open_source
    from trials.errors import TrialInputError

    data = DataConfig(source="tokens", path=args.data_path)
    try:
        vocab = open_source(data).vocab
    except TrialInputError as exc:
        raise UserError(exc.message.replace("data.path", "--data-path", 1)) from None
    args.vocab = vocab if args.vocab is None else args.vocab
    if args.vocab < vocab:
        raise UserError(f"--vocab {args.vocab}: smaller than the vocabulary of --data-path {args.data_path} ({vocab})")
    return data


def run(args: argparse.Namespace) -> int:
    if args.suite:
        return run_suite(args)
    if args.quick or args.out or args.budget is not None or args.address:
        raise UserError("--quick, --out, --budget and --address belong to --suite gpu")
    args.device = args.device or "cpu"
    data = _data_config(args)
    _check(args)
    # Before torch loads: OpenMP's default spin-wait makes 2 threads 10-25x slower on a shared machine.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.cold_compile:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="sweeper-bench-inductor-")
        os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    # start-up time: imported when used, not on every CLI start
    from sweeper.bench.trial import BenchSettings, run_bench
    from trials.errors import TrialInputError

    settings = BenchSettings(
        method=args.method, width=args.width, depth=args.depth, heads=args.heads, stack=args.stack, compile=args.compile,
        device=args.device, dtype=args.dtype or ("bf16" if args.device == "cuda" else "fp32"), seq_len=args.seq_len,
        batch=args.batch, vocab=args.vocab, threads=args.threads, steps=args.steps, warmup=args.warmup,
        fused_loss=not args.no_fused_loss, sync_every=args.sync_every, cuda_graphs=args.cuda_graphs,
        micro_batch=args.micro_batch, compare=args.compare, breakdown=args.breakdown,
        rounds=5, data_path=args.data_path, evaluate=not args.no_eval, eval_every=args.eval_every,
        eval_batches=args.eval_batches,
    )
    try:
        result = run_bench(settings)
        if args.data:
            result["data_path"] = data_path_figures(settings, data, result)
    except TrialInputError as exc:
        raise UserError(exc.message) from None
    if not args.no_cache:
        # start-up time: imported when used, not on every CLI start
        from sweeper.bench.cache import from_bench, record

        try:
            result["cached_in"] = str(record(from_bench(result, "sweeper " + " ".join(sys.argv[1:]))))
        except OSError as exc:  # a read-only home: the measurement is still printed
            result["cached_in"] = None
            print(f"warning: the measurement was not cached ({exc})", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result)
        if result.get("cached_in"):
            print(f"recorded for cost plans (launch --dry-run) in {result['cached_in']}")
    return 0


def run_suite(args: argparse.Namespace) -> int:
    """`--suite gpu`: every check, each judged against its goal; exit 0 when none failed, errored or timed out."""
    # start-up time: imported when used, not on every CLI start
    from pathlib import Path

    from sweeper.bench.suite_run import run_suite as run_checks

    device = args.device or "cuda"
    if device == "cpu" and not args.quick:
        raise UserError("--suite gpu --device cpu: give --quick as well (the full suite's shapes are for one H200)")
    if device == "cuda" and not args.quick:
        import torch  # only to refuse early: the full suite needs the GPU it measures

        if not torch.cuda.is_available():
            raise UserError("--suite gpu: torch sees no CUDA device; give --device cpu --quick for the small CPU run")
    if args.budget is not None and not args.budget > 0:
        raise UserError(f"--budget: must be > 0 seconds (got {args.budget})")
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        raise UserError(f"--out {args.out}: the folder {out.parent} does not exist")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    result = run_checks(device, args.quick, out, args.budget, args.address)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_suite(result)
    return 0 if result["ok"] else 1


def print_suite(result: dict[str, Any]) -> None:
    # start-up time: imported when used, not on every CLI start
    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import make_console

    table = Layout(f"GPU suite on {result['device']}{' (quick)' if result['quick'] else ''}: "
                   f"{result['seconds']:.0f} s of {result['budget_s']:.0f}", [
                       Col("check", keep=True, justify="left"), Col("status", keep=True, justify="left"),
                       Col("goal", priority=2, justify="left"), Col("seconds", priority=1, justify="left")])
    for name, check in result["checks"].items():
        seconds = check.get("seconds")
        table.add_row(name, str(check.get("status")), str(check.get("goal", "")), f"{seconds:.0f}" if seconds else "")
    print_layout(make_console(), table)


def _si(x: float, unit: str) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def print_result(result: dict[str, Any]) -> None:
    # start-up time: imported when used, not on every CLI start
    from rich.text import Text

    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import make_console

    console = make_console()
    s, m, c = result["settings"], result["machine"], result["counting"]
    console.print(Text.assemble(
        (str(s["method"]), "bold"), f" d{s['width']} L{s['depth']} vocab {s['vocab']}, seq {s['seq_len']} x batch {s['batch']}, "
        f"stack {s['stack']}, {s['dtype']} on {m['device']}{' (' + m['gpu'] + ')' if 'gpu' in m else ''}, "
        f"{m['threads']} threads (OMP_WAIT_POLICY {m['omp_wait_policy']}); {result['execution']}"),
        highlight=False,
    )
    console.print(
        f"{c['params']:,} parameters per member ({c['params_matmul']:,} in matmuls); FLOPs per token "
        f"{_si(c['flops_per_token'], 'FLOP')} = 6N {_si(c['flops_per_token_6n'], 'FLOP')} + attention "
        f"{_si(c['flops_per_token_attention'], 'FLOP')}",
        highlight=False,
    )
    warm = ", ".join(f"{x:.2f}" for x in result["warmup_step_s"])
    compiled = f"; torch.compile {result['compile_s']:.1f} s" if result["compile_s"] else ""
    console.print(f"build {result['build_s']:.2f} s; warm-up steps (not measured) {warm} s{compiled}", highlight=False)
    e = result["evaluation"]
    if e["every"]:
        console.print(
            f"measured steps include {e['measured']} evaluations (every {e['every']} steps, {e['sequences']} sequences "
            f"in chunks of {e['chunk']}); the first one (not measured) took {e['warmup_eval_s']:.2f} s", highlight=False)
    else:
        console.print("evaluation left out (--no-eval)", highlight=False)
    runs = result["runs"]
    table = Layout(None, [Col("", keep=True, justify="left"), *(
        Col(f"{s['stack']}-stack" if name == "stack" else f"{s['stack']} separate models", keep=True) for name in runs)])
    rows = [
        ("measured steps", lambda r: str(r["steps"])),
        ("step time (median)", lambda r: f"{1000 * r['step_s_median']:.1f} ms"),
        ("tokens/s", lambda r: f"{r['tokens_per_s']:,.0f}"),
        ("tokens per CPU-second", lambda r: f"{r['tokens_per_cpu_s']:,.0f}" if r["tokens_per_cpu_s"] else "—"),
        ("model FLOP/s (6N + attention)", lambda r: f"{_si(r['model_flops_per_s'], 'FLOP/s')} = {100 * r['fraction_of_peak']:.1f}%"),
        ("6N FLOP/s", lambda r: f"{_si(r['model_flops_6n_per_s'], 'FLOP/s')} = {100 * r['fraction_of_peak_6n']:.1f}%"),
        ("6N, rounds vs peak beside", lambda r: _pct(r["fraction_of_peak_6n_interleaved"])),
        ("6N per CPU-s vs peak per CPU-s", lambda r: _pct(r["fraction_of_peak_6n_cpu"])),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(r) for r in runs.values()))
    print_layout(console, table)
    peaks = ", ".join(f"{x:.0f}" for x in result["matmul_peak_gflops_measured"])
    per_cpu = result["matmul_peak_gflops_per_cpu_s"]
    console.print(
        f"matmul peak {result['matmul_peak_gflops']:.1f} GFLOP/s, best of {peaks} (one before each round, one at the end)"
        + (f"; {per_cpu:.1f} GFLOP per CPU-second" if per_cpu else ""),
        highlight=False,
    )
    if "stack_speedup" in result:
        cpu = result.get("stack_speedup_cpu")
        console.print(
            f"stack of {s['stack']} vs {s['stack']} separate models: {result['stack_speedup']:.2f}x the tokens/s"
            + (f" ({cpu:.2f}x per CPU-second)" if cpu else ""),
            highlight=False,
        )
    if "breakdown" in result:
        print_breakdown(console, result["breakdown"], result["runs"]["stack"]["step_s_median"])
    if "data_path" in result:
        print_data_path(console, result["data_path"])
    console.print(f"load average {result['loadavg_start']} at start, {result['loadavg_end']} at end", highlight=False)


def print_breakdown(console: Any, b: dict[str, Any], step_s: float) -> None:
    # start-up time: imported when used, not on every CLI start
    from sweeper.records.layout import Col, Layout, print_layout

    table = Layout(f"where a step's time goes ({b['steps']} profiled steps of the stack, "
                   f"{1000 * b['profiled_step_s']:.1f} ms each under the profiler vs {1000 * step_s:.1f} ms measured)", [
                       Col("work", keep=True, justify="left"), Col("ms per step", keep=True), Col("share", keep=True),
                       Col("rate on its own", priority=1)])
    rates = {"gemm": b["gemm_rate"], "attention": b["attention_rate"]}
    labels = {"gemm": "GEMMs (parameter matmuls: the 6N FLOPs)", "attention": "attention (SDPA: the 12LTd FLOPs)",
              "compiled graphs": "compiled graphs (fused elementwise, optimizer)", "other": "other operators"}
    for kind, ms in b["ms_per_step"].items():
        r = rates.get(kind)
        rate = f"{r['gflops_per_s']:.1f} GFLOP/s = {100 * r['fraction_of_peak']:.1f}% of peak" if r else ""
        table.add_row(labels[kind], f"{ms:.1f}", f"{100 * b['share'][kind]:.1f}%", rate)
    print_layout(console, table)
    top = ", ".join(f"{name} {ms:.1f} ms" for name, ms in b["top_other_ms_per_step"].items())
    if top:
        console.print(f"largest other operators per step: {top}", highlight=False)


def data_path_figures(settings: Any, data: Any, result: dict[str, Any]) -> dict[str, Any]:
    """`--data`: the data path's tokens/s (sweeper.bench.data_path) beside the step's, at the benched shape."""
    # start-up time: imported when used, not on every CLI start
    import torch

    from sweeper.bench.trial import BenchSettings
    from sweeper.bench.data_path import measure_data_path

    assert isinstance(settings, BenchSettings)
    figures = measure_data_path(data if data is not None else settings.spec(1).data, settings.batch, settings.seq_len,
                                torch.device(settings.device))
    step_s = result["runs"]["stack"]["step_s_median"]
    figures["step_tokens_per_s"] = settings.batch * settings.seq_len / step_s  # one batch feeds every member
    figures["headroom"] = figures["pipeline_tokens_per_s"] / figures["step_tokens_per_s"]
    return figures


def print_data_path(console: Any, d: dict[str, Any]) -> None:
    # start-up time: imported when used, not on every CLI start
    from sweeper.records.layout import Col, Layout, print_layout

    table = Layout(f"data path: {d['source']}, {d['tokens_per_batch']:,} tokens per batch, {d['batches']} batches",
                   [Col("stage", keep=True, justify="left"), Col("tokens/s", keep=True), Col("vs the step", keep=True)])
    step = d["step_tokens_per_s"]
    rows = [("read + collate (training thread, no prefetch)", d["read_collate_tokens_per_s"]),
            ("host-to-device copy (pinned, non_blocking)", d["host_to_device_tokens_per_s"]),
            ("whole path through the prefetcher", d["pipeline_tokens_per_s"]),
            ("training step consumes", step)]
    for label, rate in rows:
        table.add_row(label, "—" if rate is None else f"{rate:,.0f}", "—" if rate is None else f"{rate / step:.1f}x")
    print_layout(console, table)
    verdict = "the data path keeps up" if d["headroom"] >= 2 else "the data path may starve the step"
    console.print(f"headroom {d['headroom']:.1f}x: {verdict} (keep it well above 1: the prefetch thread shares the CPUs)",
                  highlight=False)
