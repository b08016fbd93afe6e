"""How large a GPU share a trial asks Ray for (`resources.placement`).

Ray assigns a fractional GPU request to one GPU, best fit: it fills the GPU with the least free
share that still holds the request, so twelve 0.125-GPU trials on an 8-GPU node share two GPUs
(eight and four) and six GPUs idle (`sweeper.sim.devices` shows the check). Its fractions are
bookkeeping: a process alone on a GPU gets all of the device's time, and trials packed onto one
GPU take turns on it. While fewer trials want to run than the pool could pack, packing them only
makes them wait for each other.

`spread` (the default) asks for `1/ceil(wanted / gpus)` of a GPU, never less than the cell's
declared fraction and never more than one GPU: with `wanted` trials at most the pool's GPU count,
each asks for a whole GPU; up to twice as many, for half of one; and so on, until the declared
fraction is the larger and the pool packs as the YAML says. `wanted` is the trials running or
waiting plus one per cell with learning rates queued, when the trial is proposed; the request is
fixed for the trial's life, so a trial proposed while the pool was nearly empty holds its larger
share until it ends (cells opening later wait for it, or pack into the rest). The share decides
where a trial runs, never which learning rates it trains: the LR search stays a function of the
finished results. `pack` always asks for the declared fraction.

Pure: no Ray.
"""

from __future__ import annotations

import math

#: Ray counts resources in units of 1e-4: a share rounded down to them sums to at most one GPU
RAY_UNIT = 1e-4


def gpu_request(declared: float, wanted: int, pool_gpus: float, placement: str = "spread") -> float:
    """The GPU share one trial asks Ray for (see the module docstring)."""
    if placement != "spread" or not 0 < declared < 1 or pool_gpus < 1 or wanted < 1:
        return declared
    per_gpu = math.ceil(wanted / math.floor(pool_gpus))
    share = math.floor(1.0 / per_gpu / RAY_UNIT) * RAY_UNIT
    return round(max(declared, min(1.0, share)), 4)
