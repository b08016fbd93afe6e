"""Bounded thread and process counts in a trial process, from the trial's CPU share.

Left alone, every trial process would start as many threads and helper processes as the *node*
has cores: torch's intra-op pool, OpenMP/MKL pools, the Hugging Face tokenizer's Rust (rayon)
pool, and up to 32 inductor compile workers (`TORCHINDUCTOR_COMPILE_THREADS`). At 64 trials on a
node that is thousands of processes fighting for the cores Ray gave each trial. `bound_to_share`
caps each of them at the CPUs Ray assigned the trial (`resources.cpu` of the sweep), inside the
trial process itself (`trials.ray_entry.trainable` calls it before anything is built):

- torch intra-op threads (`torch.set_num_threads`; `train.threads` overrides),
- `OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `OPENBLAS_NUM_THREADS` (pools started later, children),
- `RAYON_NUM_THREADS` and `TOKENIZERS_PARALLELISM` (the tokenizer's pool starts on first use),
- inductor's compile workers (`torch._inductor.config.compile_threads` and its variable; with one
  CPU, compilation runs in the trial process and no worker pool is started).

It also sets `CUBLAS_WORKSPACE_CONFIG` (unless given) to a fixed workspace, `:4096:8` (cuBLAS's own
choice on Hopper), because the deterministic mode (`train.deterministic`) needs it before the
process's first cuBLAS call, and in a reused Ray actor the first trial need not be deterministic.
"""

from __future__ import annotations

import os
from typing import Any

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS",
                    "TORCHINDUCTOR_COMPILE_THREADS")
CUBLAS_WORKSPACE = ":4096:8"


def assigned_cpus() -> int | None:
    """The whole CPUs Ray assigned to this worker's task or actor, at least 1 (a trial that asked for none
    or for a fraction still runs one thread); None outside a Ray worker."""
    import ray  # only inside a trial process, where Ray is loaded already

    if not ray.is_initialized():
        return None
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # not inside a Ray worker
        return None
    return max(1, int(cpus or 0))


def bound_to_share(cpus: int, *, torch_threads: int | None = None) -> dict[str, Any]:
    """Cap this process's threads and compile workers at `cpus`; returns `readings()`."""
    import torch  # the trial process imports it anyway; the variables above are set first

    n = max(1, int(cpus))
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if n > 1 else "false"
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.set_num_threads(torch_threads or n)
    import torch._inductor.config as inductor_config  # read when the first compile starts its workers

    inductor_config.compile_threads = n
    return readings()


def readings() -> dict[str, Any]:
    """What this process runs with now: torch threads, inductor compile workers, and the variables."""
    import torch
    import torch._inductor.config as inductor_config

    out: dict[str, Any] = {"torch_threads": torch.get_num_threads(), "compile_threads": inductor_config.compile_threads}
    for name in (*THREAD_VARIABLES, "TOKENIZERS_PARALLELISM", "CUBLAS_WORKSPACE_CONFIG"):
        out[name] = os.environ.get(name)
    return out
