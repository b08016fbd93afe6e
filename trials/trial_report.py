"""What a trial tells its caller: each member's state, the progress report of a step and the final results.

`TrialReports` is one part of `trials.train.Trial`: the loop (`trials.train`) fills the per-member records
(evaluation losses, the divergence monitor, the interval's training losses); this part turns them into a
`StepReport` every `train.report_every` steps and into one `PointResult` per learning rate at the end,
deciding each member's outcome: `diverged`, `ok`, `stalled` (finished, but its final evaluation loss is not
`divergence.stall_margin` nats below the frequency-only loss) or `failed` (stopped or never evaluated).
"""

from __future__ import annotations

import math
from pathlib import Path

from trials.data.base import TokenSource
from trials.data.unigram import UnigramEntropy
from trials.divergence import DivergenceMonitor, stall_reason
from trials.spec import MemberReport, PointResult, StepReport, TrialSpec


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


class TrialReports:
    """Reporting and result assembly of `trials.train.Trial` (the attributes below are set by its constructor)."""

    spec: TrialSpec
    source: TokenSource
    monitor: DivergenceMonitor
    unigram: UnigramEntropy | None
    unigram_loss: float | None
    step: int
    steps: int
    stopped: bool
    tokens_per_step: int
    train_seconds: float
    params: int
    params_nonembed: int
    flops_per_token: float
    eval_loss: list[float | None]
    eval_loss_se: list[float | None]
    eval_batch_losses: list[list[float] | None]
    eval_step: list[int | None]
    accuracy: list[float | None]
    loop_losses: list[dict[str, float] | None]
    lambada: list[float | None]
    last_loss: list[float | None]
    _interval_sum: list[float]
    _interval_n: list[int]

    def member_state(self, m: int) -> str:
        if self.monitor.members[m].diverged:
            return "diverged"
        if self.step < self.steps:
            return "running"
        return "stalled" if self.stall(m) is not None else "ok"

    def stall(self, m: int) -> str | None:
        """Why member `m`, finished and evaluated at the last step, is stalled (None: it is not)."""
        loss = self.eval_loss[m]
        if self.unigram_loss is None or self.step < self.steps or self.eval_step[m] != self.steps or loss is None:
            return None
        assert self.unigram is not None
        return stall_reason(loss, self.unigram_loss, self.spec.divergence.stall_margin, entropy=self.unigram.nats,
                            kind=self.unigram.kind)

    def step_report(self, *, done: bool, checkpoint: Path | None = None) -> StepReport:
        members = []
        for m, (lr, pid) in enumerate(zip(self.spec.lrs, self.spec.point_ids)):
            watch = self.monitor.members[m]
            train_loss = self._interval_sum[m] / self._interval_n[m] if self._interval_n[m] else self.last_loss[m]
            evaluated = self.eval_step[m] == self.step
            state = self.member_state(m)
            members.append(MemberReport(
                lr=lr,
                point_id=pid,
                train_loss=_finite_or_none(train_loss),
                eval_loss=_finite_or_none(self.eval_loss[m]) if evaluated else None,
                eval_loss_se=_finite_or_none(self.eval_loss_se[m]) if evaluated else None,
                state=state,  # type: ignore[arg-type]
                diverged_step=watch.diverged_step,
                reason=self.stall(m) if state == "stalled" else watch.reason,
            ))
            self._interval_sum[m], self._interval_n[m] = 0.0, 0
        return StepReport(
            step=self.step,
            tokens=self.step * self.tokens_per_step,
            train_seconds=self.train_seconds,
            members=members,
            done=done,
            checkpoint=str(checkpoint) if checkpoint is not None else None,
        )

    def results(self) -> list[PointResult]:
        out = []
        for m, (lr, pid) in enumerate(zip(self.spec.lrs, self.spec.point_ids)):
            watch = self.monitor.members[m]
            loss = _finite_or_none(self.eval_loss[m])
            if watch.diverged:
                outcome, steps, reason = "diverged", watch.diverged_step or 0, watch.reason
            elif self.step >= self.steps and loss is not None:
                reason = self.stall(m)
                outcome, steps = ("stalled" if reason is not None else "ok"), self.steps
            else:
                outcome, steps = "failed", self.step
                reason = f"stopped at step {self.step} of {self.steps}" if self.stopped else "no final evaluation"
            finished = outcome in ("ok", "stalled")  # trained to the end: the final loss and accuracy are kept
            accuracy = self.accuracy[m] if finished else None
            objective = None
            if outcome == "ok":  # a stalled run is never an optimum
                objective = loss if self.spec.train.objective == "loss" else (None if accuracy is None else 1.0 - accuracy)
            out.append(PointResult(
                point_id=pid, lr=lr, outcome=outcome,  # type: ignore[arg-type]
                loss=loss if finished else None, objective=objective, accuracy=accuracy,
                init_loss=_finite_or_none(watch.init_loss), diverged_step=watch.diverged_step, reason=reason,
                steps=steps, tokens=steps * self.tokens_per_step, train_seconds=self.train_seconds,
                corpus=self.source.fingerprint, params=self.params, params_nonembed=self.params_nonembed,
                flops_per_token=self.flops_per_token,
                loss_se=_finite_or_none(self.eval_loss_se[m]) if finished else None,
                unigram_entropy=self.unigram.nats if self.unigram is not None else None,
                unigram_counted=self.unigram.counted if self.unigram is not None else None,
                unigram_exact=self.unigram.exact if self.unigram is not None else None,
                unigram_loss=self.unigram_loss,
                loss_batches=self.eval_batch_losses[m] if finished else None,
                loop_losses=self.loop_losses[m] if finished else None,
                lambada_ppl=_finite_or_none(self.lambada[m]) if finished else None,
            ))
        return out

