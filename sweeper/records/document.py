"""The base of the typed JSON documents a sweep directory keeps (`manifest.json`, `fits.json`).

A `Record` is a pydantic model read from and written to JSON without loss, so that a document
read and written again is the same JSON (the writers sort keys):
- it writes exactly the keys it was read with or given, no defaults added (`to_json` dumps the
  fields set; a field never set is absent from the file, as a key the old writers left out);
- keys it does not name (written by a newer minor version) are kept and written back;
- a number keeps its JSON type (`Number`: an int stays an int, a float a float); a non-finite
  float reads as null (the writers forbid NaN), and a numpy scalar a writer hands over becomes the
  plain number (`JsonValue` does the same inside a free-form value).
A document that does not fit its type is a `DocumentError`, one line naming the first field.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("must be a number")
    if isinstance(value, numbers.Integral):
        return int(value)
    number = float(value)
    return number if math.isfinite(number) else None


# A JSON number as written (int or float); for typing, a float (an int is one, PEP 484).
Number = Annotated[float, PlainValidator(_number)]


def plain_json(value: Any) -> Any:
    """Plain JSON types only: numpy scalars and arrays unwrapped, tuples as lists, non-finite floats as null."""
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # a numpy array or scalar (numpy not imported here)
        return plain_json(value.tolist())
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):
        return _number(value)
    return value


# Any JSON value, made plain (`plain_json`): a writer's free-form diagnostics.
JsonValue = Annotated[Any, PlainValidator(plain_json)]
def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("must be an integer")
    return int(value)


# A JSON integer: a float (3.0) or a bool is not one.
Int = Annotated[int, PlainValidator(_integer)]


class DocumentError(ValueError):
    """A JSON document that does not fit its type: `where` (dotted path) and what is wrong."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


R = TypeVar("R", bound="Record")


class Record(BaseModel):
    """A JSON object of a sweep directory's documents (see the module docstring)."""

    # assignments are validated too: a writer's `launch.simulation = {...}` becomes the typed record
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """The record of a parsed JSON value; DocumentError when it does not fit."""
        if not isinstance(data, dict):
            raise DocumentError("", f"not a JSON object (a {type(data).__name__})")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise DocumentError(where, first["msg"].removeprefix("Value error, ")) from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object: the fields set (read or given) and the keys kept from a newer version, every
        object's keys sorted (as the writers write them, so this equals the file as `json.loads` reads it)."""
        return _sorted(self.model_dump(mode="python", exclude_unset=True))

    def has(self, name: str) -> bool:
        """Whether the document holds key `name` (null included), as opposed to leaving it out."""
        return name in self.model_fields_set

    def setdefault(self, name: str, value: Any) -> None:
        """Set `name` unless the document already holds it (dict.setdefault on the JSON object)."""
        if not self.has(name):
            setattr(self, name, value)

    def unset(self, name: str) -> None:
        """Leave `name` out of the document again (dict.pop on the JSON object); it reads as its default."""
        field = type(self).model_fields[name]
        object.__setattr__(self, name, field.get_default(call_default_factory=True))
        self.model_fields_set.discard(name)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value
