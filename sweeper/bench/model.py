"""Benchmarks of the networks on this machine (figures, not tests). Run one per process:

    sweeper bench model deep   [--depth 512] [--scheme pre] [--batch 2] [--seq 64]
    sweeper bench model step   [--depth 8] [--vocab 32000] [--stack 1] [--threads 2] [--scheme pre]
    sweeper bench model plain  [--depth 8] [--vocab 256] [--threads 2]

`deep`: build a width-128 model (vocab 32000) and run one forward+backward on a batch of
`batch x seq` tokens: build time, step wall time, peak resident memory (ru_maxrss of this process,
and the part above the RSS after `import torch`). `step`: tokens/s of full AdamW training steps
(width 128, seq 128, batch 8, fp32) with the matmul peak measured in the same run and the achieved
fraction of it counted as 6 N tokens. `plain`: a K = 1 stacked model against the same network
written with plain `nn.Linear` layers, and K = 4 stacked against 4 separate K = 1 models.
Every result is printed as one JSON line.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.build import build_model
from models.config import ModelConfig
from models.counting import count_params, flops_per_token
from models.layers import apply_rotary, rotary_tables


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def machine() -> dict:
    """Context for reading the figures: threads and the 1-minute load average (other processes)."""
    return {"threads": torch.get_num_threads(), "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}


def timed(fn: Callable[[], object], repeats: int, warmup: int = 1, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds per call; with `cpu`, also appends this process's CPU seconds per call (all threads),
    which a busy machine inflates much less than wall time."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(time.process_time() - cpu_start)
    return times


def matmul_peak_gflops(
    size: int = 1024, repeats: int = 20, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
    inner: int = 1, cpu: list[float] | None = None,
) -> float:
    """The best rate of a dense `size`^3 matmul in GFLOP/s on `device` in `dtype` (best of `repeats` timings
    of `inner` matmuls each, after 3 warm-up timings; on CUDA each timing ends with a synchronize).
    With `cpu`, also appends the best rate per second of this process's CPU time (all threads)."""
    device = torch.device(device)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def run() -> None:
        for _ in range(inner):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    cpu_times: list[float] = []
    best = min(timed(run, repeats, warmup=3, cpu=cpu_times))
    if cpu is not None:
        cpu.append(2 * size**3 * inner / max(1e-9, min(cpu_times)) / 1e9)
    return 2 * size**3 * inner / best / 1e9


def bench_deep(args: argparse.Namespace) -> dict:
    rss_after_import = current_rss_mib()
    cfg = ModelConfig(width=128, n_heads=4, depth=args.depth, vocab=32000, seq_len=args.seq, scheme=args.scheme)
    start = time.perf_counter()
    model = build_model(cfg, stack=1, seed=0)
    build_s = time.perf_counter() - start
    idx = torch.randint(0, cfg.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))

    def step() -> float:
        model.zero_grad(set_to_none=True)
        loss = model.member_losses(idx[:, :-1], idx[:, 1:]).sum()
        loss.backward()
        return float(loss.detach())

    start, cpu_start = time.perf_counter(), time.process_time()
    loss = step()
    first_s, first_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    cpu_start = time.process_time()
    again = timed(step, args.repeats, warmup=0)
    cpu_per_step = (time.process_time() - cpu_start) / max(1, args.repeats)
    return {
        "bench": "deep", "scheme": args.scheme, "depth": args.depth, "tokens": args.batch * args.seq,
        "params": count_params(cfg)["total"], **machine(), "build_s": round(build_s, 3),
        "first_fwd_bwd_s": round(first_s, 3), "first_fwd_bwd_cpu_s": round(first_cpu_s, 3),
        "fwd_bwd_s_median": round(statistics.median(again), 3), "fwd_bwd_cpu_s_mean": round(cpu_per_step, 3),
        "loss": round(loss, 4), "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_rss_above_torch_import_mib": round(peak_rss_mib() - rss_after_import, 1),
    }


def train_step_fn(model: nn.Module, loss_fn: Callable[[], Tensor], lr: float = 1e-3) -> Callable[[], None]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, foreach=True)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn().backward()
        optimizer.step()

    return step


def bench_step(args: argparse.Namespace) -> dict:
    cfg = ModelConfig(width=128, n_heads=4, depth=args.depth, vocab=args.vocab, seq_len=128, scheme=args.scheme)
    model = build_model(cfg, stack=args.stack, seed=0)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab, (args.batch, cfg.seq_len + 1), generator=gen)
    step = train_step_fn(model, lambda: model.member_losses(tokens[:, :-1], tokens[:, 1:]).sum())
    cpu: list[float] = []
    times = timed(step, args.repeats, warmup=2, cpu=cpu)
    peak = matmul_peak_gflops()
    per_step = statistics.median(times)
    tokens_per_step = args.batch * cfg.seq_len * args.stack  # member-tokens
    six_n = 6 * count_params(cfg)["matmul"]
    return {
        "bench": "step", "scheme": args.scheme, "depth": args.depth, "vocab": args.vocab, "stack": args.stack,
        **machine(), "step_s_median": round(per_step, 4), "step_s_min": round(min(times), 4),
        "step_cpu_s_median": round(statistics.median(cpu), 4), "tokens_per_s": round(tokens_per_step / per_step), "matmul_peak_gflops": round(peak, 1),
        "achieved_6N_gflops": round(six_n * tokens_per_step / per_step / 1e9, 1),
        "fraction_of_peak_6N": round(six_n * tokens_per_step / per_step / 1e9 / peak, 3),
        "flops_per_token_incl_attention": flops_per_token(cfg),
    }


class PlainPreNormLM(nn.Module):
    """The K = 1 Pre-Norm decoder written the ordinary way (nn.Linear, fused RMSNorm weight)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, h = cfg.width, cfg.hidden
        self.cfg = cfg
        self.emb = nn.Embedding(cfg.vocab, d)
        self.layers = nn.ModuleList()
        for _ in range(cfg.depth):
            self.layers.append(nn.ModuleDict({
                "qkv": nn.Linear(d, 3 * d, bias=False), "o": nn.Linear(d, d, bias=False),
                "gate_up": nn.Linear(d, 2 * h, bias=False), "down": nn.Linear(h, d, bias=False),
                "n1": nn.RMSNorm(d, eps=cfg.norm_eps), "n2": nn.RMSNorm(d, eps=cfg.norm_eps),
            }))
        self.norm = nn.RMSNorm(d, eps=cfg.norm_eps)
        self.head = nn.Linear(d, cfg.vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        batch, seq = idx.shape
        heads, hd = self.cfg.n_heads, self.cfg.head_dim
        rope = rotary_tables(seq, hd, self.cfg.rope_base, idx.device)
        x = self.emb(idx)
        for layer in self.layers:
            qkv = apply_rotary(layer["qkv"](layer["n1"](x)).view(batch, seq, 3, heads, hd), rope)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, -1)
            x = x + layer["o"](y)
            gate, up = layer["gate_up"](layer["n2"](x)).chunk(2, dim=-1)
            x = x + layer["down"](F.silu(gate) * up)
        return self.head(self.norm(x))


def bench_plain(args: argparse.Namespace) -> dict:
    cfg = ModelConfig(width=128, n_heads=4, depth=args.depth, vocab=args.vocab, seq_len=128)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab, (args.batch, cfg.seq_len + 1), generator=gen)
    x, y = tokens[:, :-1], tokens[:, 1:]

    plain = PlainPreNormLM(cfg)
    plain_step = train_step_fn(plain, lambda: F.cross_entropy(plain(x).flatten(0, 1), y.flatten()))
    one = build_model(cfg, stack=1, seed=0)
    one_step = train_step_fn(one, lambda: one.member_losses(x, y).sum())
    four = build_model(cfg, stack=4, seed=0)
    four_step = train_step_fn(four, lambda: four.member_losses(x, y).sum())
    singles = [build_model(cfg, stack=1, seed=0) for _ in range(4)]
    single_steps = [train_step_fn(m, lambda m=m: m.member_losses(x, y).sum()) for m in singles]

    def four_separate() -> None:
        for step in single_steps:
            step()

    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    # Interleave the candidates so that load from other processes affects them alike.
    candidates = (("plain_k1", plain_step), ("stacked_k1", one_step), ("stacked_k4", four_step), ("separate_4x_k1", four_separate))
    for _ in range(args.rounds):
        for name, fn in candidates:
            wall.setdefault(name, []).extend(timed(fn, args.repeats, warmup=1, cpu=cpu.setdefault(name, [])))
    med = {name: statistics.median(times) for name, times in wall.items()}
    med_cpu = {name: statistics.median(times) for name, times in cpu.items()}
    return {
        "bench": "plain", "depth": args.depth, "vocab": args.vocab, **machine(),
        **{f"{name}_step_s": round(value, 4) for name, value in med.items()},
        **{f"{name}_step_cpu_s": round(value, 4) for name, value in med_cpu.items()},
        "stacked_k1_over_plain": round(med["stacked_k1"] / med["plain_k1"], 3),
        "stacked_k4_over_4x_separate": round(med["stacked_k4"] / med["separate_4x_k1"], 3),
        "cpu_stacked_k1_over_plain": round(med_cpu["stacked_k1"] / med_cpu["plain_k1"], 3),
        "cpu_stacked_k4_over_4x_separate": round(med_cpu["stacked_k4"] / med_cpu["separate_4x_k1"], 3),
    }


def run(which: str, args: argparse.Namespace) -> dict:
    """One benchmark (`deep`, `step` or `plain`) with `args`' settings, the mode's defaults for those not given."""
    torch.set_num_threads(args.threads)
    if which == "deep":
        args.depth, args.batch = args.depth or 512, args.batch or 2
        args.repeats = min(args.repeats, 3)
        return bench_deep(args)
    if which == "step":
        args.depth, args.batch, args.vocab = args.depth or 8, args.batch or 8, args.vocab or 32000
        return bench_step(args)
    args.depth, args.batch, args.vocab = args.depth or 8, args.batch or 8, args.vocab or 256
    return bench_plain(args)
