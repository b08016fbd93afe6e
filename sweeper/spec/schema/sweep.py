"""The whole sweep file (`SweepConfig`: methods × sizes × seeds), how a method's overrides merge
over the top-level sections (`deep_merge`, `merge_train`), and its JSON Schema (`json_schema`)."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from sweeper.spec.schema.fields import BUDGET_KEYS, IntOrAuto, Name, Strict
from sweeper.spec.schema.sections import (
    LRSection,
    MethodSpec,
    ModelSection,
    RaySection,
    Resources,
    TrackingSection,
    _method_entry,
)
from trials.config import DataConfig, DivergenceConfig, EvalConfig, TrainConfig


def _seeds(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise PydanticCustomError("seeds", "a seed count must be at least 1 (or give a list of seeds)")
        if value > 1000:
            raise PydanticCustomError("seeds", "at most 1000 seeds")
        return list(range(value))
    return value


class SweepConfig(Strict):
    """One sweep: methods × sizes × seeds cells, each swept over learning rates until bracketed."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="layerrope-sweeper sweep")

    name: Name
    description: str = ""
    next: str = Field("", description="printed when a launch finishes: what to run next (the quickstart points "
                                      "to the laptop depth study)")
    output: str | None = Field(None, description="sweep directory (default runs/<name>, relative to the working dir)")
    methods: Annotated[list[Annotated[MethodSpec, BeforeValidator(_method_entry)]], Field(min_length=1)]
    model: ModelSection
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], BeforeValidator(_seeds), Field(min_length=1)] = [0]
    data: DataConfig = DataConfig()
    train: TrainConfig
    lr: LRSection = LRSection()
    divergence: DivergenceConfig = DivergenceConfig()
    eval: EvalConfig = Field(EvalConfig(), description="evaluations beyond the validation loss, at each trial's end "
                                                       "(`tasks: [lambada]`: LAMBADA's last-word perplexity)")
    resources: Resources = Resources()
    stack: IntOrAuto = Field("auto", description="learning rates trained together as one stacked model")
    max_stack: Annotated[int, Field(ge=1, le=64)] = Field(8, description="upper limit for stack: auto")
    concurrency: IntOrAuto = Field("auto", description="trials at once (auto: as many as the resources allow)")
    retries: Annotated[int, Field(ge=0, le=100)] = Field(1, description="restarts of a failing trial")
    infra_retries: Annotated[int, Field(ge=0, le=100)] = Field(
        3, description="new trials for points an infrastructure fault ended (out of memory: a smaller stack or "
                       "micro-batch; storage; a lost node or actor; preemption) before they end infra_failed")
    infra_backoff: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = Field(
        10.0, description="seconds before the first infrastructure retry, doubling with each")
    ray: RaySection = RaySection()
    ledger: str = Field("sqlite", description="'sqlite' (DIR/ledger.db) or an Optuna storage URL")
    export_weights: bool = Field(False, description="write each point's final weights (for `sweeper gamma`)")
    keep_weights: Literal["best", "none"] = Field(
        "best",
        description=(
            "best: each cell keeps the final weights of its current best point in DIR/weights/ (a new best replaces "
            "them; `sweeper export` writes them out); none: keep no weights"
        ),
    )
    tracking: TrackingSection = Field(TrackingSection(), description="experiment trackers: wandb, mlflow, tensorboard")

    # -- helpers used by the planner ------------------------------------------------------------
    def method(self, name: str) -> MethodSpec:
        return next(m for m in self.methods if m.name == name)

    def lr_for(self, method: MethodSpec) -> LRSection:
        if not method.lr:
            return self.lr
        return LRSection.model_validate(deep_merge(self.lr.model_dump(), method.lr))

    def train_for(self, method: MethodSpec, size: str | None = None) -> TrainConfig:
        """The training settings of `method`'s cells (at `size`: with that size's `train` overrides too)."""
        patch = next((s.train for s in self.model.sizes or [] if s.name == size and s.train), None)
        if not method.train and not patch:
            return self.train
        merged = self.train.model_dump(exclude_none=True)
        for given in (method.train, patch):
            if given:
                merged = merge_train(merged, given)
        return TrainConfig.model_validate(merged)

    def divergence_for(self, method: MethodSpec) -> DivergenceConfig:
        if not method.divergence:
            return self.divergence
        return DivergenceConfig.model_validate(deep_merge(self.divergence.model_dump(), method.divergence))


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` over `base`, recursively for nested mappings."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def merge_train(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A method's training overrides; a budget key in the patch replaces the base's budget."""
    merged = deep_merge(base, patch)
    if any(k in patch for k in BUDGET_KEYS):
        for k in BUDGET_KEYS:
            if k not in patch:
                merged.pop(k, None)
    return merged


def json_schema() -> dict[str, Any]:
    """JSON Schema of the sweep file (for editors: yaml-language-server, VS Code)."""
    schema = SweepConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://layerrope-sweeper/sweep.schema.json"
    return schema
