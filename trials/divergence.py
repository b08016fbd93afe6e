"""Divergence rules for the members of a trial (pure Python: no torch, no Ray).

A member is diverged, with the step and a reason recorded, as soon as one rule fires:
1. `non-finite`: its training loss is NaN or Inf.
2. `exploded`: its loss exceeds `explode_factor` x its initial loss (at any step, warmup included).
3. `above-init`: after warmup, its smoothed loss (EMA, coefficient `ema`) is above its initial
   loss + `init_loss_margin` (the loss at initialisation is ~ln(vocab)).
4. `spike`: its loss rose above `spike_factor` x its best smoothed loss so far and did not come
   back below that level within the patience (`patience_steps`): a fixed number of steps, or by
   default a share of the run's length (2%, at least 50 steps), so that long runs are as tolerant of
   a slow recovery as short ones.
Spikes that recover are counted (`spikes`), not treated as divergence.

The initial loss of a member is its first observed loss (step 0, before any update).
A diverged member is never observed again; its verdict is final.

`stall_reason` is the other way a run fails without diverging: its final evaluation loss is not
`stall_margin` nats below the loss of predicting every token by its training frequency on the same
evaluation batches (about the data's unigram entropy): it learned only token frequencies. Judged
once, on the final evaluation only: a run still at the unigram loss early in training is normal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trials.config import DivergenceConfig, ScaledPatience


@dataclass
class MemberWatch:
    init_loss: float | None = None
    ema: float | None = None
    best_ema: float = math.inf
    spike_since: int | None = None  # step the current unrecovered spike began
    spikes: int = 0
    diverged_step: int | None = None
    reason: str | None = None

    @property
    def diverged(self) -> bool:
        return self.diverged_step is not None


def patience_steps(setting: int | ScaledPatience, total_steps: int | None) -> int:
    """Steps a spike may last: `setting` itself when it is a step count, else its fraction of the
    run's `total_steps`, rounded, clipped to [min, max]."""
    if isinstance(setting, int):
        return setting
    if total_steps is None:
        raise ValueError("spike_patience is a share of the run: the run's total steps are needed")
    steps = max(setting.min, round(setting.fraction * total_steps))
    return steps if setting.max is None else min(steps, setting.max)


class DivergenceMonitor:
    def __init__(self, cfg: DivergenceConfig, n_members: int, warmup_steps: int, total_steps: int | None = None) -> None:
        """`total_steps`: the run's length, needed when `cfg.spike_patience` is a share of it."""
        self.cfg = cfg
        self.warmup_steps = warmup_steps
        self.patience = patience_steps(cfg.spike_patience, total_steps)
        self.members = [MemberWatch() for _ in range(n_members)]

    @property
    def diverged(self) -> list[bool]:
        return [m.diverged for m in self.members]

    def observe(self, step: int, losses: Mapping[int, float]) -> list[int]:
        """Record the training losses of `step` (member index -> loss); return the members that diverged now."""
        newly = []
        for i, loss in losses.items():
            m = self.members[i]
            if m.diverged:
                continue
            reason = self._check(m, step, float(loss))
            if reason is not None:
                m.diverged_step, m.reason = step, reason
                newly.append(i)
        return newly

    def force(self, member: int, step: int, reason: str) -> None:
        """Mark a member diverged for a reason found outside the training loss (e.g. a NaN evaluation loss)."""
        m = self.members[member]
        if not m.diverged:
            m.diverged_step, m.reason = step, reason

    def _check(self, m: MemberWatch, step: int, loss: float) -> str | None:
        cfg = self.cfg
        if not math.isfinite(loss):
            return f"non-finite: training loss is {loss} at step {step}"
        if m.init_loss is None:
            m.init_loss = loss
        if cfg.explode_factor is not None and loss > cfg.explode_factor * m.init_loss:
            return (
                f"exploded: training loss {loss:.4g} > {cfg.explode_factor:g} x initial loss {m.init_loss:.4g} "
                f"at step {step}"
            )
        m.ema = loss if m.ema is None else cfg.ema * m.ema + (1.0 - cfg.ema) * loss
        m.best_ema = min(m.best_ema, m.ema)
        if step >= self.warmup_steps and m.ema > m.init_loss + cfg.init_loss_margin:
            return (
                f"above-init: smoothed training loss {m.ema:.4g} > initial loss {m.init_loss:.4g}"
                + (f" + {cfg.init_loss_margin:g}" if cfg.init_loss_margin else "")
                + f" after warmup, at step {step}"
            )
        threshold = cfg.spike_factor * m.best_ema
        if loss > threshold:
            if m.spike_since is None:
                m.spike_since = step
                m.spikes += 1
            elif step - m.spike_since >= self.patience:
                return (
                    f"spike: training loss {loss:.4g} still > {cfg.spike_factor:g} x best smoothed loss "
                    f"{m.best_ema:.4g} at step {step}, {step - m.spike_since} steps after the spike began "
                    f"(patience {self.patience} steps)"
                )
        else:
            m.spike_since = None
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"warmup_steps": self.warmup_steps, "members": [_json_safe(asdict(m)) for m in self.members]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.warmup_steps = int(state["warmup_steps"])
        self.members = [MemberWatch(**_from_json(m)) for m in state["members"]]


_FREQUENCY_ONLY = {  # kind -> (the frequency-only loss, what the eval set is made of, what such a run learned)
    "tokens": ("unigram loss", "eval batches", "token frequencies"),
    "classes": ("chance loss", "eval images", "class frequencies"),
}


def stall_reason(final_loss: float, frequency_loss: float, margin: float | None, *, entropy: float | None = None,
                 kind: str = "tokens") -> str | None:
    """Why a finished run is stalled, or None when it is not: its final evaluation loss is above
    `frequency_loss - margin`, where `frequency_loss` is the loss of predicting by training
    frequencies alone on the same evaluation data (`margin` None: never stalled). `entropy`, the
    data's unigram (or class-frequency) entropy, is named in the reason for reference."""
    if margin is None or not math.isfinite(final_loss) or final_loss <= frequency_loss - margin:
        return None
    baseline, evaluated_on, learned = _FREQUENCY_ONLY[kind]
    where = "above" if final_loss > frequency_loss + margin else f"within {margin:g} nats of"
    data = "" if entropy is None else f" (the data's {'unigram' if kind == 'tokens' else 'class-frequency'} entropy: {entropy:.4f})"
    return (f"stalled: final eval loss {final_loss:.4f} is {where} the {baseline} {frequency_loss:.4f} "
            f"on the same {evaluated_on}{data}: learned nothing beyond {learned}")


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in d.items()}


def _from_json(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (math.inf if v == "inf" else v) for k, v in d.items()}
