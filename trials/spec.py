"""What a trial is asked to do and what it reports (plain dataclasses, JSON-safe, no torch).

- `TrialSpec`: one sweep cell (model, recipe, data, divergence rules, evaluations, seed) and the K
  learning rates to train side by side, with the caller's opaque `point_ids`.
- `StepReport`: progress every `train.report_every` steps, at every evaluation, at every
  checkpoint and at the end; `members` holds one `MemberReport` per learning rate; the last
  report of a run also carries every member's `PointResult` in `results`. `metrics()` is the
  plain dict Ray Tune carries, `from_metrics` reads it back.
- `PointResult`: the outcome of one learning rate when the trial ends.

A member that finished without diverging is `stalled`, not `ok`, when its final evaluation loss
is not `divergence.stall_margin` below the loss of predicting by training frequencies on the same
eval batches, about the data's unigram entropy (`trials.divergence.stall_reason`).
Every evaluation carries the standard error of its mean over the eval batches (`trials.noise`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from models.config import ModelConfig
from trials.config import DataConfig, DivergenceConfig, EvalConfig, TrainConfig

MemberState = Literal["running", "ok", "diverged", "stalled"]
Outcome = Literal["ok", "diverged", "stalled", "failed"]

# Settings that change neither the numbers a trial computes nor its order of work: a checkpoint
# written under one value resumes under another.
_RESUME_NEUTRAL = ("report_every", "checkpoint_every", "threads", "device", "sync_every", "cuda_graphs", "deterministic")


def default_point_id(lr: float) -> str:
    return f"lr={lr:.6g}"


@dataclass(frozen=True)
class TrialSpec:
    model: ModelConfig
    train: TrainConfig
    data: DataConfig = field(default_factory=DataConfig)
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)
    lrs: list[float] = field(default_factory=lambda: [1e-3])
    seed: int = 0
    point_ids: list[str] = field(default_factory=list)  # empty: one "lr=<lr>" per learning rate
    eval: EvalConfig = field(default_factory=EvalConfig)  # evaluations beyond the loss at the end (LAMBADA)

    def __post_init__(self) -> None:
        if not self.lrs:
            raise ValueError("lrs: give at least one learning rate")
        bad = [lr for lr in self.lrs if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0)]
        if bad:
            raise ValueError(f"lrs: every learning rate must be a finite number > 0 (got {bad[0]!r})")
        if not self.point_ids:
            object.__setattr__(self, "point_ids", [default_point_id(lr) for lr in self.lrs])
        if len(self.point_ids) != len(self.lrs):
            raise ValueError(f"point_ids: {len(self.point_ids)} ids for {len(self.lrs)} learning rates")
        object.__setattr__(self, "lrs", [float(lr) for lr in self.lrs])

    @property
    def stack(self) -> int:
        return len(self.lrs)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "model": self.model.to_dict(),
            "train": self.train.model_dump(mode="json"),
            "data": self.data.model_dump(mode="json"),
            "divergence": self.divergence.model_dump(mode="json"),
            "lrs": list(self.lrs),
            "seed": self.seed,
            "point_ids": list(self.point_ids),
        }
        if self.eval.tasks:  # without tasks, the dict (and the resume key) it had before `eval` existed
            out["eval"] = self.eval.model_dump(mode="json")
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrialSpec":
        return cls(
            model=ModelConfig.from_dict(d["model"]),
            train=TrainConfig.model_validate(d["train"]),
            data=DataConfig.model_validate(d.get("data", {})),
            divergence=DivergenceConfig.model_validate(d.get("divergence", {})),
            lrs=list(d["lrs"]),
            seed=int(d.get("seed", 0)),
            point_ids=list(d.get("point_ids", [])),
            eval=EvalConfig.model_validate(d.get("eval", {})),
        )

    def resume_key(self) -> str:
        """Equal for two specs whose trials compute the same numbers (a checkpoint of one resumes the other)."""
        d = self.to_dict()
        for name in _RESUME_NEUTRAL:
            d["train"].pop(name, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class MemberReport:
    """One learning rate of a step report."""

    lr: float
    point_id: str
    train_loss: float | None  # mean training loss since the last report; None if not finite
    eval_loss: float | None  # the evaluation loss, on a report at an evaluation step only
    state: MemberState
    diverged_step: int | None = None
    reason: str | None = None  # why it diverged or stalled
    eval_loss_se: float | None = None  # standard error of `eval_loss` over the eval batches

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemberReport":
        return cls(lr=float(d["lr"]), point_id=str(d["point_id"]), train_loss=d.get("train_loss"),
                   eval_loss=d.get("eval_loss"), state=d.get("state", "running"),
                   diverged_step=d.get("diverged_step"), reason=d.get("reason"),
                   eval_loss_se=d.get("eval_loss_se"))


@dataclass
class StepReport:
    step: int  # optimizer steps done
    tokens: int  # training tokens seen by each member so far
    train_seconds: float
    members: list[MemberReport]
    done: bool
    checkpoint: str | None = None  # the checkpoint folder written at this step, if any (not a metric)
    results: list[PointResult] | None = None  # the last report only: one per member
    fault: dict[str, str] | None = None  # an infrastructure fault ended the trial (`trials.infra.InfraFault.to_dict`)

    def metrics(self) -> dict[str, Any]:
        """The flat dict reported to Ray Tune (with `results` on the last report of a trial)."""
        out = {"step": self.step, "tokens": self.tokens, "train_seconds": self.train_seconds,
               "done": self.done, "members": [m.to_dict() for m in self.members]}
        if self.results is not None:
            out["results"] = [r.to_dict() for r in self.results]
        if self.fault is not None:
            out["fault"] = dict(self.fault)
        return out

    @classmethod
    def from_metrics(cls, d: dict[str, Any]) -> "StepReport":
        """A report read back from the dict Ray Tune carried (`metrics()`)."""
        results = d.get("results")
        return cls(
            step=int(d.get("step") or 0), tokens=int(d.get("tokens") or 0),
            train_seconds=float(d.get("train_seconds") or 0.0),
            members=[MemberReport.from_dict(m) for m in d.get("members") or [] if isinstance(m, dict)],
            done=bool(d.get("done")),
            results=[PointResult.from_dict(r) for r in results if isinstance(r, dict)] if results is not None else None,
            fault=dict(d["fault"]) if isinstance(d.get("fault"), dict) else None,
        )


@dataclass
class PointResult:
    point_id: str
    lr: float
    outcome: Outcome
    loss: float | None  # final evaluation loss; None unless ok or stalled
    objective: float | None  # what bracketing minimises (loss, or 1 - accuracy); None unless ok
    accuracy: float | None  # top-1 (the ViT; LMs with objective `error`); None unless ok or stalled
    init_loss: float | None
    diverged_step: int | None
    reason: str | None
    steps: int
    tokens: int
    train_seconds: float
    corpus: str  # the data fingerprint
    params: int
    params_nonembed: int
    flops_per_token: float
    loss_se: float | None = None  # standard error of `loss` over the eval batches (None: one batch, or no loss)
    unigram_entropy: float | None = None  # the data's unigram (images: class-frequency) entropy, nats
    unigram_counted: int | None = None  # training tokens (labels) it was computed from
    unigram_exact: bool | None = None  # every training token counted (False: estimated from the first `counted`)
    unigram_loss: float | None = None  # predicting by training frequencies on the same eval batches: the stall baseline
    loss_batches: list[float] | None = None  # the final evaluation's mean loss per eval batch (the same batches for
    #                                          every LR, seed and size of a sweep: differences can be compared paired)
    loop_losses: dict[str, float] | None = None  # looped family with several eval_loops: the final evaluation's loss
    #                                              at each loop count ({"1": .., "8": ..}; `loss` is the largest's)
    lambada_ppl: float | None = None  # LAMBADA last-word perplexity at the end (eval.tasks: [lambada]), ok or stalled

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PointResult":
        return cls(**d)
