"""The sections of a sweep file, one pydantic model each: `lr` (`LRSection`), `methods`
(`MethodSpec`), `model` (`ModelSection`, `SizeSpec`), `resources` (`Resources`, `ResourceRule`), `ray`
(`RaySection`) and `tracking` (`TrackingSection` and one model per tracker). Each validates what it can
alone; checks that need several sections or the filesystem are `sweeper.spec.schema.checks`.

The model family's own rules come from its registry entry (`models.family`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from models.family import Family, families, get_family
from sweeper.core.grid import LRPolicy
from sweeper.spec import catalog
from sweeper.spec.schema.fields import (
    MAX_DEPTH,
    MAX_WIDTH,
    MAX_SEQ,
    IntOrAuto,
    Name,
    NonNegFloat,
    PositiveFloat,
    RefineMode,
    Strict,
    finished_message,
)


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
    pair_fallback: bool = Field(
        False,
        description=(
            "with `points: 2` (the centre and the step below): when both first points failed (crashes), try the "
            "centre's other neighbour, the step above, before the cell ends failed"
        ),
    )
    failed_side_last: bool = Field(
        False,
        description=(
            "when the best point needs a neighbour on both sides and one side holds only a failed point within a "
            "step, extend the other side first; the failed side is tried once the other side settles"
        ),
    )
    close_after_failures: Annotated[int, Field(ge=0, le=8)] = Field(
        0,
        description=(
            "a side of the best point where only failed points were tried, at least this many (with "
            "`failed_neighbour: half_step`, its half step among them), gets no more proposals; 0 never closes"
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
    prior_from: Annotated[int, Field(ge=2, le=64)] = Field(
        2,
        description=(
            "with prior: extrapolate, the fewest smaller sizes a size waits for: a size with fewer starts at once "
            "from the YAML's grid. 2: the third size waits for the first two and starts on their law's prediction, "
            "re-centred (two sizes give no interval); 3: only a law with a prediction interval is waited for, so "
            "the first three sizes start together (more trials on the first day)"
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
            failed_neighbour=self.failed_neighbour, prior_from=self.prior_from,
            pair_fallback=self.pair_fallback, failed_side_last=self.failed_side_last,
            close_after_failures=self.close_after_failures,
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
                "unknown_method", finished_message(f"unknown method {scheme!r}{hint} (known: {', '.join(known)})")
            )
        return self

    @property
    def scheme_name(self) -> str:
        return self.scheme or self.name


def _size_entry(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class SizeSpec(Strict):
    """A named model size (`58M`, `130M`, `350M`, `1.3B`) or an explicit shape with a name; optionally the
    training settings of this size (`train`, over the method's, e.g. a recipe's per-size AdamW LR)."""

    name: Name
    width: Annotated[int, Field(ge=1, le=MAX_WIDTH)] | None = None
    depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)] | None = None
    heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    mlp_hidden: Annotated[int, Field(ge=1, le=16 * MAX_WIDTH)] | None = None
    train: dict[str, Any] | None = Field(
        None, description="overrides of the `train` section at this size, over the method's (e.g. "
                          "`{optimizer: {muon: {adamw_lr_ratio: 0.75}}}`)")

    @model_validator(mode="after")
    def _resolvable(self) -> "SizeSpec":
        if self.name in catalog.named_sizes():
            return self
        missing = [k for k in ("width", "depth", "heads") if getattr(self, k) is None]
        if missing:
            hint = catalog.suggest(self.name, list(catalog.named_sizes()))
            raise PydanticCustomError(
                "unknown_size",
                finished_message(
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

    family: Family = "llama"
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
        loop_axis = get_family(self.family).size_axis == "loops"
        if self.loops is not None and not loop_axis:
            looped = " or ".join(f.name for f in families() if f.size_axis == "loops")
            raise PydanticCustomError("axis", f"model.loops (a loop-count sweep) needs family: {looped}")
        if len(given) != 1:
            raise PydanticCustomError(
                "axis", "give exactly one of model.depths (a depth sweep) or model.sizes (a width ladder)"
                + (" or model.loops (a loop-count sweep)" if loop_axis else "")
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
    gpu_model: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, description="the GPU model the trials run on, as CUDA and nvidia-smi name it (e.g. 'NVIDIA H200'): "
                          "stack: auto and the dry run use sweeper bench's measurements of this model only "
                          "(default: this machine's GPU; none seen here: the memory model's formula)")
    custom: dict[str, NonNegFloat] = Field(default_factory=dict, description="custom Ray resources, e.g. a node tag")
    by_size: list[ResourceRule] = Field(default_factory=list, description="overrides by depth or size")
    placement: Literal["spread", "pack"] = Field(
        "spread",
        description=(
            "trials asking for a GPU fraction: spread = while fewer trials want to run than the pool's GPUs would "
            "pack, each GPU gets one lead trial (it asks Ray for more than half a GPU, leaving room for followers) "
            "and the others ask for `gpu`, so that Ray, which packs fractions onto as few GPUs as it can, does not "
            "stack the longest trials on one GPU; pack = always ask for `gpu`"
        ),
    )

    @field_validator("gpu")
    @classmethod
    def _whole_or_fraction(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise PydanticCustomError("gpu", "a GPU count above 1 must be whole (fractions pack trials on one GPU)")
        return value


class RaySection(Strict):
    """Where trials run."""

    address: str | None = Field(None, description="an existing cluster ('auto' or 'HOST:PORT', the GCS address; "
                                                   "'ray://' is refused: see docs/cluster.md)")
    num_cpus: Annotated[int, Field(ge=1)] | None = Field(None, description="CPUs of a local Ray (default: all)")
    num_gpus: NonNegFloat | None = Field(None, description="GPUs of a local Ray (default: detected)")
    storage: str | None = Field(
        None, description="where every node writes: Tune's runs, trial checkpoints, staged weights, shared caches "
                          "(default DIR/ray; on a cluster a shared mount or a pyarrow URI such as s3://bucket/path)"
    )
    scratch: str | None = Field(
        None, description="each node's local scratch folder for a trial's files before they go to the storage "
                          "(default: $LAYERROPE_SWEEPER_SCRATCH, else the system's temporary folder); cleaned after "
                          "every trial"
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
