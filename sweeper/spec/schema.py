"""The sweep file: its pydantic schema, loading, and errors a researcher can act on.

A sweep is one YAML file (see the README's YAML reference): methods × sizes × seeds
make the *cells*; each cell's learning rate is swept until its optimum is bracketed.
The data, training and divergence sections are the trial stream's own pydantic models
(`trials.config`), embedded as they are, so that the trial and the sweep agree by
construction. Nothing here imports torch or Ray: `sweeper validate` answers in well
under a second.

`load_sweep(path)` returns a `SweepConfig` or raises `UserError` with one line per
problem (every problem at once), each naming the file line, the field path, the value
and what is allowed.
"""

from __future__ import annotations

import copy
import glob
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from models.config import ModelConfig
from models.family_settings import loop_settings, looped_depth, vit_settings
from models.registry import get_scheme, make_scheme
from sweeper.core.errors import UserError
from sweeper.core.grid import LRPolicy
from sweeper.spec import catalog
from sweeper.spec import overrides as overrides_
from sweeper.spec.overrides import dotted
from sweeper.spec.yamlio import LoadedYaml, YamlProblem, load_file
from trials.config import DataConfig, DivergenceConfig, TrainConfig

BUDGET_KEYS = ("steps", "tokens", "tokens_per_param")
MAX_DEPTH = 10_000
MAX_WIDTH = 65_536
MAX_SEQ = 1_048_576
MAX_VOCAB = 4_194_304
BYTE_VOCAB = 256

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Name = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+\-]*$",
        max_length=64,
        description="letters, digits and . _ + - (used in directory names and cell ids)",
    ),
]


def _positive_int_or_auto(value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PydanticCustomError("int_or_auto", "expected a positive integer or 'auto'")
    return value


IntOrAuto = Annotated[
    Union[int, Literal["auto"]],
    PlainValidator(_positive_int_or_auto),
    PlainSerializer(lambda v: v),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]}),
]


def _refine_mode(value: Any) -> bool | str:
    if isinstance(value, bool) or value == "vertex":
        return value
    raise PydanticCustomError("refine_mode", "expected true, false or 'vertex'")


RefineMode = Annotated[
    Union[bool, Literal["vertex"]],
    PlainValidator(_refine_mode),
    PlainSerializer(lambda v: v),
    WithJsonSchema({"anyOf": [{"type": "boolean"}, {"const": "vertex"}]}),
]


def _literal(text: str) -> str:
    """A finished message for PydanticCustomError (which substitutes only keys of a context we never give)."""
    return text


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LRSection(Strict):
    """How each cell's learning rates are chosen (log-spaced grid, bracketed)."""

    bounds: tuple[PositiveFloat, PositiveFloat] = Field(
        (1e-6, 1.0), description="[lowest, highest] learning rate the sweep may try"
    )
    center: PositiveFloat = Field(3e-3, description="centre of the initial grid (ignored when `grid` is given)")
    points: Annotated[int, Field(ge=1, le=64)] = Field(5, description="size of the initial grid around `center`")
    factor: Annotated[float, Field(ge=1.01, le=100, allow_inf_nan=False)] = Field(
        2.0, description="ratio between neighbouring grid points"
    )
    span: Annotated[float, Field(gt=1, le=1e6, allow_inf_nan=False)] | None = Field(
        None, description="ratio of the initial grid's highest to lowest LR (sets `points` from `factor`)"
    )
    grid: list[PositiveFloat] | None = Field(None, description="an explicit initial grid instead of center/points")
    refine: RefineMode = Field(
        True,
        description=(
            "after bracketing: true tries the two half steps around the best point; vertex tries one, toward the "
            "vertex of the parabola through the best point and its neighbours, and only when that vertex lies at "
            "least `vertex_offset` half steps away (both half steps when there is no parabola: a diverged "
            "neighbour); false refines nothing"
        ),
    )
    vertex_offset: Annotated[float, Field(ge=0, lt=2, allow_inf_nan=False)] = Field(
        0.5,
        description=(
            "how far, in half steps, the parabola's vertex must lie from the best point for `refine: vertex` and "
            "`vertex_first` to try the half step toward it (0.5: the vertex is nearer that half step than the best)"
        ),
    )
    refine_min_gain: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = Field(
        0.0,
        description=(
            "skip refinement when the parabola promises an objective less than this fraction below the best "
            "point's (e.g. 0.001 = 0.1%; set it near the seed-to-seed noise); 0 never skips"
        ),
    )
    vertex_first: bool = Field(
        False,
        description=(
            "when the best point is at the open end of the grid but the parabola through it and its two inner "
            "neighbours puts the optimum inside (`vertex_offset` half steps or more), try that inner half step "
            "before extending; if it becomes the best it is bracketed already"
        ),
    )
    failed_neighbour: Literal["skip", "half_step"] = Field(
        "skip",
        description=(
            "when the next grid step beyond the best point failed (a crash: no information): skip walks past it "
            "to the step after; half_step first tries the half step between the best point and it"
        ),
    )
    extend_by: Annotated[int, Field(ge=1, le=8)] = Field(1, description="points added per extension step")
    max_points: Annotated[int, Field(ge=1, le=1000)] = Field(12, description="trial cap per cell")
    prior: Literal["fixed", "extrapolate"] = Field(
        "fixed",
        description=(
            "extrapolate: a size with at least two smaller sizes waits for them (or for three of them), then "
            "starts on a grid centred on their LR power law, spanning the 95% prediction interval of its optimum "
            "(the law's uncertainty plus the scatter of optima about it; at least 3 and at most `points` points)"
        ),
    )
    fixed: PositiveFloat | None = Field(
        None,
        description=(
            "a fixed recipe: train this one learning rate, no search (one point per cell; the cell ends `fixed`, not "
            "`bracketed`; fits compare such cells at equal recipe and claim no optimum). The other keys are unused"
        ),
    )

    @property
    def initial_points(self) -> int:
        if self.span is None:
            return self.points
        return 1 + max(0, round(math.log(self.span) / math.log(self.factor)))

    def to_policy(self) -> LRPolicy:
        return LRPolicy(
            lo=self.bounds[0], hi=self.bounds[1], fixed=self.fixed, center=self.center, points=self.initial_points, factor=self.factor,
            grid=tuple(self.grid) if self.grid is not None else None, refine=self.refine,
            extend_by=self.extend_by, max_points=1 if self.fixed is not None else self.max_points, vertex_offset=self.vertex_offset,
            refine_min_gain=self.refine_min_gain, vertex_first=self.vertex_first,
            failed_neighbour=self.failed_neighbour,
        )

    @field_validator("bounds")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        if value[0] >= value[1]:
            raise PydanticCustomError("inverted_bounds", "lower bound must be below the upper bound")
        return value

    @field_validator("center")
    @classmethod
    def _center_inside(cls, value: float, info: ValidationInfo) -> float:
        bounds = info.data.get("bounds")
        if bounds and not bounds[0] <= value <= bounds[1]:
            raise PydanticCustomError("outside_bounds", f"must lie within lr.bounds [{bounds[0]:g}, {bounds[1]:g}]")
        return value

    @field_validator("fixed")
    @classmethod
    def _fixed_inside(cls, value: float | None, info: ValidationInfo) -> float | None:
        bounds = info.data.get("bounds")
        if value is not None and bounds and not bounds[0] <= value <= bounds[1]:
            raise PydanticCustomError("outside_bounds", f"must lie within lr.bounds [{bounds[0]:g}, {bounds[1]:g}]")
        return value

    @model_validator(mode="after")
    def _fixed_alone(self) -> "LRSection":
        if self.fixed is not None and self.grid is not None:
            raise PydanticCustomError("fixed_and_grid", "give lr.fixed (one learning rate, no search) or lr.grid, not both")
        if self.fixed is not None and self.prior == "extrapolate":
            raise PydanticCustomError("fixed_and_prior", "lr.prior: extrapolate searches from smaller sizes; a fixed "
                                                         "recipe (lr.fixed) searches nothing: leave prior out")
        return self

    @field_validator("grid")
    @classmethod
    def _grid_inside(cls, value: list[float] | None, info: ValidationInfo) -> list[float] | None:
        if value is None:
            return None
        if not value:
            raise PydanticCustomError("empty_grid", "an explicit grid needs at least one learning rate")
        bounds = info.data.get("bounds")
        if bounds:
            outside = [v for v in value if not bounds[0] <= v <= bounds[1]]
            if outside:
                listed = ", ".join(f"{v:g}" for v in outside)
                raise PydanticCustomError("outside_bounds", f"{listed} outside lr.bounds [{bounds[0]:g}, {bounds[1]:g}]")
        logs = sorted(math.log(v) for v in value)
        if any(b - a < 1e-9 for a, b in zip(logs, logs[1:])):
            raise PydanticCustomError("duplicate_lr", "learning rates in a grid must be distinct")
        return sorted(value)

    @model_validator(mode="after")
    def _cap(self) -> "LRSection":
        initial = len(self.grid) if self.grid is not None else self.initial_points
        if initial > self.max_points:
            raise PydanticCustomError("cap", f"the initial grid has {initial} points but max_points is {self.max_points}")
        return self


def _method_entry(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class MethodSpec(Strict):
    """One method of the sweep: a normalization scheme, optionally with its own settings."""

    name: Name
    scheme: str | None = Field(None, description="the scheme this method uses (default: its name)")
    scheme_options: dict[str, Any] = Field(default_factory=dict, description="passed to the scheme")
    lr: dict[str, Any] | None = Field(None, description="overrides of the top-level `lr` section")
    train: dict[str, Any] | None = Field(None, description="overrides of the top-level `train` section")
    divergence: dict[str, Any] | None = Field(None, description="overrides of the top-level `divergence` section")

    @model_validator(mode="after")
    def _known_scheme(self) -> "MethodSpec":
        scheme = self.scheme or self.name
        known = catalog.scheme_names()
        if scheme not in known:
            hint = catalog.suggest(scheme, known)
            raise PydanticCustomError(
                "unknown_method", _literal(f"unknown method {scheme!r}{hint} (known: {', '.join(known)})")
            )
        return self

    @property
    def scheme_name(self) -> str:
        return self.scheme or self.name


def _size_entry(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class SizeSpec(Strict):
    """A named model size (`58M`, `130M`, `350M`, `1.3B`) or an explicit shape with a name."""

    name: Name
    width: Annotated[int, Field(ge=1, le=MAX_WIDTH)] | None = None
    depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)] | None = None
    heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    mlp_hidden: Annotated[int, Field(ge=1, le=16 * MAX_WIDTH)] | None = None

    @model_validator(mode="after")
    def _resolvable(self) -> "SizeSpec":
        if self.name in catalog.named_sizes():
            return self
        missing = [k for k in ("width", "depth", "heads") if getattr(self, k) is None]
        if missing:
            hint = catalog.suggest(self.name, list(catalog.named_sizes()))
            raise PydanticCustomError(
                "unknown_size",
                _literal(
                    f"unknown named size {self.name!r}{hint} (known: {', '.join(catalog.named_sizes())}); "
                    "a custom size gives width, depth and heads"
                ),
            )
        return self

    def shape(self) -> catalog.NamedShape:
        base = catalog.named_sizes().get(self.name)
        width = self.width or (base.width if base else 0)
        return catalog.NamedShape(
            width=width,
            depth=self.depth or (base.depth if base else 0),
            heads=self.heads or (base.heads if base else 0),
            mlp_hidden=self.mlp_hidden or (base.mlp_hidden if base and width == base.width else 0),
            family=base.family if base else "",  # "": a custom shape, of the sweep's family
            extra=base.extra if base else (),
        )


class ModelSection(Strict):
    """The network: family and shape; `depths` (a depth sweep) or `sizes` (a width ladder)."""

    family: Literal["llama", "looped", "vit"] = "llama"
    width: Annotated[int, Field(ge=1, le=MAX_WIDTH)] = 128
    heads: Annotated[int, Field(ge=1, le=1024)] = 4
    depths: list[Annotated[int, Field(ge=1, le=MAX_DEPTH)]] | None = Field(
        None, description="numbers of blocks; one cell per depth (size label L<depth>)"
    )
    loops: list[Annotated[int, Field(ge=1, le=1024)]] | None = Field(
        None,
        description=(
            "looped family: mean training loop counts, one cell per count (size label T<count>; also the "
            "evaluation loop count); the shape is width/heads and extra.prelude/core/coda"
        ),
    )
    sizes: list[Annotated[SizeSpec, BeforeValidator(_size_entry)]] | None = Field(
        None, description="named sizes or {name, width, depth, heads[, mlp_hidden]}; one cell per size"
    )
    vocab: IntOrAuto = Field("auto", description="auto: 256 for byte-level data, else the tokenizer's")
    seq_len: Annotated[int, Field(ge=1, le=MAX_SEQ)] = 256
    mlp_hidden: Annotated[int, Field(ge=1, le=16 * MAX_WIDTH)] | None = Field(
        None, description="SwiGLU hidden size (default 8/3·width rounded up to 32)"
    )
    init_std: PositiveFloat = 0.02
    norm_eps: PositiveFloat = 1e-6
    rope_base: PositiveFloat = 10000.0
    scheme_options: dict[str, Any] = Field(default_factory=dict, description="passed to every scheme")
    extra: dict[str, Any] = Field(default_factory=dict, description="family settings (looped: loops; vit: image)")

    @field_validator("depths")
    @classmethod
    def _distinct_depths(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise PydanticCustomError("empty", "give at least one depth")
            if len(set(value)) != len(value):
                raise PydanticCustomError("duplicate", "depths must be distinct")
        return value

    @field_validator("loops")
    @classmethod
    def _distinct_loops(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if not value:
                raise PydanticCustomError("empty", "give at least one loop count")
            if len(set(value)) != len(value):
                raise PydanticCustomError("duplicate", "loop counts must be distinct")
        return value

    @field_validator("sizes")
    @classmethod
    def _distinct_sizes(cls, value: list[SizeSpec] | None) -> list[SizeSpec] | None:
        if value is not None:
            if not value:
                raise PydanticCustomError("empty", "give at least one size")
            names = [s.name for s in value]
            if len(set(names)) != len(names):
                raise PydanticCustomError("duplicate", "size names must be distinct")
        return value

    @model_validator(mode="after")
    def _one_axis(self) -> "ModelSection":
        given = [axis for axis in ("depths", "sizes", "loops") if getattr(self, axis) is not None]
        if self.loops is not None and self.family != "looped":
            raise PydanticCustomError("axis", "model.loops (a loop-count sweep) needs family: looped")
        if len(given) != 1:
            raise PydanticCustomError(
                "axis", "give exactly one of model.depths (a depth sweep) or model.sizes (a width ladder)"
                + (" or model.loops (a loop-count sweep)" if self.family == "looped" else "")
            )
        return self


class ResourceRule(Strict):
    """Resources for the cells matching `max_depth` (depth ≤ it) or `sizes`; the first match wins."""

    max_depth: Annotated[int, Field(ge=1)] | None = None
    sizes: list[str] | None = None
    cpu: NonNegFloat | None = None
    gpu: NonNegFloat | None = None
    memory_gb: PositiveFloat | None = None
    custom: dict[str, NonNegFloat] | None = None

    @model_validator(mode="after")
    def _selector(self) -> "ResourceRule":
        if (self.max_depth is None) == (self.sizes is None):
            raise PydanticCustomError("selector", "give exactly one of max_depth or sizes")
        return self


class Resources(Strict):
    """What one trial (one stack of learning rates) asks Ray for."""

    cpu: NonNegFloat = Field(1.0, description="CPUs per trial (also the trial's torch threads)")
    gpu: NonNegFloat = Field(0.0, description="GPUs per trial; a fraction packs trials on one GPU")
    memory_gb: PositiveFloat | None = Field(None, description="memory per trial (Ray scheduling and stack: auto)")
    gpu_memory_gb: PositiveFloat | None = Field(
        None, description="memory of one GPU, for stack: auto (default: measured by sweeper bench here, else this "
                          "machine's GPU, else 80)")
    custom: dict[str, NonNegFloat] = Field(default_factory=dict, description="custom Ray resources, e.g. a node tag")
    by_size: list[ResourceRule] = Field(default_factory=list, description="overrides by depth or size")

    @field_validator("gpu")
    @classmethod
    def _whole_or_fraction(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise PydanticCustomError("gpu", "a GPU count above 1 must be whole (fractions pack trials on one GPU)")
        return value


class RaySection(Strict):
    """Where trials run."""

    address: str | None = Field(None, description="an existing cluster ('auto', 'HOST:PORT', 'ray://HOST:PORT')")
    num_cpus: Annotated[int, Field(ge=1)] | None = Field(None, description="CPUs of a local Ray (default: all)")
    num_gpus: NonNegFloat | None = Field(None, description="GPUs of a local Ray (default: detected)")
    storage: str | None = Field(
        None, description="Ray Tune storage for trial checkpoints (default DIR/ray; a shared path or URI on clusters)"
    )


class WandbTracking(Strict):
    """Weights & Biases: one run per point, grouped by cell."""

    project: Annotated[str, Field(min_length=1, max_length=128)] = Field(description="the W&B project")
    entity: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        None, description="the W&B team or user (default: the logged-in user's)")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="online, offline (files under DIR/wandb, `wandb sync` later) or disabled; default: "
                          "WANDB_MODE, else online")


class MlflowTracking(Strict):
    """MLflow: one run per point, under a parent run per cell."""

    tracking_uri: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="an MLflow tracking URI (http://..., sqlite:///..., file:///...); default: "
                          "MLFLOW_TRACKING_URI, else sqlite:///DIR/mlflow.db")
    experiment: Annotated[str, Field(min_length=1, max_length=500)] | None = Field(
        None, description="the experiment (default: the sweep's name)")


class TensorboardTracking(Strict):
    """TensorBoard: event files, a folder per cell and a sub-folder per point."""

    dir: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="the log directory (default DIR/tensorboard; relative to the working dir)")


class TrackingSection(Strict):
    """Experiment trackers the driver logs every point to (each optional; needs its extra)."""

    wandb: WandbTracking | None = None
    mlflow: MlflowTracking | None = None
    tensorboard: TensorboardTracking | None = None

    def names(self) -> list[str]:
        return [name for name in ("wandb", "mlflow", "tensorboard") if getattr(self, name) is not None]


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
    resources: Resources = Resources()
    stack: IntOrAuto = Field("auto", description="learning rates trained together as one stacked model")
    max_stack: Annotated[int, Field(ge=1, le=64)] = Field(8, description="upper limit for stack: auto")
    concurrency: IntOrAuto = Field("auto", description="trials at once (auto: as many as the resources allow)")
    retries: Annotated[int, Field(ge=0, le=100)] = Field(1, description="restarts of a failing trial")
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

    def train_for(self, method: MethodSpec) -> TrainConfig:
        if not method.train:
            return self.train
        return TrainConfig.model_validate(merge_train(self.train.model_dump(exclude_none=True), method.train))

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


# ----------------------------------------------------------------------------------------------
# Error messages


@dataclass
class Problem:
    path: tuple[str | int, ...]
    message: str

    def dotted(self) -> str:
        return dotted(self.path)


@dataclass
class MissingFile(Problem):
    """A data file the sweep names that is not on this machine: fatal where trials read it (validate,
    launch), a warning for commands that never read the data (--dry-run, replay, simulation)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(tp: Any) -> Any:
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin is Union or (origin is not None and str(origin) == "types.UnionType") or type(tp).__name__ == "UnionType":
            args = [a for a in get_args(tp) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            tp = models[0] if models else args[0]
        else:
            return tp


def _model_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the value at `loc` (for listing allowed keys)."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            if get_origin(current) in (list, tuple):
                current = get_args(current)[0]
            else:
                return None
        elif isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = current.model_fields[part].annotation
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


_FRIENDLY = {
    "missing": "required",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected text",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "dict_type": "expected a mapping of keys",
    "model_type": "expected a mapping of keys",
    "model_attributes_type": "expected a mapping of keys",
    "finite_number": "NaN and infinity are not allowed",
}


def _message(err: dict[str, Any], root: type[BaseModel]) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        allowed = sorted(model.model_fields) if model else []
        key = str(loc[-1])
        hint = catalog.suggest(key, allowed) if allowed else ""
        listing = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"unknown key {key!r}{hint}{listing}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": "≥", "less_than": "<", "less_than_equal": "≤"}[kind]
        bound = next(iter(ctx.values())) if ctx else "?"
        return f"must be {op} {bound:g}" if isinstance(bound, (int, float)) else f"must be {op} {bound}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected', '?')}"
    if kind == "string_pattern_mismatch":
        return "allowed characters: letters, digits and . _ + - (starting with a letter or digit)"
    if kind == "string_too_long":
        return f"at most {ctx.get('max_length')} characters"
    if kind in ("too_short", "too_long"):
        count = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        return f"expected {'at least' if kind == 'too_short' else 'at most'} {count} entr{'y' if count == 1 else 'ies'}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return _FRIENDLY.get(kind, err["msg"][0].lower() + err["msg"][1:] if err["msg"] else kind)


def problems_from(exc: ValidationError, root: type[BaseModel], prefix: tuple[str | int, ...] = ()) -> list[Problem]:
    out = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        message = _message(err, root)
        if err["type"] not in ("missing", "extra_forbidden") and "input" in err and not isinstance(err["input"], dict):
            message += f" (got {_show(err['input'])})"
        out.append(Problem((*prefix, *loc), message))
    return out


def _nonfinite(value: Any, path: tuple[str | int, ...], out: list[Problem]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        out.append(Problem(path, f"{value} is not allowed; give a finite number"))
    elif isinstance(value, dict):
        for k, v in value.items():
            _nonfinite(v, (*path, str(k)), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _nonfinite(v, (*path, i), out)


def _bools_for_numbers(raw: Any) -> list[Problem]:
    """YAML's true/false where the schema wants a number: pydantic's lax mode reads `true` as 1
    (`steps: true` trained one step, `batch_size: yes` used one sequence). Walks the raw document
    along the sweep's JSON schema, so every numeric field of every embedded section is covered."""
    schema = json_schema()
    defs = schema.get("$defs", {})

    def branches(node: dict[str, Any]) -> list[dict[str, Any]]:
        while "$ref" in node:
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        out = [node]
        for key in ("anyOf", "oneOf", "allOf"):
            out += [b for sub in node.get(key, []) for b in branches(sub)]
        return out

    def types(node: dict[str, Any]) -> set[str]:
        found: set[str] = set()
        for b in branches(node):
            t = b.get("type")
            found |= set(t) if isinstance(t, list) else ({t} if t else set())
            if "const" in b or "enum" in b:
                found |= {"boolean" if isinstance(v, bool) else "other" for v in b.get("enum", [b.get("const")])}
        return found

    problems: list[Problem] = []

    def walk(value: Any, node: dict[str, Any], path: tuple[str | int, ...]) -> None:
        if isinstance(value, bool):
            allowed = types(node)
            if allowed & {"integer", "number"} and "boolean" not in allowed:
                problems.append(Problem(path, f"expected a number (got {str(value).lower()})"))
            return
        for b in branches(node):
            if isinstance(value, dict) and (b.get("properties") or isinstance(b.get("additionalProperties"), dict)):
                for key, item in value.items():
                    child = b.get("properties", {}).get(key, b.get("additionalProperties"))
                    if isinstance(child, dict):
                        walk(item, child, (*path, str(key)))
            elif isinstance(value, list) and isinstance(b.get("items"), dict):
                for i, item in enumerate(value):
                    walk(item, b["items"], (*path, i))
            elif isinstance(value, list) and isinstance(b.get("prefixItems"), list):
                for i, (item, child) in enumerate(zip(value, b["prefixItems"])):
                    walk(item, child, (*path, i))

    walk(raw, schema, ())
    unique: dict[tuple[str | int, ...], Problem] = {}
    for problem in problems:  # one line per field even when several schema branches reach it
        unique.setdefault(problem.path, problem)
    return list(unique.values())


# ----------------------------------------------------------------------------------------------
# Checks that span sections or touch the filesystem

FILE_SOURCES = ("text", "jsonl", "parquet", "tokens", "images")
PREPARE_HINT = "; prepare it first with `sweeper data prepare` (the sweep file's comments give the command)"


def _data_problems(data: DataConfig, base: Path) -> list[Problem]:
    out: list[Problem] = []
    if data.source in FILE_SOURCES and not data.path:
        out.append(Problem(("data", "path"), f"required for source {data.source!r} (a file, directory or glob)"))
    for key in ("path", "val_path"):
        value = getattr(data, key)
        if value and data.source in FILE_SOURCES:
            resolved = resolve_path(value, base)
            if not _exists(resolved):
                given = "" if resolved == value else f" (given as {value!r}, relative to the working directory)"
                hint = PREPARE_HINT if data.source == "tokens" and key == "path" else ""
                out.append(MissingFile(("data", key), f"no such file or directory: {resolved}{given}{hint}"))
            elif data.source == "tokens" and key == "path" and os.path.isdir(resolved) and not os.path.isfile(
                os.path.join(resolved, "manifest.json")
            ):
                out.append(MissingFile(("data", key), f"{resolved}: a folder without manifest.json, so not a prepared corpus "
                                   f"(or its `sweeper data prepare` has not finished){PREPARE_HINT}"))
    if data.source == "hf" and not data.dataset:
        out.append(Problem(("data", "dataset"), "required for source 'hf' (a Hugging Face dataset name)"))
    if data.tokenizer and _looks_local(data.tokenizer):
        resolved = resolve_path(data.tokenizer, base)
        if not os.path.exists(resolved):
            out.append(MissingFile(("data", "tokenizer"), f"no such file or directory: {resolved}"))
    return out


def _partial_data(raw: Any) -> DataConfig | None:
    """The file-naming keys of a `data` section that failed validation, when they validate on their own."""
    if not isinstance(raw, dict):
        return None
    keys = ("source", "path", "val_path", "tokenizer", "dataset")
    subset = {k: raw[k] for k in keys if k in raw and isinstance(raw[k], str)}
    try:
        return DataConfig.model_validate(subset)
    except ValidationError:
        return None


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.endswith((".json", ".model"))


def _exists(path: str) -> bool:
    if any(ch in path for ch in "*?["):
        return bool(glob.glob(path, recursive=True))
    return os.path.exists(path)


def resolve_path(value: str, base: Path) -> str:
    """Relative paths in a sweep file are relative to the working directory of the command."""
    expanded = os.path.expanduser(value)
    return expanded if os.path.isabs(expanded) else str((base / expanded).resolve())


_STORAGE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg2", "mysql", "mysql+pymysql", "oracle")


class _Sections:
    """The top-level sections that validated on their own (cross-checks use only those)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def has(self, *names: str) -> bool:
        return all(n in self.values for n in names)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def _valid_sections(raw: dict[str, Any], failed: set[str]) -> _Sections:
    values: dict[str, Any] = {}
    for name, info in SweepConfig.model_fields.items():
        if name in failed:
            continue
        if name in raw:
            try:
                annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                values[name] = TypeAdapter(annotation).validate_python(raw[name])
            except ValidationError:
                continue
        elif not info.is_required():
            values[name] = info.get_default(call_default_factory=True)
    return _Sections(values)


def _cross_problems(sec: _Sections, base: Path) -> list[Problem]:
    out: list[Problem] = []
    if sec.has("methods"):
        names = [m.name for m in sec.methods]
        for i, name in enumerate(names):
            if name in names[:i]:
                out.append(Problem(("methods", i, "name"), f"method {name!r} is listed twice; give variants distinct names"))
        for i, method in enumerate(sec.methods):
            for section, model in (("lr", LRSection), ("train", TrainConfig), ("divergence", DivergenceConfig)):
                patch = getattr(method, section)
                if not patch or not sec.has(section):
                    continue
                base_values = getattr(sec, section).model_dump(exclude_none=True)
                merged = merge_train(base_values, patch) if section == "train" else deep_merge(base_values, patch)
                try:
                    model.model_validate(merged)
                except ValidationError as exc:
                    out.extend(problems_from(exc, model, ("methods", i, section)))
    if sec.has("data"):
        out.extend(_data_problems(sec.data, base))
    if sec.has("model"):
        out.extend(_shape_problems(sec.model))
        out.extend(_family_problems(sec.model))
    if sec.has("model", "methods"):
        out.extend(_scheme_problems(sec.methods, sec.model))
    if sec.has("model", "data"):
        data, model = sec.data, sec.model
        byte_level = data.tokenizer is None and data.source not in ("tokens", "hf", "images", "builtin_images")
        if isinstance(model.vocab, int) and byte_level and model.vocab < BYTE_VOCAB:
            out.append(Problem(("model", "vocab"), f"byte-level data needs vocab ≥ {BYTE_VOCAB} (got {model.vocab})"))
        if isinstance(model.vocab, int) and model.vocab > MAX_VOCAB:
            out.append(Problem(("model", "vocab"), f"must be ≤ {MAX_VOCAB} (got {model.vocab})"))
        if data.source == "tokens" and model.vocab == "auto":
            out.append(Problem(("model", "vocab"), "give the vocabulary size for pre-tokenized data (source 'tokens')"))
        image_data = data.source in ("images", "builtin_images")
        if model.family == "vit" and not image_data:
            out.append(Problem(("data", "source"), f"the vit family trains on images or builtin_images (got {data.source!r})"))
        if model.family != "vit" and image_data:
            out.append(Problem(("data", "source"), f"image data needs model.family: vit (got {model.family!r})"))
    if sec.has("resources"):
        res = sec.resources
        if res.cpu == 0 and res.gpu == 0 and not res.custom:
            out.append(Problem(("resources",), "a trial must ask for some cpu, gpu or custom resource"))
        for i, rule in enumerate(res.by_size):
            if rule.gpu is not None and rule.gpu > 1 and rule.gpu != int(rule.gpu):
                out.append(Problem(("resources", "by_size", i, "gpu"), "a GPU count above 1 must be whole"))
            if not sec.has("model"):
                continue
            size_names = {s.name for s in sec.model.sizes or []}
            if rule.sizes is not None:
                unknown = [s for s in rule.sizes if s not in size_names]
                if unknown:
                    out.append(Problem(("resources", "by_size", i, "sizes"), f"not among model.sizes: {', '.join(unknown)}"))
            if rule.max_depth is not None and sec.model.depths is None:
                out.append(Problem(("resources", "by_size", i, "max_depth"), "only for a depth sweep (model.depths)"))
        if sec.has("train") and sec.train.device == "cuda" and res.gpu == 0 and not any((r.gpu or 0) > 0 for r in res.by_size):
            out.append(Problem(("train", "device"), "'cuda' needs resources.gpu > 0 (Ray hides GPUs from trials without)"))
    out.extend(_unit_problems(sec))
    if sec.has("ledger") and sec.ledger != "sqlite":
        scheme = sec.ledger.split(":", 1)[0].lower()
        if scheme != "journal" and scheme not in _STORAGE_SCHEMES:
            out.append(
                Problem(("ledger",), "expected 'sqlite', 'journal:PATH' or an Optuna storage URL such as "
                        f"postgresql://user@host/db (got {sec.ledger!r})")
            )
    if sec.has("ray"):
        address = sec.ray.address
        if address and not re.match(r"^(auto|ray://\S+|[A-Za-z0-9_.\-\[\]:]+:\d+)$", address):
            out.append(Problem(("ray", "address"), f"expected 'auto', HOST:PORT or ray://HOST:PORT (got {address!r})"))
        if address and (sec.ray.num_cpus or sec.ray.num_gpus is not None):
            out.append(Problem(("ray",), "num_cpus/num_gpus describe a local Ray; drop them when giving an address"))
    if sec.has("output") and sec.output is not None and not sec.output.strip():
        out.append(Problem(("output",), "must not be empty"))
    return out


def _scheme_problems(methods: list[MethodSpec], model: ModelSection) -> list[Problem]:
    """Each method's scheme options, read as the planner's scheme will read them: keys the scheme does not
    take (named where they are written, with the nearest allowed key), then values it refuses at some depth."""
    out: list[Problem] = []
    reported_model_keys: set[str] = set()
    for i, method in enumerate(methods):
        try:
            allowed = sorted(get_scheme(method.scheme_name).defaults)
        except ValueError:
            continue  # an unknown scheme is reported by MethodSpec
        unknown = False
        for key in method.scheme_options:
            if key not in allowed:
                unknown = True
                out.append(Problem(("methods", i, "scheme_options", key), _unknown_option(key, method.scheme_name, allowed)))
        for key in model.scheme_options:
            if key not in allowed and key not in method.scheme_options:
                unknown = True
                if key not in reported_model_keys:
                    reported_model_keys.add(key)
                    out.append(Problem(("model", "scheme_options", key),
                                       _unknown_option(key, method.scheme_name, allowed) + f" (method {method.name!r})"))
        if unknown:
            continue
        options = deep_merge(model.scheme_options, method.scheme_options)
        for depth in _depths_of(model):
            try:
                make_scheme(method.scheme_name, depth, options)
            except (ValueError, TypeError, KeyError) as exc:
                named = re.search(r"scheme_options\.(\w+)", str(exc))  # the option the scheme names, where it is written
                key = named.group(1) if named else None
                if key in method.scheme_options:
                    path: tuple[str | int, ...] = ("methods", i, "scheme_options", key)
                elif key in model.scheme_options:
                    path = ("model", "scheme_options", key)
                else:
                    path = ("methods", i, "scheme_options") if method.scheme_options else ("methods", i)
                out.append(Problem(path, f"at depth {depth}: {exc}"))
                break
    return out


def _unknown_option(key: str, scheme: str, allowed: list[str]) -> str:
    return (f"unknown option {key!r} for scheme {scheme!r}{catalog.suggest(key, allowed)} "
            f"(allowed: {', '.join(allowed) or 'none'})")


def _depths_of(model: ModelSection) -> list[int]:
    """The numbers of blocks the sweep's networks have (the planner's shapes, without counting)."""
    if model.depths is not None:
        return sorted(set(model.depths))
    if model.loops is not None:
        try:
            return [looped_depth(model.extra)]
        except ValueError:
            return []  # reported by _family_problems
    return sorted({s.shape().depth for s in model.sizes or [] if s.shape().depth})


MAX_TOKENS_PER_PARAM = 100_000  # Chinchilla is 20; 4x Chinchilla 80
MAX_MEMORY_GB = 4096


def _unit_problems(sec: _Sections) -> list[Problem]:
    """Numbers that are valid but almost surely in the wrong unit: a token budget below one step
    (`tokens: 1.5` meaning 1.5 billion), tokens per parameter in the millions, memory in bytes or MiB."""
    out: list[Problem] = []
    if sec.has("train", "model") and sec.model.family != "vit":
        per_step = sec.train.batch_size * sec.model.seq_len
        if sec.train.tokens is not None and sec.train.tokens < per_step:
            out.append(Problem(("train", "tokens"), f"{sec.train.tokens} tokens is less than one step ({per_step} tokens: "
                               "batch_size × seq_len); give a count of tokens, e.g. 1.5e9 for 1.5 billion"))
    if sec.has("train") and sec.train.tokens_per_param is not None and sec.train.tokens_per_param > MAX_TOKENS_PER_PARAM:
        out.append(Problem(("train", "tokens_per_param"), f"{sec.train.tokens_per_param:g} tokens per parameter "
                           f"(at most {MAX_TOKENS_PER_PARAM:g}; Chinchilla is 20): a token count given here? use "
                           "train.tokens"))
    if sec.has("resources"):
        rules = [(("resources", "memory_gb"), sec.resources.memory_gb)]
        rules += [(("resources", "by_size", i, "memory_gb"), r.memory_gb) for i, r in enumerate(sec.resources.by_size)]
        for path, value in rules:
            if value is not None and value > MAX_MEMORY_GB:
                out.append(Problem(path, f"{value:g} GiB per trial (at most {MAX_MEMORY_GB}); memory_gb is in GiB, "
                                   "not bytes or MiB"))
    return out


def _shape_problems(model: ModelSection) -> list[Problem]:
    if model.sizes is None:
        shapes = [(("model", "heads"), model.width, model.heads)]
    else:
        shapes = [(("model", "sizes", i), s.shape().width, s.shape().heads) for i, s in enumerate(model.sizes)]
    out = []
    for path, width, heads in shapes:
        if width % heads:
            out.append(Problem(path, f"width {width} is not divisible by heads {heads}"))
        elif (width // heads) % 2 and model.family != "vit":
            out.append(Problem(path, f"head size {width // heads} (width/heads) must be even for rotary embeddings"))
    return out


def _family_problems(model: ModelSection) -> list[Problem]:
    """Named sizes of another family, a depth sweep of the looped family, and the family's `extra` settings
    (read exactly as the models will read them)."""
    out: list[Problem] = []
    if model.family == "looped" and model.depths is not None:
        return [Problem(("model", "depths"), "the looped family sweeps model.loops (loop counts) or model.sizes, not depths")]
    depths: list[tuple[int, dict[str, Any]]] = []
    for i, size in enumerate(model.sizes or []):
        shape = size.shape()
        if shape.family and shape.family != model.family:
            out.append(Problem(("model", "sizes", i), f"{size.name!r} is a {shape.family} size; model.family is {model.family!r}"))
        else:
            depths.append((shape.depth, {**dict(shape.extra), **model.extra}))
    depths += [(depth, dict(model.extra)) for depth in model.depths or []]
    if model.loops is not None:
        depths.append((0, dict(model.extra)))
    for depth, extra in depths:
        try:
            if model.family == "looped":
                loop_settings(ModelConfig(family="looped", depth=depth or looped_depth(extra), extra=extra))
            elif model.family == "vit":
                vit_settings(ModelConfig(family="vit", extra=extra))
            elif extra:
                raise ValueError(f"model.extra: the llama family takes no extra settings (got {', '.join(sorted(extra))})")
        except ValueError as exc:
            message = str(exc).removeprefix("model.extra").lstrip(".: ")
            out.append(Problem(("model", "extra"), message))
            break  # the settings are shared by the sizes: one message is enough
    return out


# ----------------------------------------------------------------------------------------------
# Entry points


@dataclass
class Validated:
    config: SweepConfig
    source: Path
    warnings: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # KEY=VALUE texts applied on top of the file
    document: Any = None  # the document validated: the file's, with the overrides set


# The module each tracker's extra installs (what `sweeper launch` warns about when it is missing).
TRACKER_MODULES = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}


def _warnings(cfg: SweepConfig) -> list[str]:
    out = []
    if cfg.data.source == "hf" or (cfg.data.tokenizer and not _looks_local(cfg.data.tokenizer)):
        missing = [m for m in ("datasets", "tokenizers", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            out.append(
                f"data: needs the hf extra ({', '.join(missing)} not installed here): "
                "pip install 'layerrope-sweeper[hf]' on the machines that run trials"
            )
    for name in cfg.tracking.names():
        if importlib.util.find_spec(TRACKER_MODULES[name]) is None:
            out.append(f"tracking.{name}: needs the {name} extra ({TRACKER_MODULES[name]} not installed here): "
                       f"pip install 'layerrope-sweeper[{name}]' on the machine that runs `sweeper launch` "
                       "(without it the sweep runs and that tracker stays empty)")
    if cfg.ledger.startswith(("postgresql", "mysql")):
        driver = "psycopg2" if cfg.ledger.startswith("postgresql") else "pymysql"
        if importlib.util.find_spec(driver) is None:
            out.append(f"ledger: the {driver} driver is not installed here")
    return out


def validate_data(raw: Any, *, base: Path | None = None, lines: LoadedYaml | None = None) -> SweepConfig:
    """Validate a parsed sweep document; raises UserError with every problem at once."""
    return _validate(raw, base=base, lines=lines, need_data=True)[0]


def _validate(
    raw: Any, *, base: Path | None, lines: LoadedYaml | None, need_data: bool,
    overrides: list[overrides_.Override] | None = None,
) -> tuple[SweepConfig, list[MissingFile]]:
    """The checks, and (when `need_data` is False) the data files found missing, set aside as warnings."""
    base = base or Path.cwd()
    problems: list[Problem] = []
    if raw is None:
        raise UserError("empty sweep; it needs at least `name`, `methods`, `model` and `train`")
    if not isinstance(raw, dict):
        raise UserError(f"the top level must be a mapping of keys (got a {type(raw).__name__})")
    bad_keys = [k for k in raw if not isinstance(k, str)]
    for k in bad_keys:
        problems.append(Problem((), f"keys must be text (got {_show(k)})"))
    _nonfinite(raw, (), problems)
    problems.extend(_bools_for_numbers(raw))
    cfg: SweepConfig | None = None
    failed: set[str] = set()
    try:
        cfg = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        seen = {p.path for p in problems}
        found = problems_from(exc, SweepConfig)
        problems.extend(p for p in found if p.path not in seen)
        failed = {str(p.path[0]) for p in found if p.path}
    sections = _Sections(dict(cfg)) if cfg is not None else _valid_sections(raw, failed)
    problems.extend(_cross_problems(sections, base))
    if "data" in failed:  # a typo elsewhere in `data` must not hide a missing file until the next run
        partial = _partial_data(raw.get("data"))
        if partial is not None:
            problems.extend(_data_problems(partial, base))
    missing = [] if need_data else [p for p in problems if isinstance(p, MissingFile)]
    problems = [p for p in problems if p not in missing]
    if problems:
        if lines is not None:
            problems.sort(key=lambda p: lines.line_of(p.path) or 0)
        raise _user_error(problems, lines, overrides=overrides)
    assert cfg is not None
    return cfg, missing


def _user_error(problems: list[Problem], lines: LoadedYaml | None, source: str | None = None,
                overrides: list[overrides_.Override] | None = None) -> UserError:
    rendered = []
    for p in problems:
        given = _override_of(p.path, overrides or [])
        line = lines.line_of(p.path) if lines else None
        if given is not None:
            where = f"override {given.text!r}: "
        else:
            where = f"{source}:{line}: " if source and line else (f"{source}: " if source else (f"line {line}: " if line else ""))
        rendered.append(f"{where}{p.dotted()}: {p.message}")
    if len(rendered) == 1:
        return UserError(rendered[0])
    head = f"{source}: {len(rendered)} problems" if source else f"{len(rendered)} problems"
    return UserError(head, details=rendered)


def _override_of(path: tuple[str | int, ...], given: list[overrides_.Override]) -> overrides_.Override | None:
    """The last override that set `path` or a mapping above it (its problems are named by the override)."""
    found = None
    for override in given:
        if path[: len(override.path)] == override.path:
            found = override
    return found


def load_sweep(path: str | os.PathLike[str], *, base: Path | None = None, need_data: bool = True,
               overrides: list[str] | tuple[str, ...] = ()) -> Validated:
    """Read, parse and validate a sweep file, with `KEY=VALUE` overrides set on top (`sweeper.spec.overrides`).

    `need_data=False` is for commands that never read the training data (launch --dry-run, replay,
    simulation, plots of a stored sweep): a data file missing on this machine is then a warning.
    """
    source = Path(path)
    label = str(path)
    try:
        loaded = load_file(source)
    except YamlProblem as exc:
        raise _relabel(UserError(exc.message), label) from None
    given = overrides_.parse(list(overrides))
    document = overrides_.apply(loaded.data, given) if given else loaded.data
    try:
        cfg, missing = _validate(document, base=base, lines=loaded, need_data=need_data, overrides=given)
    except UserError as exc:
        raise _relabel(exc, label) from None
    notes = [_relabel(_user_error([m], loaded, overrides=given), label).message + " (this command does not read the data)"
             for m in missing]
    return Validated(cfg, source, notes + _warnings(cfg), overrides=[o.text for o in given], document=document)


def _relabel(exc: UserError, label: str) -> UserError:
    def fix(line: str) -> str:
        if line.startswith("line "):
            number, _, rest = line[5:].partition(": ")
            number = number.split(",")[0]  # "3, column 7" -> 3 (the column stays in the message)
            return f"{label}:{number}: {rest}"
        return f"{label}: {line}"

    if exc.details:
        return UserError(fix(exc.message), details=[fix(d) for d in exc.details])
    return UserError(fix(exc.message))


def json_schema() -> dict[str, Any]:
    """JSON Schema of the sweep file (for editors: yaml-language-server, VS Code)."""
    schema = SweepConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://layerrope-sweeper/sweep.schema.json"
    return schema
