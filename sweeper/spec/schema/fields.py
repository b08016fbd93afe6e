"""The sweep file's value types and limits: the annotated field types every section uses
(`PositiveFloat`, `Name`, `IntOrAuto`, `RefineMode`, ...), the frozen, strict base model (`Strict`)
and the numeric limits the schema enforces."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError


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


def finished_message(text: str) -> str:
    """A finished message for PydanticCustomError (which substitutes only keys of a context we never give)."""
    return text


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
