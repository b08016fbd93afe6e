"""The training budget and the learning-rate schedule (pure Python, no torch).

Budget: `train.steps`, or `train.tokens`, or `train.tokens_per_param` x the parameters of one
member (`train.budget_params`: all parameters, or those outside the embeddings), divided by the
tokens of one step (`batch_size x seq_len`) and rounded up. `budget_params: label` (a named size's
nominal count) is the sweep planner's to resolve: it gives the trial `train.tokens`.

Schedule: a multiplier of the peak LR per step (0-based, the step about to be taken):
linear warmup `(step + 1) / warmup` over the first `warmup` steps, then cosine or linear decay
from 1 at the end of warmup to `final_fraction` at the last step, or constant.

WSD / trapezoid (`cooldown` set): the decay starts `cooldown` steps before the end instead of at
the end of warmup (at step `max(warmup, steps - cooldown)`, where the factor is still 1) and
reaches `final_fraction` at the last step; between warmup and cooldown the factor is 1.
Parcae's recipe: `{warmup: 0, decay: linear, cooldown: 0.5, final_fraction: 0}`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trials.config import ScheduleConfig, TrainConfig
from trials.errors import TrialInputError


def budget_count(train: TrainConfig, counts: dict[str, int]) -> int:
    """The parameter count `tokens_per_param` multiplies (`count_params`'s `total` or `nonembed`)."""
    if train.budget_params == "label" and train.tokens_per_param is not None:
        raise TrialInputError("train.budget_params: label (a named size's nominal count) is resolved by the sweep "
                              "planner into train.tokens; a trial alone takes total or nonembed, or train.tokens")
    return counts["nonembed" if train.budget_params == "nonembed" else "total"]


def total_steps(train: TrainConfig, seq_len: int, params: int) -> int:
    """Optimizer steps of one trial. `params`: the parameters of one member counted per `train.budget_params`."""
    per_step = train.batch_size * seq_len
    if train.steps is not None:
        return train.steps
    tokens = train.tokens if train.tokens is not None else float(train.tokens_per_param or 0) * params
    return max(1, math.ceil(tokens / per_step))


def _steps_of(value: float, steps: int) -> int:
    """A schedule length: `value` < 1 is a fraction of `steps` (rounded), else a number of steps; at most `steps`."""
    if value < 1:
        return min(steps, int(round(value * steps)))
    return min(steps, int(value))


def warmup_steps(schedule: ScheduleConfig, steps: int) -> int:
    return _steps_of(schedule.warmup, steps)


@dataclass(frozen=True)
class LRSchedule:
    steps: int
    warmup: int
    decay: str
    final_fraction: float
    cooldown: int | None = None  # steps of the final decay (WSD); None: the decay spans everything after warmup

    @classmethod
    def from_config(cls, schedule: ScheduleConfig, steps: int) -> "LRSchedule":
        cooldown = None if schedule.cooldown is None else _steps_of(schedule.cooldown, steps)
        return cls(steps, warmup_steps(schedule, steps), schedule.decay, schedule.final_fraction, cooldown)

    @property
    def decay_start(self) -> int:
        """The step where the decay begins (its factor is still 1)."""
        if self.cooldown is None:
            return self.warmup
        return max(self.warmup, self.steps - self.cooldown)

    def factor(self, step: int) -> float:
        """Multiplier of the peak LR for (0-based) `step`."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.decay == "constant":
            return 1.0
        start = self.decay_start
        if step < start:
            return 1.0
        span = self.steps - 1 - start
        progress = 1.0 if span <= 0 else min(1.0, (step - start) / span)
        if self.decay == "linear":
            return 1.0 - (1.0 - self.final_fraction) * progress
        return self.final_fraction + (1.0 - self.final_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress))
