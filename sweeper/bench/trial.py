"""Training throughput, measured: the code behind `sweeper bench`.

A benchmark builds a real trial (`trials.train.Trial`: the data stream, the divergence check,
the optimizer and every execution option of the sweeps) and drives its training steps:

1. warm-up steps (default 3; the first one compiles when `compile` is on), timed one by one and
   reported apart, never counted in the throughput;
2. `steps` measured steps (default 30) in `rounds` rounds (default 5): wall time, and this
   process's CPU time (all threads), which a busy machine inflates much less than wall time;
   the measured steps include evaluations as a trial runs them (`Trial.evaluate`, in micro-batch
   chunks), by default one per round of `eval_batches` (1) batches, about the share of a step
   that `sweeps/depth.yaml`'s 40 batches every 500 steps take; the first evaluation (it compiles
   its own graph) runs after the warm-up steps and is reported apart; `evaluate=False` leaves
   evaluation out;
3. a dense matmul peak (`sweeper.bench.model.matmul_peak_gflops`: 1024^3 on the CPU, 8192^3 on a GPU,
   same device, dtype and threads) measured before every round and at the end.

Figures (every one per member, summed over the K members of a stack):
- tokens/s = K x batch x seq_len x steps / wall seconds of the measured steps;
- model FLOP/s = tokens/s x `models.flops_per_token` = 6 N_matmul + 12 L T d (attention over the
  full T x T matrix), and the 6 N_matmul part alone (the CPU target is stated that way);
- fraction of peak = model FLOP/s / the best matmul peak of the run, for both counts; and, for the
  6 N count, the median over rounds of each round's rate / the peak measured just before it
  (`interleaved`: fair when the machine's load changes during the run), and model FLOPs per
  CPU-second / matmul FLOPs per CPU-second (`cpu`: robust to load, but above the wall-time
  fraction when threads wait for each other).

`compare`: K separate stack-1 trials against one K-stack trial, in interleaved rounds (each round
runs a few steps of every separate model, then of the stack) so that load from other processes
falls on both alike; the ratio is the stack's tokens/s over the separate models' tokens/s.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from models import ModelConfig, count_params, flops_per_token
from sweeper.bench.model import matmul_peak_gflops
from trials.config import DataConfig, DivergenceConfig, TrainConfig
from trials.errors import TrialInputError
from trials.footprint import TrialShape, measured_key, measured_path, record_measured
from trials.spec import TrialSpec
from trials.train import Trial

BENCH_LR = 1e-3
# Only a non-finite loss (a rule that cannot be switched off) stops a member: the smoothed-loss rules would
# stop a member whose loss rises for a step before warmup ends, and a stopped member's steps skip their
# backward pass, which would make the figures wrong. A benchmark that loses a member refuses to report.
NO_DIVERGENCE = DivergenceConfig(explode_factor=None, init_loss_margin=1e9, spike_factor=1e9, spike_patience=10**9,
                                 stall_margin=None)


@dataclass(frozen=True)
class BenchSettings:
    method: str = "pre"
    width: int = 128
    depth: int = 8
    heads: int | None = None  # default width / 32
    stack: int = 1
    compile: bool = False
    device: str = "cpu"
    dtype: str = "fp32"
    seq_len: int = 128
    batch: int = 8
    vocab: int = 256
    threads: int | None = None
    steps: int = 30
    warmup: int = 3
    fused_loss: bool = True
    sync_every: int | None = None
    cuda_graphs: bool = False
    micro_batch: int | None = None
    compare: bool = False
    rounds: int = 5  # compare: interleaved rounds
    breakdown: bool = False  # profile extra steps of the stack and split their time by kind of work
    breakdown_steps: int = 5
    data_path: str | None = None  # a prepared corpus or token file (source tokens) instead of the built-in corpus
    evaluate: bool = True  # measured steps include evaluations, as in a trial
    eval_every: int | None = None  # steps between evaluations; None: one per measured round
    eval_batches: int = 1  # held-out batches (of `batch` sequences) per evaluation
    deterministic: bool = False
    peak_repeats: int | None = None  # timings per matmul peak measurement (None: 20 on a CPU, 10 on a GPU)

    @property
    def round_steps(self) -> int:
        return max(1, self.steps // self.rounds)

    @property
    def eval_interval(self) -> int | None:
        if not self.evaluate:
            return None
        return self.eval_every or self.round_steps

    def model(self) -> ModelConfig:
        heads = self.heads or max(1, self.width // 32)
        return ModelConfig(scheme=self.method, width=self.width, depth=self.depth, n_heads=heads, vocab=self.vocab,
                           seq_len=self.seq_len)

    def spec(self, stack: int) -> TrialSpec:
        train = TrainConfig(
            steps=self.warmup + self.steps * (2 if self.compare else 1) + (self.breakdown_steps if self.breakdown else 0) + 1,
            batch_size=self.batch, eval_every=self.eval_interval or 10**9, eval_batches=self.eval_batches,
            report_every=10**9, checkpoint_every=10**9, device=self.device,  # type: ignore[arg-type]
            dtype=self.dtype, compile=self.compile, threads=self.threads, fused_loss=self.fused_loss,  # type: ignore[arg-type]
            sync_every=self.sync_every, cuda_graphs=self.cuda_graphs, micro_batch=self.micro_batch,
            deterministic=self.deterministic,
        )
        # Real text (the interpreter's stdlib sources, bytes) when the vocabulary holds bytes; else a synthetic source.
        data = DataConfig() if self.vocab >= 256 else DataConfig(source="synthetic", synthetic_vocab=self.vocab)
        if self.data_path is not None:
            data = DataConfig(source="tokens", path=self.data_path)
        lrs = [BENCH_LR * (1 + 0.1 * i) for i in range(stack)]
        return TrialSpec(model=self.model(), train=train, data=data, divergence=NO_DIVERGENCE, lrs=lrs, seed=0)


@dataclass
class Timing:
    """Measured steps of one trial: wall and CPU seconds per step."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def wall_total(self) -> float:
        return sum(self.wall)

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def advance(trial: Trial) -> None:
    """One training step as `Trial.run` takes it (the deferred read when one is due, the evaluation when
    one is due)."""
    trial.train_step()
    trial.step += 1
    if trial._pending and trial.sync_due(False):
        trial.sync()
    if trial.step % trial.spec.train.eval_every == 0 and trial.active:
        trial.evaluate()


def run_steps(trial: Trial, n: int, timing: Timing) -> None:
    """`n` steps timed as one block (asynchronous devices are synchronized at its end only)."""
    _synchronize(trial.device)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(n):
        advance(trial)
    trial.sync()
    _synchronize(trial.device)
    timing.wall.append((time.perf_counter() - start) / n)
    timing.cpu.append((time.process_time() - cpu_start) / n)
    for _ in range(n - 1):  # per-step entries, so that totals and medians read naturally
        timing.wall.append(timing.wall[-1])
        timing.cpu.append(timing.cpu[-1])


def warm_up(trial: Trial, steps: int) -> list[float]:
    """Warm-up steps, timed one by one (the first one includes compilation)."""
    out = []
    for _ in range(steps):
        _synchronize(trial.device)
        start = time.perf_counter()
        advance(trial)
        trial.sync()
        _synchronize(trial.device)
        out.append(time.perf_counter() - start)
    return out


def warm_up_evaluation(trial: Trial) -> float:
    """One evaluation outside the measured steps (the first one compiles the no-gradient graph); seconds."""
    _synchronize(trial.device)
    start = time.perf_counter()
    trial.evaluate()
    _synchronize(trial.device)
    return time.perf_counter() - start


def reset_memory_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory(device: torch.device) -> dict[str, Any]:
    """Peak memory of the run: on CUDA the allocator's peaks since the last reset (allocated: tensors;
    reserved: what the process holds from the device) and the device's total; on a CPU the process's
    peak resident set since it started."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(device), "device_total_bytes": total,
                "device_free_bytes": free}
    import resource

    return {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def trial_shape(settings: BenchSettings) -> TrialShape:
    """The benchmarked trial's shape as the memory model sees it (`sweeper.search.memory.cell_shape` of a cell
    with the same settings gives the same shape, hence the same key)."""
    cfg = settings.model()
    counts = count_params(cfg)
    return TrialShape(family=cfg.family, params=counts["total"], params_matmul=counts["matmul"], width=cfg.width,
                      layers=cfg.depth, vocab=cfg.vocab, seq_len=cfg.seq_len,
                      micro_sequences=min(settings.batch, settings.micro_batch or settings.batch),
                      bf16=settings.dtype == "bf16", cuda=settings.device == "cuda", fused_loss=settings.fused_loss,
                      cuda_graphs=settings.cuda_graphs)


def record_peak(settings: BenchSettings, device: torch.device, figures: dict[str, Any]) -> Path:
    """Keep this run's whole footprint on the device (allocator peak reserved + the CUDA context beside it) for
    `stack: auto` (`trials.footprint.measured_path()`); adds `context_bytes` to `figures`."""
    free, total = torch.cuda.mem_get_info(device)
    figures["context_bytes"] = max(0, (total - free) - torch.cuda.memory_reserved(device))
    shape = trial_shape(settings)
    name = torch.cuda.get_device_name(device)
    record_measured(measured_key(name, shape, settings.method, settings.compile), settings.stack,
                    figures["peak_reserved_bytes"] + figures["context_bytes"], device=name,
                    device_total_bytes=total,
                    describe=f"{settings.method} d{settings.width} L{settings.depth} V{settings.vocab} seq {settings.seq_len} "
                             f"micro {shape.micro_sequences} {settings.dtype}{' compiled' if settings.compile else ''}")
    return measured_path()


@dataclass
class Peaks:
    """Matmul peaks measured during the run: GFLOP/s by wall time, and per second of CPU time."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def measure(self, settings: BenchSettings, device: torch.device) -> float:
        dtype = torch.bfloat16 if settings.dtype == "bf16" else torch.float32
        if device.type == "cuda":  # host CPU time says nothing about a GPU's work: no per-CPU-second rate
            value = matmul_peak_gflops(8192, repeats=settings.peak_repeats or 10, device=device, dtype=dtype, inner=5)
        else:
            value = matmul_peak_gflops(1024, repeats=settings.peak_repeats or 20, device=device, dtype=dtype, cpu=self.cpu)
        self.wall.append(value)
        return value


def machine(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": device.type, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"), "torch": torch.__version__,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def figures(settings: BenchSettings, stack: int, timing: Timing, peaks: Peaks, round_steps: int) -> dict[str, Any]:
    cfg = settings.model()
    counts = count_params(cfg)
    six_n = 6.0 * counts["matmul"]
    per_token = flops_per_token(cfg)
    tokens = stack * settings.batch * settings.seq_len * len(timing.wall)
    wall, cpu = timing.wall_total, timing.cpu_total
    tokens_per_s = tokens / wall
    peak = max(peaks.wall)
    # Each round against the peak measured just before it: fair when other processes come and go.
    step_tokens = stack * settings.batch * settings.seq_len
    per_round = [
        step_tokens / statistics.mean(timing.wall[r * round_steps:(r + 1) * round_steps]) * six_n / (peaks.wall[r] * 1e9)
        for r in range(len(timing.wall) // round_steps)
    ]
    cpu_peak = max(peaks.cpu) if peaks.cpu else None
    return {
        "stack": stack,
        "steps": len(timing.wall),
        "step_s_median": statistics.median(timing.wall),
        "step_s_min": min(timing.wall),
        "wall_s": wall,
        "cpu_s": cpu,
        "tokens_per_s": tokens_per_s,
        "tokens_per_cpu_s": tokens / cpu if cpu > 0 else None,
        "model_flops_per_s": tokens_per_s * per_token,
        "model_flops_6n_per_s": tokens_per_s * six_n,
        "fraction_of_peak": tokens_per_s * per_token / (peak * 1e9),
        "fraction_of_peak_6n": tokens_per_s * six_n / (peak * 1e9),
        "fraction_of_peak_6n_by_round": per_round,
        "fraction_of_peak_6n_interleaved": statistics.median(per_round) if per_round else None,
        # CPU seconds: model FLOPs per CPU-second against matmul FLOPs per CPU-second (load-robust; on
        # an idle machine above the wall-time fraction when threads wait on each other)
        "fraction_of_peak_6n_cpu": (tokens / cpu * six_n / (cpu_peak * 1e9)) if cpu > 0 and cpu_peak else None,
    }


def counting(settings: BenchSettings) -> dict[str, Any]:
    cfg = settings.model()
    counts = count_params(cfg)
    attention = 12.0 * cfg.depth * cfg.seq_len * cfg.width
    return {
        "params": counts["total"], "params_matmul": counts["matmul"], "params_nonembed": counts["nonembed"],
        "flops_per_token": flops_per_token(cfg), "flops_per_token_6n": 6.0 * counts["matmul"],
        "flops_per_token_attention": attention,
        "definition": "per member and token: 6 N_matmul (every parameter matmul incl. the LM head, not the embedding "
                      "gather) + 12 L T d (attention scores and values over the full T x T matrix); norms, RoPE, "
                      "softmax and the loss not counted",
    }


def check_alive(trial: Trial) -> None:
    dead = [(m, w.reason) for m, w in enumerate(trial.monitor.members) if w.diverged]
    if dead:
        m, reason = dead[0]
        raise TrialInputError(f"bench: member {m} diverged ({reason}); its steps would be timed without their backward pass")


def compile_seconds() -> float:
    """Wall seconds torch.compile has spent in this process so far (Dynamo, AOTAutograd, inductor)."""
    from torch._dynamo.utils import calculate_time_spent

    return float(calculate_time_spent().get("total_wall_time", 0.0))


def build(settings: BenchSettings, stack: int) -> tuple[Trial, float]:
    start = time.perf_counter()
    trial = Trial(settings.spec(stack))
    return trial, time.perf_counter() - start


def run_bench(settings: BenchSettings) -> dict[str, Any]:
    """Measure one configuration (and, with `compare`, K separate models against the stack).

    The measured steps run in `settings.rounds` rounds with a matmul peak measured before each round
    and once at the end; with `compare`, every round runs the separate models, then the stack.
    """
    load_start = os.getloadavg()
    compiled_before = compile_seconds()
    device = torch.device(settings.device)
    reset_memory_peak(device)
    trial, build_s = build(settings, settings.stack)
    warmup = warm_up(trial, settings.warmup)
    warmup_eval = warm_up_evaluation(trial) if settings.evaluate else None
    result: dict[str, Any] = {
        "settings": asdict(settings), "execution": trial.execution.describe(), "machine": machine(device),
        "counting": counting(settings), "build_s": build_s, "warmup_step_s": warmup,
        "compile_s": compile_seconds() - compiled_before,
    }
    singles = [build(settings, 1)[0] for _ in range(settings.stack)] if settings.compare else []
    for single in singles:
        warm_up(single, settings.warmup)
        if settings.evaluate:
            warm_up_evaluation(single)
    round_steps = settings.round_steps
    evaluations_before = trial.evaluations
    peaks = Peaks()
    measured = {"stack": Timing()}
    if singles:
        measured["separate"] = Timing()
    for _ in range(settings.rounds):
        peaks.measure(settings, device)
        if singles:
            separate = Timing()
            for single in singles:
                run_steps(single, round_steps, separate)
            # K separate models make one "step" of the stack's K x tokens: their step times add up
            for i in range(round_steps):
                measured["separate"].wall.append(sum(separate.wall[i::round_steps]))
                measured["separate"].cpu.append(sum(separate.cpu[i::round_steps]))
        run_steps(trial, round_steps, measured["stack"])
    peaks.measure(settings, device)
    for t in (trial, *singles):
        check_alive(t)
    result["matmul_peak_gflops"] = max(peaks.wall)
    result["matmul_peak_gflops_measured"] = peaks.wall
    result["matmul_peak_gflops_per_cpu_s"] = max(peaks.cpu) if peaks.cpu else None
    result["runs"] = {name: figures(settings, settings.stack, t, peaks, round_steps) for name, t in measured.items()}
    main = result["runs"]["stack"]
    if settings.compare:
        result["stack_speedup"] = main["tokens_per_s"] / result["runs"]["separate"]["tokens_per_s"]
        cpu_sep, cpu_stack = result["runs"]["separate"]["tokens_per_cpu_s"], main["tokens_per_cpu_s"]
        result["stack_speedup_cpu"] = cpu_stack / cpu_sep if cpu_sep and cpu_stack else None
    if settings.breakdown:
        result["breakdown"] = breakdown(trial, settings, result["matmul_peak_gflops"])
    result["evaluation"] = {
        "every": settings.eval_interval, "batches": settings.eval_batches,
        "sequences": settings.eval_batches * settings.batch, "chunk": trial.eval_chunk,
        "warmup_eval_s": warmup_eval, "measured": trial.evaluations - evaluations_before,
    }
    result["memory"] = memory(device)
    if device.type == "cuda" and not settings.compare:  # (K separate models in the process would inflate the peak)
        result["memory"]["recorded"] = str(record_peak(settings, device, result["memory"]))
    result["loadavg_start"] = [round(x, 2) for x in load_start]
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


# Where a step's time goes, by the name of the operator the profiler recorded (self time: an
# operator's own time, not its children's). GEMMs are the parameter matmuls (the 6N FLOPs);
# attention is `scaled_dot_product_attention` (the 12 L T d FLOPs); inductor's compiled graphs hold
# the fused elementwise work (norms, activations, RoPE, the optimizer's update) of compiled runs.
GEMM_OPS = frozenset({"aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm", "aten::addbmm", "aten::linear"})
BREAKDOWN_KINDS = ("gemm", "attention", "compiled graphs", "other")


def _kind(op: str) -> str:
    if op in GEMM_OPS:
        return "gemm"
    if "scaled_dot_product" in op or "flash_attention" in op or "efficient_attention" in op:
        return "attention"
    if "CompiledFxGraph" in op:
        return "compiled graphs"
    return "other"


def breakdown(trial: Trial, settings: BenchSettings, peak_gflops: float) -> dict[str, Any]:
    """Profile `settings.breakdown_steps` more steps of the stack (CPU only) and split their time
    by kind of work, with the FLOP rate the GEMMs and the attention reach on their own."""
    from torch.profiler import ProfilerActivity, profile

    steps = settings.breakdown_steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            advance(trial)
        trial.sync()
        wall = time.perf_counter() - start
    seconds = dict.fromkeys(BREAKDOWN_KINDS, 0.0)
    top: dict[str, float] = {}
    for event in prof.key_averages():
        self_s = event.self_cpu_time_total / 1e6
        kind = _kind(event.key)
        seconds[kind] += self_s
        if kind == "other":
            top[event.key] = top.get(event.key, 0.0) + self_s
    total = sum(seconds.values())
    cfg = settings.model()
    tokens = len(trial.slots) * settings.batch * settings.seq_len * steps
    gemm_flops = 6.0 * count_params(cfg)["matmul"] * tokens
    attention_flops = 12.0 * cfg.depth * cfg.seq_len * cfg.width * tokens

    def rate(flops: float, secs: float) -> dict[str, float] | None:
        if secs <= 0:
            return None
        return {"gflops_per_s": flops / secs / 1e9, "fraction_of_peak": flops / secs / (peak_gflops * 1e9)}

    return {
        "steps": steps,
        "profiled_step_s": wall / steps,
        "ms_per_step": {k: 1000 * v / steps for k, v in seconds.items()},
        "share": {k: (v / total if total > 0 else 0.0) for k, v in seconds.items()},
        "gemm_rate": rate(gemm_flops, seconds["gemm"]),
        "attention_rate": rate(attention_flops, seconds["attention"]),
        "top_other_ms_per_step": {k: 1000 * v / steps for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:5]},
        "note": "torch profiler self CPU time per operator (profiling adds overhead: compare profiled_step_s with the "
                "median step); attention FLOPs counted over the full T x T matrix",
    }
