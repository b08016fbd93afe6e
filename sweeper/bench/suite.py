"""`sweeper bench --suite gpu`: every GPU check in one command, judged against its goal, as one JSON.

    sweeper bench --suite gpu --json --out suite.json               # one H200, within --budget (900 s)
    sweeper bench --suite gpu --device cpu --quick --json           # the same checks at small shapes

The checks run in their order of value, so that a short `--budget` drops the least valuable ones:
correctness first, then the memory model, then throughput.

| order | check | what runs | goal |
|---|---|---|---|
| 1 | `correct/<scheme>` | per scheme the shipped sweeps compile (`sweeps/*.yaml` with `train.compile`): a small bf16 trial compiled + CUDA graphs, and (one scheme) compiled and graphs alone, against its eager per-step run; a member diverges, so a graph is re-captured | same outcomes and divergence step, losses within bf16 rounding |
| 1 | `determinism`, `determinism_compiled` | `train.deterministic`: a trial run twice, and stopped and resumed | bit-identical |
| 1 | `cuda_tests` | the test suite's CUDA-only tests (`pytest -k cuda`) | all pass |
| 2 | `shape/L48/K8` ... `shape/L512/K1` | `sweeper bench` of depths 48 and 512, stacks 8 and 1 (peak memory and tokens/s) | trains, evaluates |
| 2 | `memory_model` | each shape's peak memory (allocator peak + CUDA context) / `stack: auto`'s model | <= 1 |
| 2 | `long_trial` | 600 steps at depth 48 with `sweeps/depth.yaml`'s batch, micro-batch and evaluation, `TORCH_LOGS=recompiles` | all steps, 2 evaluations, no recompile-limit hit, <= 4 recompiles, loss falls, memory <= prediction |
| 3 | `stacked_vs_separate` | tokens/s of the K=8 stack / of 8 separate models (one K=1 model's tokens/s: they run in turn) | >= 5x at each depth |
| 3 | `mfu` | model FLOP/s at depth 512, K=8 / the device's dense bf16 peak | >= 0.15 at width 128 (see `GOAL_MFU`) |
| 3 | `graphs/L48/K8` | `shape/L48/K8` with `cuda_graphs: true` | tokens/s >= 0.95x without |
| 3 | `sweep` | `sweeper launch` of a depth.yaml-shaped YAML (synthetic data, fractional GPUs, `stack: auto`) beside `long_trial` | finishes, no failed cell, a trial on the GPU >= 75% of the sweep's time |

Every check runs in a child process with its own time limit (the trial-side ones in a
`sweeper.bench.worker` worker; a check past its limit is killed and the worker restarted for the rest), so
one crash or hang never stops the others: it is reported as `error` or `timeout`. The JSON is
rewritten after every check (`--out`), progress goes to stderr, and the suite keeps within
`--budget` seconds: it reserves time for the sweep and the long trial (which run side by side at the
end) and skips, in order, what no longer fits. Statuses: `pass` / `fail` (against the goal), `error`,
`timeout`, `skipped` (does not apply here, or no time left), `ran` (finished; the goal is for a GPU).

This module: the suite's settings (`SuiteConfig`), its report, and the worker processes it runs checks in;
`sweeper.bench.suite_run` runs the suite and judges each check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeper.spec.schema import load_sweep

GOAL_STACK_SPEEDUP = 5.0
#: Model FLOP/s over the dense bf16 peak at width 128 (depth 512, K = 8, bf16, compiled). Width-128 GEMMs do
#: ~84 FLOP per byte moved (`sweeper.bench.worker.gemm_intensity`: d n / (d + n) over the block's products)
#: against an H200's ridge of ~206 (989 TFLOP/s over 4.8 TB/s): at full memory bandwidth they reach at most
#: ~41% of peak, ~30% at the ~75% of bandwidth good kernels sustain; the rest of the step (norms, rotary,
#: activations, attention with 32-wide heads: memory-bound, no counted FLOPs) takes about half its time even
#: fused. ~0.15 is what this width allows; well below it, launches, syncs or recompiles waste the device.
GOAL_MFU = 0.15
GOAL_GRAPH_RATIO = 0.95
GOAL_MAX_RECOMPILES = 4
#: the sweep check: the share of the sweep's time (after Ray's start) with at least one trial on the GPU
GOAL_BUSY = 0.75
#: one cold compile per shipped compiled scheme comes first now; the checks after it need the rest
FULL_BUDGET_S = 900
QUICK_BUDGET_S = 900  # generous: a shared 2-core machine; unloaded, the quick suite takes under 2 minutes
PROGRESS = "[suite]"
MIN_CHECK_S = 10.0  # a check is not started with less time than this left


@dataclasses.dataclass
class Check:
    name: str
    kind: str
    params: dict[str, Any]
    timeout_s: float
    goal: str


@dataclasses.dataclass
class Shape:
    depth: int
    stack: int
    batch: int
    micro_batch: int


@dataclasses.dataclass
class SuiteConfig:
    """Sizes of one suite run: the H200 figures, or small ones for a CPU (`--quick`)."""

    device: str
    quick: bool
    width: int
    heads: int
    seq_len: int
    vocab: int
    dtype: str
    shapes: list[Shape]
    bench_steps: int
    bench_warmup: int
    shape_timeout_s: float
    long_trial: dict[str, Any]
    long_timeout_s: float
    sweep_timeout_s: float
    budget_s: float
    method: str = "layerrope"
    schemes: tuple[str, ...] = ()  # the schemes the shipped sweeps compile (correctness checks)

    @classmethod
    def make(cls, device: str, quick: bool, budget_s: float | None) -> SuiteConfig:
        schemes = compiled_schemes()
        if not quick:
            # the deepest, largest stack first: the memory model matters most there, and MFU is judged on it
            shapes = [Shape(512, 8, 32, 8), Shape(48, 8, 64, 16), Shape(48, 1, 64, 16), Shape(512, 1, 32, 8)]
            long_trial = {"width": 128, "depth": 48, "heads": 4, "seq_len": 256, "vocab": 32000, "batch_size": 512,
                          "micro_batch": 16, "eval_every": 500, "eval_batches": 40, "steps": 600, "stack": 2,
                          "dtype": "bf16", "compile": True, "tokens": 2_000_000, "report_every": 50}
            return cls(device, quick, 128, 4, 256, 32000, "bf16", shapes, 10, 3, 90.0, long_trial, 240.0, 180.0,
                       budget_s or FULL_BUDGET_S, schemes=schemes)
        shapes = [Shape(4, 8, 8, 4), Shape(2, 8, 8, 4), Shape(2, 1, 8, 4), Shape(4, 1, 8, 4)]
        long_trial = {"width": 32, "depth": 4, "heads": 2, "seq_len": 32, "vocab": 256, "batch_size": 16,
                      "micro_batch": 4, "eval_every": 50, "eval_batches": 4, "steps": 60, "stack": 2,
                      "dtype": "bf16" if device == "cuda" else "fp32", "compile": True, "tokens": 65536, "report_every": 20}
        return cls(device, quick, 32, 2, 32, 256, "bf16" if device == "cuda" else "fp32", shapes, 5, 2, 240.0,
                   long_trial, 300.0, 300.0, budget_s or QUICK_BUDGET_S, schemes=schemes)

    def correctness_checks(self) -> list[Check]:
        """`correct/<scheme>`: compiled + CUDA graphs against eager per scheme; the first scheme also compiled
        alone and graphs alone (which path broke, if one did). A CPU compares the deferred reads, at a tiny
        size (the quick run's compiled path is its long trial, and the test suite's compile tests)."""
        on_gpu = self.device == "cuda"
        checks = []
        for i, scheme in enumerate(self.schemes):
            if on_gpu:
                paths: list[dict[str, Any]] = [{"compile": True, "cuda_graphs": True}]
                if i == 0:
                    paths += [{"compile": True}, {"cuda_graphs": True}]
                params = {"scheme": scheme, "device": "cuda", "dtype": "bf16", "paths": paths}
            else:
                params = {"scheme": scheme, "device": self.device, "dtype": "fp32", "width": 16, "depth": 1, "heads": 2,
                          "seq_len": 16, "vocab": 64, "batch": 4, "steps": 6, "paths": [{"sync_every": 3}]}
            checks.append(Check(f"correct/{scheme}", "correctness", params, 150.0 if on_gpu else 60.0,
                                "fast paths agree with eager: outcomes, divergence step, losses within bf16 rounding"))
        return checks

    def shape_name(self, shape: Shape) -> str:
        return f"shape/L{shape.depth}/K{shape.stack}"

    def bench_params(self, shape: Shape, **extra: Any) -> dict[str, Any]:
        # The quick run trains its shapes eagerly: compiling four shapes takes minutes on two cores, and the
        # compiled paths are covered by its long trial and by the test suite's compile tests.
        return {"method": self.method, "width": self.width, "depth": shape.depth, "heads": self.heads, "stack": shape.stack,
                "compile": not self.quick, "device": self.device, "dtype": self.dtype, "seq_len": self.seq_len, "batch": shape.batch,
                "vocab": self.vocab, "steps": self.bench_steps, "warmup": self.bench_warmup, "micro_batch": shape.micro_batch,
                "eval_every": self.bench_steps, "eval_batches": 1, "peak_repeats": 3 if self.quick else None, **extra}


def compiled_schemes() -> tuple[str, ...]:
    """The schemes of the methods that the shipped sweeps (`sweeps/*.yaml` of this checkout) train compiled,
    in their order of appearance; the study's six when the checkout's sweeps are not here (an installed package)."""
    folder = Path(__file__).resolve().parents[2] / "sweeps"
    found: list[str] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            config = load_sweep(path, need_data=False).config
        except Exception:  # a sweep that does not validate here is not the suite's business
            continue
        for method in config.methods:
            train = method.train or {}
            compiled = train.get("compile", config.train.compile) if isinstance(train, dict) else config.train.compile
            scheme = method.scheme or method.name
            if compiled and scheme not in found:
                found.append(scheme)
    return tuple(found) or ("pre", "post", "peri", "lns", "deepnet", "layerrope")


# ---- the report --------------------------------------------------------------------------------------


class Report:
    """The suite's JSON, rewritten (atomically) after every change when `out` is given."""

    def __init__(self, cfg: SuiteConfig, out: Path | None) -> None:
        self.out = out
        self.started = time.monotonic()
        self.data: dict[str, Any] = {
            "suite": "gpu", "device": cfg.device, "quick": cfg.quick, "budget_s": cfg.budget_s,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "finished": False, "checks": {},
        }
        self.write()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def record(self, name: str, **fields: Any) -> None:
        self.data["checks"].setdefault(name, {}).update(fields)
        status = fields.get("status")
        if status:
            note = fields.get("note") or fields.get("error") or ""
            print(f"{PROGRESS} {name}: {status.upper()}{' - ' + str(note)[:200] if note else ''} "
                  f"({self.elapsed():.0f} s elapsed)", file=sys.stderr, flush=True)
        self.write()

    def finish(self) -> dict[str, Any]:
        statuses = [c.get("status") for c in self.data["checks"].values()]
        counts = {s: statuses.count(s) for s in sorted({s for s in statuses if s})}
        self.data.update(finished=True, seconds=self.elapsed(), counts=counts,
                         ok=not any(s in ("fail", "error", "timeout") for s in statuses))
        self.write()
        return self.data

    def write(self) -> None:
        self.data["seconds"] = self.elapsed()
        if self.out is None:
            return
        tmp = self.out.with_name(f".{self.out.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        tmp.replace(self.out)


# ---- child processes -------------------------------------------------------------------------------


def _forward(stream: Any, sink: list[str], log: Path | None) -> None:
    """Copy a child's stderr to ours (progress lines) and keep it for the checks that read it."""
    handle = log.open("a") if log else None
    try:
        for line in iter(stream.readline, ""):
            sink.append(line)
            if handle:
                handle.write(line)
            if line.startswith("[suite"):
                sys.stderr.write(line)
                sys.stderr.flush()
    finally:
        if handle:
            handle.close()


def start_child(cmd: list[str], env: dict[str, str], log: Path | None, stdout: Any = subprocess.DEVNULL) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=_forward, args=(proc.stderr, lines, log), daemon=True).start()
    return proc, lines


def stop_child(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGINT first (a sweep shuts its Ray down), then SIGKILL to the whole process group."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def worker_command(plan: Path, results: Path) -> list[str]:
    """The command line of a worker process: the CLI's hidden `sweeper bench worker` mode, in this interpreter
    (the project's one entry point; the worker module itself is a library module)."""
    return [sys.executable, "-m", "sweeper.cli", "bench", "worker", str(plan), str(results)]


class Worker:
    """Runs trial-side checks in worker processes (`sweeper bench worker`), each check within its time limit."""

    def __init__(self, report: Report, folder: Path, on_end: Callable[[Check, dict[str, Any]], None],
                 env: dict[str, str] | None = None, log: Path | None = None) -> None:
        self.report, self.folder, self.on_end = report, folder, on_end
        self.env, self.log = env or child_env(), log
        self.results: dict[str, dict[str, Any]] = {}
        self.stderr: list[str] = []

    def _end(self, check: Check, record: dict[str, Any]) -> None:
        self.results[check.name] = record
        self.on_end(check, record)

    def run(self, checks: list[Check], deadline: Callable[[Check], float]) -> None:
        pending = list(checks)
        attempt = 0
        while pending:
            attempt += 1
            plan = self.folder / f"plan-{pending[0].name.replace('/', '_')}-{attempt}.json"
            results = plan.with_suffix(".jsonl")
            plan.write_text(json.dumps({"checks": [dataclasses.asdict(c) for c in pending]}))
            proc, lines = start_child(worker_command(plan, results), self.env, self.log)
            pending = self._watch(proc, results, pending, deadline)
            self.stderr.extend(lines)

    def _watch(self, proc: subprocess.Popen, results: Path, pending: list[Check], deadline: Callable[[Check], float]) -> list[Check]:
        """Follow one worker until it ends or a check outlives its limit; returns the checks still to run."""
        by_name = {c.name: c for c in pending}
        done: set[str] = set()
        current: Check | None = None
        last_progress: dict[str, Any] | None = None
        current_start = time.monotonic()
        limit = 0.0
        read = 0
        while True:
            exited = proc.poll() is not None
            records, read = _read_new(results, read)
            for record in records:
                check = by_name[record["name"]]
                if record["event"] == "progress":
                    last_progress = record
                    continue
                if record["event"] == "start":
                    current, current_start, last_progress = check, time.monotonic(), None
                    limit = deadline(check)
                    if limit < MIN_CHECK_S:  # the budget is spent: this check and the rest do not start
                        stop_child(proc, grace_s=2.0)
                        for rest in pending:
                            if rest.name not in done:
                                self._end(rest, {"status": "skipped", "seconds": 0.0, "error": "no time left in the budget"})
                        return []
                    self.report.record(check.name, status=None, goal=check.goal, started_at_s=round(self.report.elapsed(), 1),
                                       limit_s=round(limit, 1))
                else:
                    done.add(check.name)
                    current = None
                    self._end(check, record)
            if exited and not records:
                break
            if current is not None and time.monotonic() - current_start > limit:
                stop_child(proc, grace_s=2.0)
                done.add(current.name)
                self._end(current, {"status": "timeout", "seconds": time.monotonic() - current_start,
                                    "error": f"no result within its limit of {limit:.0f} s", "progress": last_progress})
                return [c for c in pending if c.name not in done]
            time.sleep(0.2)
        if current is not None:  # the worker died inside a check (a crash no exception could catch)
            done.add(current.name)
            self._end(current, {"status": "error", "seconds": time.monotonic() - current_start,
                                "error": f"the worker process died (exit code {proc.returncode})", "progress": last_progress})
        rest = [c for c in pending if c.name not in done]
        if rest and current is None and proc.returncode != 0:  # died before starting the next check
            first = rest.pop(0)
            self._end(first, {"status": "error", "seconds": 0.0,
                              "error": f"the worker process exited with code {proc.returncode} before it"})
        return rest


def _read_new(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    if not path.exists():
        return [], offset
    with path.open() as f:
        f.seek(offset)
        text = f.read()
    complete = text[: text.rfind("\n") + 1]
    records = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return records, offset + len(complete.encode())


def wait_child(proc: subprocess.Popen, limit: float) -> None:
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        stop_child(proc, grace_s=20.0)
