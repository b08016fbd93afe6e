"""The sweep file: its pydantic schema, loading, and errors a researcher can act on.

A sweep is one YAML file (see the README's YAML reference): methods × sizes × seeds
make the *cells*; each cell's learning rate is swept until its optimum is bracketed.
The data, training and divergence sections are the trial stream's own pydantic models
(`trials.config`), embedded as they are, so that the trial and the sweep agree by
construction. Nothing here imports torch or Ray: `sweeper validate` answers in well
under a second.

`load_sweep(path)` returns a `Validated` config or raises `UserError` with one line per
problem (every problem at once), each naming the file line, the field path, the value
and what is allowed.

Import the public names from here. By job:
- `fields`: the annotated field types and limits; `sections`: one model per section;
  `sweep`: `SweepConfig`, the merging of a method's overrides, the JSON Schema;
- `messages`: pydantic's errors as lines (`Problem`, `problems_from`, `user_error`);
- `checks`: the raw document, cross-section and filesystem checks;
- `load`: `load_sweep`, `validate_data`.
"""

from __future__ import annotations

from sweeper.spec.schema.checks import FILE_SOURCES, resolve_path
from sweeper.spec.schema.fields import (
    BUDGET_KEYS,
    BYTE_VOCAB,
    MAX_DEPTH,
    MAX_SEQ,
    MAX_VOCAB,
    MAX_WIDTH,
    IntOrAuto,
    Name,
    NonNegFloat,
    PositiveFloat,
    RefineMode,
    Strict,
)
from sweeper.spec.schema.load import TRACKER_MODULES, Validated, load_sweep, validate_data
from sweeper.spec.schema.messages import MissingFile, Problem, problems_from, relabel, user_error
from sweeper.spec.schema.sections import (
    LRSection,
    MethodSpec,
    MlflowTracking,
    ModelSection,
    RaySection,
    ResourceRule,
    Resources,
    SizeSpec,
    TensorboardTracking,
    TrackingSection,
    WandbTracking,
)
from sweeper.spec.schema.sweep import SweepConfig, deep_merge, json_schema, merge_train

__all__ = [
    "BUDGET_KEYS", "BYTE_VOCAB", "FILE_SOURCES", "MAX_DEPTH", "MAX_SEQ", "MAX_VOCAB", "MAX_WIDTH", "TRACKER_MODULES",
    "IntOrAuto", "LRSection", "MethodSpec", "MissingFile", "MlflowTracking", "ModelSection", "Name", "NonNegFloat",
    "PositiveFloat", "Problem", "RaySection", "RefineMode", "ResourceRule", "Resources", "SizeSpec", "Strict",
    "SweepConfig", "TensorboardTracking", "TrackingSection", "Validated", "WandbTracking", "deep_merge",
    "json_schema", "load_sweep", "merge_train", "problems_from", "relabel", "resolve_path", "user_error",
    "validate_data",
]
