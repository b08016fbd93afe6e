"""Fault injection: trials that crash, or whose losses and gradients go bad, on purpose.

The reliability tests (tests/reliability) check that the sweeper records such trials
correctly — `failed` with the error after the retries, `diverged` within one report
interval — and that they never count as an optimum. The faults are real: an exception
raised inside the training loop, a NaN or Inf in the loss tensor that backpropagates, an
overflowing gradient that reaches the optimizer. Nothing is mocked around the trial.

Switched on by one environment variable, off (and never read) otherwise::

    LAYERROPE_SWEEPER_FAULTS=/path/to/faults.json

Every trial started by `trials.run.run_trial` (so every Ray Tune trial of a sweep) reads the
file when it starts (`trials.run.make_trial`); a Ray worker sees the variable if the process
that started Ray had it. A missing file means no faults. The file holds a JSON list of faults::

    [{"point": "pre/L1/s0/lr=0.03", "step": 15, "kind": "raise"},
     {"point": "pre/L1/s0/lr=0.01", "step": 12, "kind": "nan", "log": "/tmp/fired.jsonl"}]

- `point`: the point id of the member it hits (a trial holding that point is affected);
- `step`: the 0-based index of the training step (the numbering of `diverged_step`);
- `kind`:
  - `raise`: `InjectedFault` is raised before that step (a crash in the training code;
    Ray Tune restarts the trial from its last checkpoint, up to the sweep's `retries`);
  - `oom`: `torch.cuda.OutOfMemoryError` (CUDA's own message) is raised before that step, on any
    device: an infrastructure fault (`trials.infra`), which the driver retries with a smaller stack
    and never records as the learning rate's result;
  - `hang`: the trial stops making progress for `seconds` (default 3600) before that step
    (a stuck worker; the log line carries the pid, so a test can kill the process);
  - `nan` / `inf`: the member's loss at that step is multiplied by NaN / +Inf, so the
    loss and its gradient are non-finite;
  - `spike`: the member's loss (and gradient) at that step is multiplied by `factor`
    (default 10): finite, above the `explode_factor` x initial-loss rule;
  - `explode`: the member's gradient at that step is multiplied by `factor` (default Inf,
    an overflow) just before the optimizer step. A finite factor is contained by the
    per-member gradient clipping; an overflow turns the weights into NaN, and the next
    step's loss shows it;
- `once` (optional): a path; the fault fires only if that file does not exist yet, and
  creates it (a transient fault: the retried trial gets past it);
- `log` (optional): a path; every firing appends one JSON line (kind, point, step, pid, time),
  written before the fault acts.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trials.spec import TrialSpec
from trials.train import Trial

ENV = "LAYERROPE_SWEEPER_FAULTS"
KINDS = ("raise", "oom", "hang", "nan", "inf", "spike", "explode")
LOSS_FACTORS = {"nan": math.nan, "inf": math.inf}
DEFAULT_FACTOR = {"spike": 10.0, "explode": math.inf}


class InjectedFault(RuntimeError):
    """The exception a `raise` fault throws from inside the training loop."""


@dataclass(frozen=True)
class Fault:
    point: str
    step: int
    kind: str
    factor: float | None = None
    seconds: float = 3600.0
    once: str | None = None
    log: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Fault:
        unknown = set(raw) - {"point", "step", "kind", "factor", "seconds", "once", "log"}
        if unknown:
            raise ValueError(f"{ENV}: unknown fault key(s) {sorted(unknown)}")
        if raw.get("kind") not in KINDS:
            raise ValueError(f"{ENV}: fault kind must be one of {KINDS} (got {raw.get('kind')!r})")
        factor = raw.get("factor")
        return cls(point=str(raw["point"]), step=int(raw["step"]), kind=raw["kind"],
                   factor=float(factor) if factor is not None else DEFAULT_FACTOR.get(raw["kind"]),
                   seconds=float(raw.get("seconds", 3600.0)), once=raw.get("once"), log=raw.get("log"))

    def fire(self) -> bool:
        """True if the fault fires now (a `once` fault only the first time); logs the firing."""
        if self.once:
            try:
                os.close(os.open(self.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return False
        if self.log:
            line = json.dumps({"kind": self.kind, "point": self.point, "step": self.step, "pid": os.getpid(),
                               "time": time.time()})
            with open(self.log, "a") as fh:
                fh.write(line + "\n")
        return True


def load_faults(path: str | os.PathLike[str] | None = None) -> list[Fault]:
    """The faults in the file named by `path` or by the environment variable ([] if none)."""
    path = path or os.environ.get(ENV)
    if not path or not Path(path).is_file():
        return []
    raw = json.loads(Path(path).read_text() or "[]")
    if not isinstance(raw, list):
        raise ValueError(f"{ENV}: {path} must hold a JSON list of faults")
    return [Fault.from_dict(item) for item in raw]


def faulty_trial(spec: TrialSpec) -> FaultyTrial | None:
    """A `FaultyTrial` when the fault file names one of the spec's points, else None."""
    faults = [f for f in load_faults() if f.point in spec.point_ids]
    return FaultyTrial(spec, faults) if faults else None


class FaultyTrial(Trial):
    """A `Trial` whose `train_step` injects the faults due at the current step."""

    def __init__(self, spec: TrialSpec, faults: list[Fault]) -> None:
        super().__init__(spec)
        self.faults = faults
        self._loss_factors: dict[int, float] = {}  # slot -> factor, for the step being trained

    def _slot(self, fault: Fault) -> int | None:
        """The member's position in the current stack, None if it is gone or diverged."""
        member = self.spec.point_ids.index(fault.point)
        if member not in self.slots or self.monitor.members[member].diverged:
            return None
        return self.slots.index(member)

    def train_step(self) -> None:
        due = [(f, slot) for f in self.faults if f.step == self.step and (slot := self._slot(f)) is not None]
        due = [(f, slot) for f, slot in due if f.fire()]
        for fault, _ in due:
            if fault.kind == "raise":
                raise InjectedFault(f"injected fault at step {fault.step} of {fault.point}")
            if fault.kind == "oom":
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate 2.00 GiB (injected at step {fault.step} of {fault.point}, "
                    f"a stack of {len(self.slots)})")
            if fault.kind == "hang":
                time.sleep(fault.seconds)
        self._loss_factors = {slot: LOSS_FACTORS.get(f.kind, f.factor) for f, slot in due
                              if f.kind in ("nan", "inf", "spike")}
        grad_factors = {slot: f.factor for f, slot in due if f.kind == "explode"}
        opt = self.opt
        if grad_factors:
            original_step = opt.step
            params = [p for p in self.model.parameters() if p.requires_grad]  # every one has the member dim first

            def exploding_step(*args: Any, **kwargs: Any) -> Any:
                with torch.no_grad():
                    for p in params:
                        if p.grad is not None:
                            for slot, factor in grad_factors.items():
                                p.grad[slot].mul_(factor)
                return original_step(*args, **kwargs)

            opt.step = exploding_step  # this step only (an instance attribute shadows the method)
        try:
            super().train_step()
        finally:
            self._loss_factors = {}
            opt.__dict__.pop("step", None)

    def _losses(self, inputs: torch.Tensor, targets: Any, **extra: Any) -> torch.Tensor:
        """The stack's `[K]` training losses, with this step's loss faults multiplied in (so the
        non-finite or spiked value also flows into the backward pass)."""
        losses = super()._losses(inputs, targets, **extra)
        if not self._loss_factors:
            return losses
        scale = torch.ones_like(losses)
        for slot, factor in self._loss_factors.items():
            scale[slot] = factor
        return losses * scale
