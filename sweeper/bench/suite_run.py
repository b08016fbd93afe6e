"""Running the GPU suite (`sweeper bench --suite gpu`, see `sweeper.bench.suite` for the checks and their
goals), in their order of value: the correctness checks (in a worker process) and the CUDA tests, then the
shapes in a worker (memory, then throughput), then the sweep and the long trial side by side; each result
judged against its goal (`run_suite`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sweeper.bench.suite import (
    GOAL_BUSY,
    GOAL_GRAPH_RATIO,
    GOAL_MAX_RECOMPILES,
    GOAL_MFU,
    GOAL_STACK_SPEEDUP,
    PROGRESS,
    Check,
    Report,
    SuiteConfig,
    Worker,
    child_env,
    start_child,
    stop_child,
    wait_child,
)
from sweeper.core.errors import UserError
from sweeper.records.manifest import read_manifest
from sweeper.records.store import load_points
from sweeper.search.memory import estimate
from sweeper.search.planner import build_plan
from sweeper.spec.schema import load_sweep


# ---- goals -------------------------------------------------------------------------------------------


def _judge(ok: bool, on_gpu: bool) -> str:
    if not on_gpu:
        return "ran"
    return "pass" if ok else "fail"


def _outcome(record: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """(a status that ends the judgement: error/timeout/skipped, or None) and the result."""
    status = record.get("status")
    if status == "done":
        return None, record["result"]
    return status or "error", None


def _count_recompiles(lines: list[str]) -> dict[str, int]:
    text = "".join(lines)
    return {"recompiles": len(re.findall(r"Recompiling function", text)),
            "recompile_limit_hits": len(re.findall(r"hit config\.\w*recompile_limit", text))}


# ---- the memory model (stack: auto) --------------------------------------------------------------------


def _cell_for(cfg: SuiteConfig, folder: Path, *, depth: int, batch: int, micro_batch: int, name: str) -> Any:
    """The planner's cell for one shape: a one-cell sweep file, validated and planned as `sweeper launch` does."""
    on_gpu = cfg.device == "cuda"
    sweep = {
        "name": name, "methods": [cfg.method],
        "model": {"family": "llama", "width": cfg.width, "heads": cfg.heads, "depths": [depth], "seq_len": cfg.seq_len,
                  "vocab": cfg.vocab},
        "data": {"source": "synthetic", "synthetic_vocab": cfg.vocab},
        "train": {"steps": 10, "batch_size": batch, "micro_batch": micro_batch, "device": cfg.device, "dtype": cfg.dtype,
                  "compile": True},
        "resources": {"cpu": 1, **({"gpu": 1} if on_gpu else {})},
        "output": str(folder / name),
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(sweep))
    plan = build_plan(load_sweep(path).config, source=path)
    return plan.cells[0]


def predicted_trial_bytes(cell: Any, stack: int) -> int:
    """What `stack: auto`'s memory model (`sweeper.search.memory`, the formula, not a measurement) says a trial of
    `stack` members of `cell` holds at its peak, CUDA context included."""
    return estimate(cell).model.total(stack)


def _footprint(memory: dict[str, Any], context: int | None = None) -> int | None:
    """A process's peak on the device: the allocator's peak reservation plus the CUDA context (measured
    beside it, or given: a process measured while others shared the device)."""
    if "peak_reserved_bytes" not in memory:
        return None
    extra = memory.get("context_bytes", 0) if context is None else context
    return int(memory["peak_reserved_bytes"] + extra)


def _shape_context(report: Report, cfg: SuiteConfig) -> int | None:
    """The CUDA context of a suite process, as the shape checks measured it (alone on the device)."""
    values = sorted(r["memory"]["context_bytes"] for s in cfg.shapes
                    if (r := _result(report, cfg.shape_name(s))) and "context_bytes" in r["memory"])
    return values[len(values) // 2] if values else None


# ---- the sweep ---------------------------------------------------------------------------------------


def sweep_yaml(cfg: SuiteConfig, folder: Path, address: str | None) -> tuple[dict[str, Any], bool]:
    """A depth.yaml-shaped sweep on synthetic data; (sweep, whether GPU fractions are asked for)."""
    on_gpu = cfg.device == "cuda"
    fractions = on_gpu or address is None  # a CPU run without a cluster declares one GPU to its own Ray
    if cfg.quick:
        model = {"family": "llama", "width": 32, "heads": 2, "depths": [1], "seq_len": 32, "vocab": 256}
        train = {"steps": 40, "batch_size": 8, "micro_batch": 4, "eval_every": 20, "eval_batches": 2, "report_every": 10,
                 "checkpoint_every": 1000, "device": cfg.device, "dtype": cfg.dtype, "compile": on_gpu,
                 "schedule": {"warmup": 0.1, "decay": "cosine", "final_fraction": 0.1}}
        data = {"source": "synthetic", "synthetic_vocab": 256, "synthetic_tokens": 65536}
        lr = {"center": 1.0e-2, "points": 4, "factor": 4.0, "refine": False, "bounds": [1.0e-4, 1.0], "max_points": 6}
        rules = [{"max_depth": 1, "gpu": 0.25}, {"max_depth": 2, "gpu": 0.25}]
    else:
        model = {"family": "llama", "width": 128, "heads": 4, "depths": [8, 16], "seq_len": 256, "vocab": 32000}
        train = {"steps": 150, "batch_size": 64, "micro_batch": 16, "eval_every": 75, "eval_batches": 4, "report_every": 25,
                 "checkpoint_every": 1000, "device": "cuda", "dtype": "bf16", "compile": True,
                 "schedule": {"warmup": 0.05, "decay": "cosine", "final_fraction": 0.1}}
        data = {"source": "synthetic", "synthetic_vocab": 32000, "synthetic_tokens": 2_000_000}
        lr = {"center": 3.0e-3, "points": 5, "factor": 4.0, "refine": False, "bounds": [1.0e-5, 0.3], "max_points": 6}
        rules = [{"max_depth": 8, "gpu": 0.125}, {"max_depth": 16, "gpu": 0.25}]
    sweep: dict[str, Any] = {
        "name": "suite-sweep", "description": "the GPU suite's depth.yaml-shaped sweep (synthetic data)",
        "methods": ["pre", "layerrope"], "model": model, "seeds": [0], "data": data, "train": train, "lr": lr,
        "divergence": {"ema": 0.9, "init_loss_margin": 0.0, "spike_factor": 1.5, "spike_patience": 50},
        "resources": {"cpu": 1 if cfg.quick else 2, **({"gpu": 0.125, "by_size": rules} if fractions else {})},
        "stack": "auto", "max_stack": 8, "concurrency": "auto", "retries": 1, "output": str(folder / "sweep"),
    }
    if address is None:
        sweep["ray"] = {"num_cpus": 4 if cfg.quick else 16, **({"num_gpus": 1} if fractions else {})}
    return sweep, fractions


def run_sweep(cfg: SuiteConfig, folder: Path, address: str | None, limit: float, report: Report) -> None:
    name = "sweep"
    sweep, fractions = sweep_yaml(cfg, folder, address)
    goal = (f"finishes, every cell bracketed/edge/diverged (none failed), a trial on the GPU >= {GOAL_BUSY:.0%} of "
            "the sweep's time after Ray's start")
    path = folder / "suite-sweep.json"
    path.write_text(json.dumps(sweep, indent=1))
    cmd = [sys.executable, "-m", "sweeper.cli", "launch", str(path), "--json", *(["--address", address] if address else [])]
    report.record(name, goal=goal, started_at_s=round(report.elapsed(), 1), limit_s=round(limit, 1), yaml=sweep)
    started = time.monotonic()
    on_gpu = cfg.device == "cuda"
    with (folder / "sweep.stdout").open("w") as out, GpuSampler() as sampler:
        proc, lines = start_child(cmd, child_env(), folder / "sweep.stderr", stdout=out)
        wait_child(proc, limit)
    seconds = time.monotonic() - started
    text = (folder / "sweep.stdout").read_text()
    try:
        summary = json.loads(text[text.index("{"):])
    except ValueError:
        summary = None
    if proc.returncode is None or seconds > limit:  # stopped: what the interrupted launch summarised, if anything
        report.record(name, status="timeout", seconds=seconds, error=f"no result within its limit of {limit:.0f} s",
                      counts=(summary or {}).get("counts"), points_finished=(summary or {}).get("points_finished"))
        return
    if summary is None:
        tail = "".join(lines[-15:])
        report.record(name, status="error", seconds=seconds, error=f"sweeper launch exited {proc.returncode}: {tail[-1500:]}")
        return
    counts = summary.get("counts", {})
    unfinished = {k: v for k, v in counts.items() if k not in ("bracketed", "edge", "diverged", "stalled") and v}
    slots = int(summary.get("slots", 0))
    busy = sweep_busy_fraction(Path(sweep["output"]))
    finished = proc.returncode == 0 and not summary.get("interrupted") and not unfinished
    ok = finished and busy is not None and busy >= GOAL_BUSY
    status = ("pass" if ok else "fail") if on_gpu or not finished else "ran"
    report.record(name, status=status, seconds=seconds, exit_code=proc.returncode, counts=counts,
                  slots=slots, gpu_fractions=fractions, points_finished=summary.get("points_finished"),
                  trials=summary.get("trials"), busy_fraction=busy, gpu_kernel_busy=sampler.mean(),
                  wall_seconds=summary.get("wall_seconds"),
                  note=None if status != "fail" else f"counts {counts}, a trial on the GPU {busy} of the time")


def sweep_busy_fraction(sweep_dir: Path) -> float | None:
    """The share of the sweep's last launch (after Ray's start) during which at least one point trained: with
    one GPU, the fraction of the device's time with a trial on it (the union of the points' training spans)."""
    try:
        launch = read_manifest(sweep_dir).launches[-1]
        start = float(launch.started) + float(launch.ray_start_seconds or 0.0)  # type: ignore[arg-type]
        end = float(launch.started) + float(launch.wall_seconds)  # type: ignore[arg-type]
        points = load_points(sweep_dir)
    except (OSError, UserError, KeyError, IndexError, TypeError, ValueError):
        return None
    spans = [(a, b) for a, b in zip(points["started_at"].to_list(), points["finished_at"].to_list())
             if a is not None and b is not None]
    return covered(spans, start, end) / (end - start) if end > start else None


def covered(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of `spans` within [lo, hi]."""
    total, reach = 0.0, lo
    for a, b in sorted((max(lo, a), min(hi, b)) for a, b in spans):
        if b > reach and b > a:
            total += b - max(a, reach)
            reach = b
    return total


class GpuSampler:
    """`nvidia-smi`'s utilisation of GPU 0 (the share of the last sample period a kernel ran), once a second
    on a thread while a sweep runs; nothing on a machine without `nvidia-smi`."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.exe = shutil.which("nvidia-smi")
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> GpuSampler:
        if self.exe:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(5)

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            try:
                out = subprocess.run([str(self.exe), "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                      "--id=0"], capture_output=True, text=True, timeout=5).stdout
                self.samples.append(float(out.strip().splitlines()[0]) / 100)
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                continue

    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


# ---- the suite -----------------------------------------------------------------------------------------


def run_suite(device: str, quick: bool, out: Path | None, budget_s: float | None, address: str | None) -> dict[str, Any]:
    cfg = SuiteConfig.make(device, quick, budget_s)
    report = Report(cfg, out)
    on_gpu = device == "cuda"
    folder = Path(tempfile.mkdtemp(prefix="sweeper-suite-"))
    print(f"{PROGRESS} {'quick ' if quick else ''}suite on {device}, budget {cfg.budget_s:.0f} s; work folder {folder}",
          file=sys.stderr, flush=True)
    try:
        _run(cfg, report, folder, on_gpu, address)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return report.finish()


def _run(cfg: SuiteConfig, report: Report, folder: Path, on_gpu: bool, address: str | None) -> None:
    reserve = max(cfg.long_timeout_s, cfg.sweep_timeout_s) if not cfg.quick else 0.0
    if not cfg.quick:  # the end phase needs its time on the device; the sequential checks share what is left
        reserve = min(reserve, cfg.budget_s * 0.4)

    def deadline(check: Check) -> float:
        return max(1.0, min(check.timeout_s, cfg.budget_s - reserve - report.elapsed()))

    # 1. Correctness: every compiled scheme's fast paths against eager, determinism, the CUDA tests.
    det_params = {"device": cfg.device, "dtype": cfg.dtype}
    correctness = [*cfg.correctness_checks(),
                   Check("determinism", "determinism", det_params, 120.0, "bit-identical rerun and resume")]
    if on_gpu:
        correctness.append(Check("determinism_compiled", "determinism", {**det_params, "compile": True}, 120.0,
                                 "bit-identical rerun and resume"))
    worker = Worker(report, folder, lambda check, record: _record_trial_check(report, check, record, on_gpu))
    _run_in_order(worker, correctness, deadline, report, on_gpu)
    left = cfg.budget_s - reserve - report.elapsed()
    if not on_gpu:
        report.record("cuda_tests", goal="all pass", status="skipped", error="no CUDA device")
    elif left < 30:
        report.record("cuda_tests", goal="all pass", status="skipped", error="no time left in the budget")
    else:
        _run_cuda_tests(report, min(left, 240.0))

    # 2. Memory, then throughput: the shapes one at a time (throughput is measured alone on the device).
    shape_checks = [Check(cfg.shape_name(s), "train", cfg.bench_params(s), cfg.shape_timeout_s, "trains and evaluates")
                    for s in cfg.shapes]
    base = next(s for s in cfg.shapes if s.stack > 1 and s.depth == min(x.depth for x in cfg.shapes))
    graphs = Check(f"graphs/L{base.depth}/K{base.stack}", "train", cfg.bench_params(base, cuda_graphs=True),
                   cfg.shape_timeout_s, f"tokens/s >= {GOAL_GRAPH_RATIO}x the same shape without CUDA graphs")
    _run_in_order(worker, [*shape_checks, graphs], deadline, report, on_gpu)
    _judge_memory(cfg, report, folder, on_gpu)
    _judge_throughput(cfg, report, on_gpu)
    _judge_graphs(report, graphs.name, cfg.shape_name(base), on_gpu)

    # 2. The sweep and the long trial, side by side (neither measures speed).
    left = cfg.budget_s - report.elapsed()
    long_params = {**cfg.long_trial, "device": cfg.device, "scheme": cfg.method}
    long_check = Check("long_trial", "long_trial", long_params, min(cfg.long_timeout_s, left),
                       f"all steps, 2 evaluations, no recompile-limit hit, <= {GOAL_MAX_RECOMPILES} recompiles, "
                       "loss falls, memory <= stack: auto's prediction")
    long_log = folder / "long_trial.stderr"
    long_worker = Worker(report, folder, lambda check, record: None, child_env(TORCH_LOGS="recompiles"), long_log)
    thread = threading.Thread(target=long_worker.run, args=([long_check], lambda c: c.timeout_s), daemon=True)
    thread.start()
    run_sweep(cfg, folder, address, max(1.0, min(cfg.sweep_timeout_s, left)), report)
    thread.join()
    _judge_long_trial(cfg, report, folder, long_check, long_worker, on_gpu)


def _run_in_order(worker: Worker, checks: list[Check], deadline: Any, report: Report, on_gpu: bool) -> None:
    """Run `checks` in order in the worker; those the budget left no time for are recorded `skipped`."""
    worker.run(checks, deadline)
    for check in checks:
        if check.name not in worker.results:
            _record_trial_check(report, check, {"status": "skipped", "error": "no time left in the budget"}, on_gpu)


def _record_trial_check(report: Report, check: Check, record: dict[str, Any], on_gpu: bool) -> None:
    status, result = _outcome(record)
    fields: dict[str, Any] = {"goal": check.goal, "seconds": record.get("seconds")}
    if result is None:
        report.record(check.name, status=status, error=record.get("error"), traceback=record.get("traceback"),
                      progress=record.get("progress"), **fields)
        return
    if check.kind == "determinism":
        ok = bool(result["rerun_bit_identical"] and result["resume_bit_identical"])
        report.record(check.name, status="pass" if ok else "fail", result=result, **fields)
    elif check.kind == "correctness":  # agreement is meaningful on any device
        report.record(check.name, status="pass" if result["agrees"] else "fail", result=result, **fields)
    elif check.name.startswith("graphs/"):
        report.record(check.name, result=result, **fields)  # judged against its shape below
    else:
        ok = result["evaluation"]["measured"] >= 1 and result["tokens_per_s"] > 0
        report.record(check.name, status="pass" if ok else "fail", result=result, **fields)


def _result(report: Report, name: str) -> dict[str, Any] | None:
    check = report.data["checks"].get(name, {})
    return check.get("result") if check.get("status") in ("pass", "fail", "ran", None) else None


def _judge_graphs(report: Report, name: str, base: str, on_gpu: bool) -> None:
    check = report.data["checks"].get(name, {})
    if check.get("status") in ("error", "timeout", "skipped"):
        return
    graph, plain = check.get("result"), _result(report, base)
    if graph is None or plain is None:
        report.record(name, status="error", error=f"needs {base}'s result")
        return
    ratio = graph["tokens_per_s"] / plain["tokens_per_s"]
    report.record(name, status=_judge(ratio >= GOAL_GRAPH_RATIO, on_gpu), ratio_to_without=ratio)


def _judge_memory(cfg: SuiteConfig, report: Report, folder: Path, on_gpu: bool) -> None:
    # Peak memory of each shape against stack: auto's model.
    rows: dict[str, Any] = {}
    ok = True
    try:
        for shape in cfg.shapes:
            res = _result(report, cfg.shape_name(shape))
            cell = _cell_for(cfg, folder, depth=shape.depth, batch=shape.batch, micro_batch=shape.micro_batch,
                             name=f"memory-L{shape.depth}")
            predicted = predicted_trial_bytes(cell, shape.stack)
            row: dict[str, Any] = {"predicted_bytes": predicted}
            if res is not None:
                row.update(res["memory"])
                used = _footprint(res["memory"])
                if used is not None:
                    row["footprint_bytes"], row["ratio"] = used, used / predicted
                    ok = ok and used <= predicted
            rows[cfg.shape_name(shape)] = row
    except Exception as exc:  # the planner refused a shape: that is this check's finding
        report.record("memory_model", goal="peak memory <= stack: auto's prediction", status="error",
                      error=f"{type(exc).__name__}: {exc}", shapes=rows)
        return
    report.record("memory_model", goal="peak memory (allocator peak + CUDA context) <= stack: auto's prediction",
                  status=_judge(ok, on_gpu), shapes=rows)


def _judge_throughput(cfg: SuiteConfig, report: Report, on_gpu: bool) -> None:
    # Stacked vs separate: K separate models train one after another, so together they reach one K=1 model's tokens/s.
    goal = f"K={max(s.stack for s in cfg.shapes)} stack >= {GOAL_STACK_SPEEDUP}x the tokens/s of as many separate models"
    speedups: dict[str, float] = {}
    missing = []
    for depth in sorted({s.depth for s in cfg.shapes}):
        stacked = [s for s in cfg.shapes if s.depth == depth and s.stack > 1]
        single = [s for s in cfg.shapes if s.depth == depth and s.stack == 1]
        if not stacked or not single:
            continue
        a, b = _result(report, cfg.shape_name(stacked[0])), _result(report, cfg.shape_name(single[0]))
        if a is None or b is None:
            missing.append(f"L{depth}")
            continue
        speedups[f"L{depth}"] = a["tokens_per_s"] / b["tokens_per_s"]
    if missing or not speedups:
        report.record("stacked_vs_separate", goal=goal, status="error", speedup=speedups,
                      error=f"a shape it compares did not finish: {', '.join(missing)}")
    else:
        report.record("stacked_vs_separate", goal=goal, speedup=speedups,
                      status=_judge(all(v >= GOAL_STACK_SPEEDUP for v in speedups.values()), on_gpu),
                      method="tokens/s of the stack / tokens/s of one K=1 model with the same settings")

    # MFU at the deepest shape with the largest stack.
    deepest = max(cfg.shapes, key=lambda s: (s.depth, s.stack))
    res = _result(report, cfg.shape_name(deepest))
    goal = (f"MFU >= {GOAL_MFU} at width {cfg.width}, depth {deepest.depth}, K={deepest.stack} (width-128 GEMMs are "
            "memory-bound: ~0.15 is what this width allows, see sweeper.bench.suite.GOAL_MFU)")
    if res is None:
        report.record("mfu", goal=goal, status="error", error=f"{cfg.shape_name(deepest)} did not finish")
    elif res["mfu"] is None:
        report.record("mfu", goal=goal, status="ran" if not on_gpu else "fail", fraction_of_measured_peak=res["fraction_of_measured_peak"],
                      note="no nominal bf16 peak known for this device: the fraction of the matmul peak measured in the run")
    else:
        report.record("mfu", goal=goal, status=_judge(res["mfu"] >= GOAL_MFU, on_gpu), mfu=res["mfu"],
                      fraction_of_measured_peak=res["fraction_of_measured_peak"], device=res["device"],
                      gemm_flop_per_byte=res.get("gemm_flop_per_byte"),
                      gemm_roofline_fraction=res.get("gemm_roofline_fraction"))


def _judge_long_trial(cfg: SuiteConfig, report: Report, folder: Path, check: Check, worker: Worker, on_gpu: bool) -> None:
    record = worker.results.get(check.name, {"status": "error", "error": "no result"})
    status, result = _outcome(record)
    counted = _count_recompiles(worker.stderr)
    fields: dict[str, Any] = {"goal": check.goal, "seconds": record.get("seconds"), **counted}
    if result is None:  # a timeout or a crash: how far it got, and its memory then
        report.record(check.name, status=status, error=record.get("error"), traceback=record.get("traceback"),
                      progress=record.get("progress"), **fields)
        return
    p = cfg.long_trial
    try:
        cell = _cell_for(cfg, folder, depth=p["depth"], batch=p["batch_size"], micro_batch=p["micro_batch"], name="memory-long")
        predicted = predicted_trial_bytes(cell, p["stack"])
    except Exception as exc:
        predicted, fields["prediction_error"] = None, f"{type(exc).__name__}: {exc}"
    context = _shape_context(report, cfg)
    used = _footprint(result["memory"], context)
    fields["context_bytes"] = context
    learned = all(loss is not None and init is not None and loss < init for loss, init in zip(result["losses"], result["init_losses"]))
    ok_run = (result["steps"] == p["steps"] and result["evaluations"] >= 2 and all(o == "ok" for o in result["outcomes"])
              and counted["recompile_limit_hits"] == 0 and counted["recompiles"] <= GOAL_MAX_RECOMPILES and learned)
    ok_memory = used is None or (predicted is not None and used <= predicted)
    status = ("pass" if ok_run and ok_memory else "fail") if on_gpu else ("ran" if ok_run else "fail")
    report.record(check.name, status=status, result=result, predicted_bytes=predicted, footprint_bytes=used,
                  learned=learned, **fields)


def _run_cuda_tests(report: Report, limit: float) -> None:
    name = "cuda_tests"
    tests = Path(__file__).resolve().parents[2] / "tests" / "trials" / "test_compile.py"  # the checkout's test suite
    if not tests.exists():
        report.record(name, goal="all pass", status="skipped", error=f"{tests} is not here (an installed package)")
        return
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests), "-k", "cuda"]
    report.record(name, goal="all pass", started_at_s=round(report.elapsed(), 1), limit_s=round(limit, 1))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env(),
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        stop_child(proc, grace_s=2.0)
        report.record(name, status="timeout", seconds=time.monotonic() - started, error=f"no result within {limit:.0f} s")
        return
    tail = output.strip().splitlines()[-12:]
    status = "pass" if proc.returncode == 0 else ("error" if proc.returncode not in (1,) else "fail")
    report.record(name, status=status, seconds=time.monotonic() - started, exit_code=proc.returncode, output=tail)
