"""The training budget and the learning-rate schedule (pure Python, no torch).

Budget: `train.steps`, or `train.tokens`, or `train.tokens_per_param` x the parameters of one
member (`train.budget_params`: all parameters, or those outside the embeddings), divided by the
tokens of one step (`batch_size x seq_len`) and rounded up.

Schedule: a multiplier of the peak LR per step (0-based, the step about to be taken):
linear warmup `(step + 1) / warmup` over the first `warmup` steps, then cosine or linear decay
from 1 at the end of warmup to `final_fraction` at the last step, or constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trials.config import ScheduleConfig, TrainConfig


def total_steps(train: TrainConfig, seq_len: int, params: int) -> int:
    """Optimizer steps of one trial. `params`: the parameters of one member counted per `train.budget_params`."""
    per_step = train.batch_size * seq_len
    if train.steps is not None:
        return train.steps
    tokens = train.tokens if train.tokens is not None else float(train.tokens_per_param or 0) * params
    return max(1, math.ceil(tokens / per_step))


def warmup_steps(schedule: ScheduleConfig, steps: int) -> int:
    if schedule.warmup < 1:
        return min(steps, int(round(schedule.warmup * steps)))
    return min(steps, int(schedule.warmup))


@dataclass(frozen=True)
class LRSchedule:
    steps: int
    warmup: int
    decay: str
    final_fraction: float

    @classmethod
    def from_config(cls, schedule: ScheduleConfig, steps: int) -> "LRSchedule":
        return cls(steps, warmup_steps(schedule, steps), schedule.decay, schedule.final_fraction)

    def factor(self, step: int) -> float:
        """Multiplier of the peak LR for (0-based) `step`."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.decay == "constant":
            return 1.0
        span = self.steps - 1 - self.warmup
        progress = 1.0 if span <= 0 else min(1.0, (step - self.warmup) / span)
        if self.decay == "linear":
            return 1.0 - (1.0 - self.final_fraction) * progress
        return self.final_fraction + (1.0 - self.final_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress))
