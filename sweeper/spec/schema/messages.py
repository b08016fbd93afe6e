"""Problems and their messages: pydantic's errors translated into lines a researcher can act on
(`problems_from`: the field path, what was given, what is allowed, the nearest allowed key), and
rendered with the file's line numbers or the `KEY=VALUE` override that set the field (`user_error`,
`relabel`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sweeper.core.errors import UserError
from sweeper.spec import catalog
from sweeper.spec.overrides import Override, dotted
from sweeper.spec.yamlio import LoadedYaml


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


def show_value(value: Any) -> str:
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
            message += f" (got {show_value(err['input'])})"
        out.append(Problem((*prefix, *loc), message))
    return out


def user_error(problems: list[Problem], lines: LoadedYaml | None, source: str | None = None,
                overrides: list[Override] | None = None) -> UserError:
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


def _override_of(path: tuple[str | int, ...], given: list[Override]) -> Override | None:
    """The last override that set `path` or a mapping above it (its problems are named by the override)."""
    found = None
    for override in given:
        if path[: len(override.path)] == override.path:
            found = override
    return found


def relabel(exc: UserError, label: str) -> UserError:
    def fix(line: str) -> str:
        if line.startswith("line "):
            number, _, rest = line[5:].partition(": ")
            number = number.split(",")[0]  # "3, column 7" -> 3 (the column stays in the message)
            return f"{label}:{number}: {rest}"
        return f"{label}: {line}"

    if exc.details:
        return UserError(fix(exc.message), details=[fix(d) for d in exc.details])
    return UserError(fix(exc.message))
