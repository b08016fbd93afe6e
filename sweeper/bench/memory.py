"""The memory model against a measurement on a CPU: peak resident memory of a few training steps in this
process, beside what `trials.footprint` predicts for the same trial.

    MALLOC_MMAP_THRESHOLD_=65536 sweeper bench memory --stack 2 --width 128 --depth 8 --seq-len 128 --batch 16

Run it in a fresh process (the peak is the process's): with glibc mapping every allocation above 64 KiB
on its own (`MALLOC_MMAP_THRESHOLD_`), freed tensors go back to the system and the resident peak is the
tensors' peak. fp32 and eager only: the CPU has no autocast copies, no CUDA context, no graph pool and
no fused-loss GPU chunk, so those terms can only be checked on a GPU (`sweeper bench --suite gpu`,
check `memory_model`). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import resource
from typing import Any

import torch

from models import ModelConfig, count_params
from sweeper.bench.trial import advance
from trials.config import DataConfig, DivergenceConfig, TrainConfig
from trials.footprint import TrialShape, footprint
from trials.spec import TrialSpec
from trials.train import Trial

MiB = 2**20


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


#: the settings and their defaults (`sweeper bench memory --NAME`)
SETTINGS = (("stack", 2), ("width", 128), ("depth", 8), ("seq_len", 128), ("batch", 16), ("vocab", 4096),
            ("micro_batch", 0), ("steps", 3))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The measured peak beside the model's prediction, for `SETTINGS` (and `no_fused_loss`) read from `args`."""
    torch.set_num_threads(1)
    cfg = ModelConfig(scheme="pre", width=args.width, depth=args.depth, n_heads=max(1, args.width // 32), vocab=args.vocab,
                      seq_len=args.seq_len)
    train = TrainConfig(steps=args.steps + 1, batch_size=args.batch, eval_every=10**9, eval_batches=1, report_every=10**9,
                        checkpoint_every=10**9, device="cpu", dtype="fp32", fused_loss=not args.no_fused_loss,
                        micro_batch=args.micro_batch or None)
    spec = TrialSpec(model=cfg, train=train, data=DataConfig(source="synthetic", synthetic_vocab=args.vocab),
                     divergence=DivergenceConfig(), lrs=[1e-3 * (i + 1) for i in range(args.stack)], seed=0)
    gc.collect()
    base = resident_bytes()
    trial = Trial(spec)
    for _ in range(args.steps):
        advance(trial)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    counts = count_params(cfg)
    shape = TrialShape(family="llama", params=counts["total"], params_matmul=counts["matmul"], width=args.width,
                       layers=args.depth, vocab=args.vocab, seq_len=args.seq_len,
                       micro_sequences=min(args.batch, args.micro_batch or args.batch), bf16=False, cuda=False,
                       fused_loss=not args.no_fused_loss)
    model = footprint(shape)
    held = sum(model.per_trial.values()) + args.stack * sum(model.per_member.values())
    settings = {name: getattr(args, name) for name, _ in SETTINGS} | {"no_fused_loss": args.no_fused_loss}
    return {
        "settings": settings, "measured_peak_above_start_mib": round((peak - base) / MiB, 1),
        "model_mib": round(model.total(args.stack) / MiB, 1), "model_without_fragmentation_mib": round(held / MiB, 1),
        "measured_over_model": round((peak - base) / model.total(args.stack), 3),
        "terms_mib": {k: round(v / MiB, 1) for k, v in model.terms(args.stack).items()},
    }
