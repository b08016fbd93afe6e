"""How large a GPU share a trial asks Ray for (`resources.placement`).

Ray assigns a fractional GPU request to one GPU, best fit: it fills the GPU with the least free
share that still holds the request, so twelve 0.125-GPU trials on an 8-GPU node share two GPUs
(eight and four) and six GPUs idle (`sweeper.sim.devices` shows the check). Its fractions are
bookkeeping: a process alone on a GPU gets all of the device's time, and trials packed onto one
GPU take turns on it. While fewer trials want to run than the pool could pack, packing them only
makes them wait for each other, and leaves GPUs empty.

`spread` (the default) gives each GPU one *lead* trial while fewer trials want to run than the pool
would pack, and lets the others follow at their declared share:
- while fewer than one lead per GPU is running, a new trial asks for a lead share
  `1 - max(1, ceil((wanted - gpus) / gpus)) x f` (f its declared fraction): more than half a GPU, so
  no two leads share a GPU, with room beside each lead for its share of the followers and for one at
  least (a lead never holds a whole GPU: a cell opening later starts beside it rather than waiting
  for a GPU to empty); when that share would be half a GPU or less, the pool is full enough and it
  asks for f;
- every other trial asks for its declared f, and Ray's best fit puts it beside a lead.
Trials are proposed longest work first, so the leads are the longest trials: every GPU keeps one
until the work runs out, instead of the longest trials landing together on the first GPUs (which
uniform shares of `1/ceil(wanted/gpus)` did: best fit fills GPU 0 first). `wanted` is the trials
running or waiting plus one per cell with learning rates queued, when the trial is proposed; a
share is fixed for the trial's life. The share decides where a trial runs, never which learning
rates it trains: the LR search stays a function of the finished results. `pack` always asks for
the declared fraction.

Pure: no Ray.
"""

from __future__ import annotations

import math

#: Ray counts resources in units of 1e-4: a share rounded down to them never overfills a GPU
RAY_UNIT = 1e-4
#: a lead share must exceed this, so that best fit never puts two leads on one GPU
LEAD_ABOVE = 0.5


def gpu_request(declared: float, wanted: int, pool_gpus: float, placement: str = "spread", leads: int = 0) -> float:
    """The GPU share one trial asks Ray for; `leads`: the running or waiting trials holding a lead share
    (see the module docstring)."""
    if placement != "spread" or not 0 < declared < 1 or pool_gpus < 1 or wanted < 1:
        return declared
    gpus = math.floor(pool_gpus)
    if leads >= gpus:
        return declared
    # room beside each lead for its share of the followers, and for one at least: a cell that opens
    # later starts beside a lead instead of waiting for a GPU to empty
    followers_per_gpu = max(1, math.ceil((wanted - gpus) / gpus))
    share = math.floor((1.0 - followers_per_gpu * declared) / RAY_UNIT) * RAY_UNIT
    return round(share, 4) if share > LEAD_ABOVE else declared


def is_lead(share: float) -> bool:
    """A share that no other lead can join on its GPU."""
    return LEAD_ABOVE < share <= 1.0
