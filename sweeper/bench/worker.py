"""The trial-side checks of the GPU suite (`sweeper bench --suite gpu`), run in a worker process.

    sweeper bench worker PLAN.json RESULTS.jsonl     (started by the suite: `python -m sweeper.cli bench worker ...`)

`PLAN.json` holds `{"checks": [{"name", "kind", "params"}, ...]}`; the worker runs them in order and
appends one JSON line per event to `RESULTS.jsonl` (flushed at once): `{"name", "event": "start"}`
when a check starts, then `{"name", "event": "end", "status": "done" | "error" | "skipped",
"seconds", "result" | "error"}`. An exception ends its check only; the next one runs. Progress goes
to stderr. The controller (`sweeper.bench.suite`) watches the file, kills a check that
outlives its time and starts a new worker for the checks left, and judges the figures against
their goals (it also runs the checks that need the sweeper: the sweep, the memory model).

Kinds:
- `correctness`: one scheme's fast paths (compiled, CUDA graphs, both; on a CPU the deferred reads)
  against its eager per-step run: same outcomes and divergence step, final losses within bf16 rounding;
- `train`: `sweeper.bench.trial.run_bench` of one shape (bf16 compiled training with evaluations on
  CUDA): tokens/s, model FLOP/s against the device's nominal bf16 peak and against the matmul peak
  measured in the run, compile time, peak memory;
- `determinism`: a small trial in `train.deterministic` mode, run twice, and run again as a
  stopped trial resumed from its checkpoint: are final weights and losses bit-identical?
- `long_trial`: one trial as `sweeps/depth.yaml` runs it (batch, micro-batch, evaluation every
  `eval_every` steps over `eval_batches` batches, compile, bf16) for `steps` steps on synthetic
  data: seconds, evaluations, peak memory (the controller counts recompilations in its stderr,
  run with `TORCH_LOGS=recompiles`).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from models import ModelConfig
from sweeper.bench.trial import BenchSettings, memory, reset_memory_peak, run_bench
from trials.config import DataConfig, DivergenceConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from trials.determinism import set_deterministic
from trials.spec import TrialSpec
from trials.train import Trial

#: dense bf16 peaks (FLOP/s, no sparsity) by device name, for MFU
NOMINAL_BF16_PEAK = {"H200": 989.4e12, "H100 PCIe": 756.0e12, "H100": 989.4e12, "A100": 312.0e12}
#: memory bandwidth (bytes/s) by device name, for the GEMM roofline beside the MFU
NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100": 2.0e12}
#: a fast path agrees with the eager per-step reference within this (absolute, on final losses)
CORRECTNESS_TOLERANCE = {"bf16": 2e-2, "fp32": 1e-4}


class Skipped(Exception):
    """The check does not apply on this device."""


def progress(message: str) -> None:
    print(f"[suite worker] {message}", file=sys.stderr, flush=True)


def nominal_peak(device: torch.device) -> tuple[str, float | None]:
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    for key, peak in NOMINAL_BF16_PEAK.items():
        if key in name:
            return name, peak
    return name, None


def nominal_bandwidth(name: str) -> float | None:
    return next((bw for key, bw in NOMINAL_BANDWIDTH.items() if key in name), None)


def gemm_intensity(width: int, hidden: int) -> float:
    """FLOP per byte of a block's GEMMs in bf16 with many tokens, weighted by their FLOPs: a [T, d] x [d, n]
    product does 2 T d n FLOPs over 2 T (d + n) bytes of activations read and written (the weights are
    small beside them), d n / (d + n) per byte; q, k, v, o are d x d, the SwiGLU's three d x hidden."""
    attention, mlp = 4 * width * width, 3 * width * hidden
    return (attention * width * width / (2 * width) + mlp * width * hidden / (width + hidden)) / (attention + mlp)


def check_train(params: dict[str, Any]) -> dict[str, Any]:
    settings = BenchSettings(**params)
    if settings.cuda_graphs and not torch.cuda.is_available():
        raise Skipped("CUDA graphs need a CUDA device")
    result = run_bench(settings)
    run = result["runs"]["stack"]
    device = torch.device(settings.device)
    name, peak = nominal_peak(device)
    out = {
        "execution": result["execution"], "device": name, "stack": settings.stack, "depth": settings.depth,
        "tokens_per_s": run["tokens_per_s"], "step_s_median": run["step_s_median"],
        "model_flops_per_s": run["model_flops_per_s"], "flops_per_token": result["counting"]["flops_per_token"],
        "matmul_peak_flops_per_s": result["matmul_peak_gflops"] * 1e9, "fraction_of_measured_peak": run["fraction_of_peak"],
        "nominal_peak_flops_per_s": peak, "mfu": run["model_flops_per_s"] / peak if peak else None,
        "gemm_flop_per_byte": gemm_intensity(settings.width, settings.model().hidden),
        "compile_s": result["compile_s"], "build_s": result["build_s"], "warmup_step_s": result["warmup_step_s"],
        "evaluation": result["evaluation"], "memory": result["memory"],
    }
    if device.type == "cuda":  # the whole process on the device: context and allocator, beside its tensors
        free, total = torch.cuda.mem_get_info(device)
        out["memory"]["context_bytes"] = max(0, (total - free) - torch.cuda.memory_reserved(device))
        bandwidth = nominal_bandwidth(name)
        if peak and bandwidth:  # the most the GEMMs could reach at full memory bandwidth (the roofline)
            out["gemm_roofline_fraction"] = min(1.0, out["gemm_flop_per_byte"] * bandwidth / peak)
    return out


def _correctness_spec(params: dict[str, Any], **train: Any) -> TrialSpec:
    model = ModelConfig(scheme=params["scheme"], width=params.get("width", 128), depth=params.get("depth", 2),
                        n_heads=params.get("heads", 4), vocab=params.get("vocab", 256), seq_len=params.get("seq_len", 64))
    recipe = {"steps": params.get("steps", 12), "batch_size": params.get("batch", 8), "eval_every": params.get("steps", 12),
              "eval_batches": 2, "report_every": params.get("steps", 12), "checkpoint_every": 10**6,
              "device": params["device"], "dtype": params.get("dtype", "fp32"), "schedule": ScheduleConfig(warmup=3),
              "optimizer": OptimizerConfig(grad_clip=1.0), **train}
    data = DataConfig(source="synthetic", synthetic_vocab=model.vocab, synthetic_tokens=65536)
    # the middle learning rate diverges: the fast paths must drop it at the same step (a graph is re-captured)
    return TrialSpec(model=model, train=TrainConfig(**recipe), data=data, lrs=[2e-3, 60.0, 2e-2], seed=3,
                     divergence=DivergenceConfig(stall_margin=None))


def check_correctness(params: dict[str, Any]) -> dict[str, Any]:
    """One scheme's fast paths against its eager per-step reference: the same outcomes, the same divergence
    step, final losses within `CORRECTNESS_TOLERANCE` (bf16 rounding on CUDA). `params["paths"]`: the
    paths to compare, each a dict of train settings (e.g. {"compile": true, "cuda_graphs": true})."""
    reference = Trial(_correctness_spec(params, sync_every=1)).run()
    tolerance = CORRECTNESS_TOLERANCE.get(params.get("dtype", "fp32"), 2e-2)
    paths: dict[str, Any] = {}
    for options in params["paths"]:
        label = "+".join(k for k, v in sorted(options.items()) if v is True) or "deferred"
        if options.get("cuda_graphs") and not torch.cuda.is_available():
            raise Skipped("CUDA graphs need a CUDA device")
        fast = Trial(_correctness_spec(params, **options)).run()
        diffs = [abs(a.loss - b.loss) for a, b in zip(reference, fast) if a.loss is not None and b.loss is not None]
        same = ([r.outcome for r in fast] == [r.outcome for r in reference]
                and [r.diverged_step for r in fast] == [r.diverged_step for r in reference]
                and all(d <= tolerance for d in diffs))
        paths[label] = {"agrees": same, "max_abs_loss_diff": max(diffs) if diffs else None,
                        "outcomes": [r.outcome for r in fast], "diverged_steps": [r.diverged_step for r in fast]}
        if options.get("compile"):
            torch._dynamo.reset()  # the next scheme compiles its own blocks
    return {"scheme": params["scheme"], "tolerance": tolerance, "reference_outcomes": [r.outcome for r in reference],
            "reference_losses": [r.loss for r in reference], "paths": paths,
            "agrees": all(p["agrees"] for p in paths.values())}


def _determinism_spec(params: dict[str, Any]) -> TrialSpec:
    model = ModelConfig(scheme=params.get("scheme", "layerrope"), width=params.get("width", 64), depth=params.get("depth", 2),
                        n_heads=params.get("heads", 2), vocab=256, seq_len=params.get("seq_len", 32))
    train = TrainConfig(steps=params.get("steps", 20), batch_size=params.get("batch", 8), eval_every=10, eval_batches=2,
                        report_every=10, checkpoint_every=10**6, device=params["device"], dtype=params.get("dtype", "fp32"),
                        compile=params.get("compile", False), deterministic=True,
                        schedule=ScheduleConfig(warmup=3), optimizer=OptimizerConfig(grad_clip=1.0))
    data = DataConfig(source="synthetic", synthetic_vocab=256, synthetic_tokens=32768)
    return TrialSpec(model=model, train=train, data=data, lrs=[2e-3, 8e-3], seed=4)


def _weights(trial: Trial) -> dict[str, torch.Tensor]:
    return {f"{m}/{n}": t.detach().cpu() for m in range(len(trial.spec.lrs)) for n, t in trial.member_weights(m).items()}


def _identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[bool, float]:
    """Bitwise equality, and the largest absolute difference (for the record)."""
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a) if a.keys() == b.keys() else float("inf")
    return same, worst


def check_determinism(params: dict[str, Any]) -> dict[str, Any]:
    spec = _determinism_spec(params)
    try:
        first = Trial(spec)
        first_results = first.run()
        again = Trial(spec)
        again_results = again.run()
        with tempfile.TemporaryDirectory(prefix="suite-resume-") as folder:
            stopped = Trial(spec)
            half = spec.train.steps // 2
            stopped.run(checkpoint_dir=folder, should_stop=lambda: stopped.step >= half)
            resumed = Trial(spec)
            resumed_results = resumed.run(checkpoint_dir=folder)
    finally:
        set_deterministic(False)  # process-wide: the following checks run as sweeps do
    rerun_same, rerun_diff = _identical(_weights(first), _weights(again))
    resume_same, resume_diff = _identical(_weights(first), _weights(resumed))
    losses = [r.loss for r in first_results]
    return {
        "rerun_bit_identical": rerun_same and losses == [r.loss for r in again_results],
        "resume_bit_identical": resume_same and losses == [r.loss for r in resumed_results],
        "rerun_max_abs_diff": rerun_diff, "resume_max_abs_diff": resume_diff, "losses": losses,
        "outcomes": [r.outcome for r in first_results], "steps": spec.train.steps,
    }


def check_long_trial(params: dict[str, Any]) -> dict[str, Any]:
    device = torch.device(params["device"])
    model = ModelConfig(scheme=params.get("scheme", "pre"), width=params["width"], depth=params["depth"], n_heads=params["heads"],
                        vocab=params["vocab"], seq_len=params["seq_len"])
    train = TrainConfig(steps=params["steps"], batch_size=params["batch_size"], micro_batch=params.get("micro_batch"),
                        eval_every=params["eval_every"], eval_batches=params["eval_batches"], report_every=params.get("report_every", 50),
                        checkpoint_every=10**9, device=params["device"], dtype=params["dtype"], compile=params["compile"],
                        schedule=ScheduleConfig(warmup=0.05), optimizer=OptimizerConfig(grad_clip=1.0, weight_decay=0.1))
    data = DataConfig(source="synthetic", synthetic_vocab=params["vocab"], synthetic_tokens=params.get("tokens", 1_000_000))
    lrs = [params.get("lr", 3e-3) * 2.0**i for i in range(params.get("stack", 1))]
    spec = TrialSpec(model=model, train=train, data=data, lrs=lrs, seed=0)
    reset_memory_peak(device)
    started = time.perf_counter()
    trial = Trial(spec)
    built = time.perf_counter() - started

    def report(r: Any) -> None:
        progress(f"long trial: step {r.step}/{trial.steps}, {time.perf_counter() - started:.0f} s")
        # how far it got and its memory so far, should it be stopped before the end
        record_progress(step=r.step, seconds=time.perf_counter() - started, evaluations=trial.evaluations,
                        memory=memory(device))

    results = trial.run(report=report)
    seconds = time.perf_counter() - started
    out = {
        "steps": trial.step, "planned_steps": trial.steps, "stack": len(lrs), "seconds": seconds, "build_s": built,
        "train_seconds": trial.train_seconds, "evaluations": trial.evaluations, "eval_chunk": trial.eval_chunk,
        "outcomes": [r.outcome for r in results], "losses": [r.loss for r in results],
        "init_losses": [r.init_loss for r in results], "execution": trial.execution.describe(), "memory": memory(device),
    }
    # (no CUDA context figure here: the suite runs this trial beside a sweep on the same device, so the device's
    # used memory is not this process's; the controller takes the context measured by the shape checks, alone)
    return out


CHECKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "train": check_train, "determinism": check_determinism, "long_trial": check_long_trial,
    "correctness": check_correctness,
}


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _clean_up() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


_progress_to: tuple[Path, str] | None = None  # (results file, name of the running check)


def record_progress(**fields: Any) -> None:
    """A progress event of the running check (the controller keeps the last one if the check is stopped)."""
    if _progress_to is not None:
        path, name = _progress_to
        _append(path, {"name": name, "event": "progress", **fields})


def run_plan(plan: dict[str, Any], results: Path) -> None:
    global _progress_to
    for check in plan["checks"]:
        name, kind, params = check["name"], check["kind"], check.get("params", {})
        _progress_to = (results, name)
        _append(results, {"name": name, "event": "start", "time": time.time()})
        progress(f"{name}: started")
        started = time.perf_counter()
        record: dict[str, Any] = {"name": name, "event": "end"}
        try:
            record.update(status="done", result=CHECKS[kind](params))
        except Skipped as exc:
            record.update(status="skipped", error=str(exc))
        except Exception as exc:  # one check's failure never stops the others
            record.update(status="error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=8))
        record["seconds"] = time.perf_counter() - started
        _append(results, record)
        progress(f"{name}: {record['status']} in {record['seconds']:.1f} s")
        _clean_up()


def run(plan_path: Path, results: Path) -> None:
    """Run the checks of `plan_path` (a plan file) in order, appending their events to `results`."""
    run_plan(json.loads(plan_path.read_text()), results)
