"""What the launching machine has: host memory, and its first GPU's memory as `nvidia-smi` reports it.

No torch, no Ray (the dry run asks too, and must start fast): `stack: auto`'s budget
(`sweeper.search.memory`) takes these when the YAML does not say.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from sweeper.search.memory import DeviceMemory, check_fits, device_memory
from trials.footprint import load_measured

MiB = 2**20


def host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def local_gpu() -> tuple[int, str] | None:
    """(bytes, name) of this machine's smallest GPU, from `nvidia-smi`; None without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total,name", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in out.strip().splitlines():
        total, _, name = line.partition(",")
        try:
            gpus.append((int(float(total)) * MiB, name.strip()))
        except ValueError:
            continue
    return min(gpus) if gpus else None


def memory_inputs(gpu_memory_gb: float | None,
                  gpu_model: str | None = None) -> tuple[DeviceMemory, Mapping[str, Any], int | None]:
    """(the GPU's memory and model, `sweeper bench`'s measured peaks, the host's memory) for `stack: auto`.
    The model is `gpu_model` (the YAML's), else this machine's GPU's: measured peaks of that model only."""
    measured = load_measured()
    detected = None if gpu_memory_gb and gpu_model else local_gpu()
    return device_memory(gpu_memory_gb, measured, detected, gpu_model), measured, host_memory()


def checked_memory(plan: Any) -> tuple[DeviceMemory, Mapping[str, Any], int | None] | None:
    """`stack: auto`'s memory inputs, after refusing a plan where one member of a cell cannot fit
    (`sweeper.search.memory.check_fits`: UserError); None when the stack is not auto. `launch`,
    `launch --dry-run` and `validate` all ask this, so a file that validates plans."""
    if plan.config.stack != "auto":
        return None
    memory = memory_inputs(plan.config.resources.gpu_memory_gb, plan.config.resources.gpu_model)
    device, measured, host = memory
    check_fits(plan.cells, device=device, host_memory_bytes=host, measured=measured)
    return memory
