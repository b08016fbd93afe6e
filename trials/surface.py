"""A planted loss surface: what a simulated trial reports instead of training (`sweeper launch --simulate`).

Per method (the sweep's method names), at size x (the sweep's x axis: depth, loop count or
parameters) and learning rate lr:

    L(x, lr) = E + A·x^-alpha + c·(ln lr − ln lr*(x))²,   lr*(x) = k·x^b

plus seed noise (relative, `noise`; the same for the same point and seed every time, so a
resumed simulation reports what an uninterrupted one does). Above `cliff`·lr*(x) the run
diverges; beyond `fails_above` (a size) every LR diverges (a scheme that cannot train that
deep); below `stall_below`·lr*(x) the run stalls at `stall_loss` at best. Over training the
loss falls from `init_loss` to its final value along `(1 − progress)^curve`.

Time: a step's FLOPs (6·N per token, the planner's count, times the members still training)
divided by the trial's share of the pool (`throughput` per GPU × its GPU fraction, or
`cpu_throughput` per CPU for CPU-only trials), divided by `time_compression`.

Pure logic: pydantic and the standard library; no torch, no Ray.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator


class SurfaceMethod(BaseModel):
    """One method's planted truth."""

    model_config = ConfigDict(extra="forbid")

    E: float = Field(description="irreducible loss")
    A: PositiveFloat = Field(description="size term's scale: A·x^-alpha")
    alpha: float = Field(description="size exponent of the loss (planted, what `sweeper fit` should recover)")
    lr_k: PositiveFloat = Field(description="optimal LR at size 1: lr*(x) = lr_k·x^lr_b")
    lr_b: float = Field(description="size exponent of the optimal LR (planted)")
    c: PositiveFloat = Field(0.02, description="curvature of the LR valley in (ln lr)²")
    cliff: PositiveFloat = Field(4.0, description="divergence above cliff·lr*(x)")
    fails_above: float | None = Field(None, description="every LR diverges at sizes above this")
    stall_below: PositiveFloat | None = Field(None, description="below stall_below·lr*(x) the loss stalls")
    stall_loss: float | None = Field(None, description="the loss a stalled run ends at, at best")

    @model_validator(mode="after")
    def _stall_pair(self) -> SurfaceMethod:
        if (self.stall_below is None) != (self.stall_loss is None):
            raise ValueError("stall_below and stall_loss: give both or neither")
        return self

    def optimal_lr(self, x: float) -> float:
        return self.lr_k * x ** self.lr_b

    def optimal_loss(self, x: float) -> float:
        return self.E + self.A * x ** -self.alpha


class Pool(BaseModel):
    """The virtual Ray pool a simulation runs on (one node with these resources)."""

    model_config = ConfigDict(extra="forbid")

    gpus: PositiveInt = 64
    cpus: PositiveInt = 1024  # Ray CPU slots (bookkeeping: simulated trials sleep)
    gpu_memory_gb: PositiveFloat = 141.0  # the declared device memory (an H200)


class Surface(BaseModel):
    """A planted surface file (`sweeps/surfaces/*.yaml`)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    pool: Pool = Field(default_factory=Pool)
    throughput: PositiveFloat = 2e14  # training FLOP/s of one whole GPU
    cpu_throughput: PositiveFloat = 5e10  # training FLOP/s of one CPU core
    time_compression: PositiveFloat = 1000.0  # simulated seconds per wall second
    min_report_seconds: float = Field(0.5, ge=0)  # wall seconds between two reports at least (others are coalesced)
    noise: float = Field(0.001, ge=0)  # relative seed-to-seed noise of a final loss (one standard deviation)
    init_loss: PositiveFloat | None = None  # the loss at step 0; default ln(vocab)
    curve: PositiveFloat = 2.0  # loss(progress) = final + (init − final)·(1 − progress)^curve
    methods: dict[str, SurfaceMethod]

    def fingerprint(self) -> str:
        """Of what the reported losses depend on (not the pool, the clock or the report spacing)."""
        result = self.model_dump(mode="json", include={"methods", "noise", "init_loss", "curve"})
        return hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()[:16]


def _unit_normal(*key: Any) -> float:
    """A standard normal draw fixed by `key` (the same on every machine and every run)."""
    seed = int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little")
    return random.Random(seed).gauss(0.0, 1.0)


def final_loss(method: SurfaceMethod, x: float, lr: float, seed: int, noise: float, key: str) -> float | None:
    """The point's final loss, or None when it diverges."""
    star = method.optimal_lr(x)
    if (method.fails_above is not None and x > method.fails_above) or lr > method.cliff * star:
        return None
    loss = method.optimal_loss(x) + method.c * math.log(lr / star) ** 2
    if method.stall_below is not None and lr < method.stall_below * star:
        loss = max(loss, float(method.stall_loss))  # type: ignore[arg-type]
    return loss * (1.0 + noise * _unit_normal(key, x, f"{lr:.6g}", seed))


def diverged_step(method: SurfaceMethod, x: float, lr: float, steps: int) -> int:
    """The step a diverging point diverges at: earlier the further above the cliff."""
    star = method.optimal_lr(x)
    over = lr / (method.cliff * star) if lr > method.cliff * star else 1.0
    return max(1, min(steps - 1, int(0.1 * steps / over)))


def loss_at(final: float, init: float, progress: float, curve: float) -> float:
    return final + (init - final) * (1.0 - min(1.0, max(0.0, progress))) ** curve
