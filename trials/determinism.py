"""Torch's deterministic mode for a trial (`train.deterministic: true`).

What is exact where:

- On a CPU, a trial is bit-identical run to run, and a resumed trial is bit-identical to an
  uninterrupted one, in either mode.
- On CUDA by default, results are equal to float rounding only: SDPA's backward and
  `scatter_add_` accumulate with atomics in a varying order, and cuBLAS may pick another kernel
  for another batch count (when a diverged member leaves the stack, the survivors' matmuls run
  with a smaller batch and may round differently than before).
- On CUDA with `deterministic: true`: `torch.use_deterministic_algorithms(True)` (every op runs a
  deterministic kernel, or raises if it has none: nothing is silently nondeterministic), a fixed
  cuBLAS workspace (`CUBLAS_WORKSPACE_CONFIG`, set before the first cuBLAS call: see
  `trials.cpu_share`), and inductor's deterministic mode (no timing-based kernel choices). A run
  and its repetition, and a resumed run and an uninterrupted one, are then bit-identical on the
  same GPU model and software. The stack-size effect above remains: a member's numbers depend on
  the stack it trained in (equal to float rounding across stack sizes). Slower: use it for
  exactness checks, not for sweeps.

The mode is process-wide; `set_deterministic` sets it to one trial's choice (a reused Ray actor
runs trials of either kind).
"""

from __future__ import annotations

import os

from trials.cpu_share import CUBLAS_WORKSPACE


def set_deterministic(on: bool) -> None:
    import torch  # callers have it loaded; the variable below must be set before the first cuBLAS call
    import torch._inductor.config as inductor_config

    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(on)
    inductor_config.deterministic = on
