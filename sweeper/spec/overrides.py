"""Command-line overrides of a sweep file, Hydra-style: `train.steps=400 lr.center=1e-3 methods[1].lr.points=7`.

A key is a dotted path into the YAML document (list items as `[i]`); the value is read as YAML
(`1e-3` a float, `[2, 4]` a list, `true` a boolean, `null` removes the key). An override may add a
key the file does not have (it is then validated like any key of the file: a misspelt one is an
unknown key with its nearest allowed name). Errors name the override.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from sweeper.core.errors import UserError
from sweeper.spec.yamlio import YamlProblem, load_text

Path_ = tuple[str | int, ...]

_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]")


@dataclass(frozen=True)
class Override:
    text: str  # as given: "train.steps=400"
    path: Path_
    value: Any
    remove: bool = False

    @property
    def key(self) -> str:
        return self.text.split("=", 1)[0]


def parse_path(key: str) -> Path_:
    """'methods[1].lr.points' -> ('methods', 1, 'lr', 'points'); ValueError when it is not such a path."""
    parts: list[str | int] = []
    for segment in key.split("."):
        if not segment:
            raise ValueError("an empty key segment")
        at = 0
        while at < len(segment):
            m = _PART.match(segment, at)
            if not m or (m.group(1) and at > 0):
                raise ValueError(f"cannot read {segment!r}")
            parts.append(m.group(1) if m.group(1) else int(m.group(2)))
            at = m.end()
    if isinstance(parts[0], int):
        raise ValueError("the key must start with a name")
    return tuple(parts)


def dotted(path: Path_) -> str:
    """The one spelling of a field path, as every message names a field: ('methods', 1, 'lr') -> 'methods[1].lr'
    (the inverse of `parse_path`)."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse(texts: list[str] | tuple[str, ...]) -> list[Override]:
    """Every override read, or one UserError naming each one that cannot be read."""
    out: list[Override] = []
    problems: list[str] = []
    for text in texts:
        key, eq, raw = text.partition("=")
        if not eq or not key.strip():
            problems.append(f"override {text!r}: expected KEY=VALUE, e.g. train.steps=400")
            continue
        try:
            path = parse_path(key.strip())
        except ValueError as exc:
            problems.append(f"override {text!r}: {exc}; a key is a dotted path such as lr.center or methods[0].lr.points")
            continue
        try:
            value = load_text(raw).data if raw.strip() else ""
        except YamlProblem as exc:
            problems.append(f"override {text!r}: the value is not YAML ({exc.message})")
            continue
        out.append(Override(text, path, value, remove=raw.strip() in ("null", "~")))
    if problems:
        raise UserError(problems[0]) if len(problems) == 1 else UserError(f"{len(problems)} problems", details=problems)
    return out


def apply(doc: Any, overrides: list[Override]) -> Any:
    """A copy of `doc` with every override set (later ones win); UserError when a path cannot be followed."""
    out = copy.deepcopy(doc) if doc is not None else {}
    if not isinstance(out, dict):
        return out  # the file's own error (not a mapping) is reported by validation
    for override in overrides:
        node: Any = out
        for depth, part in enumerate(override.path[:-1]):
            nxt = override.path[depth + 1]
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    raise _cannot(override, depth, "no such list item")
            elif not isinstance(node, dict):
                raise _cannot(override, depth, "not a mapping")
            if isinstance(node, dict) and (part not in node or node[part] is None):
                node[part] = [] if isinstance(nxt, int) else {}
            child = node[part]
            if isinstance(child, str) and isinstance(nxt, str):
                child = node[part] = {"name": child}  # `methods: [pre]` -> methods[0].lr.points=7
            node = child
        last = override.path[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last > len(node):
                raise _cannot(override, len(override.path) - 1, "no such list item")
            if last == len(node):
                node.append(override.value)
            else:
                node[last] = override.value
        elif not isinstance(node, dict):
            raise _cannot(override, len(override.path) - 1, "not a mapping")
        elif override.remove:
            node.pop(last, None)
        else:
            node[last] = override.value
    return out


def _cannot(override: Override, depth: int, why: str) -> UserError:
    return UserError(f"override {override.text!r}: {dotted(override.path[: depth + 1])}: {why} in the file")


def merge_texts(recorded: list[str], given: list[str]) -> list[str]:
    """`recorded` then `given`, one entry per key (a given key replaces a recorded one)."""
    given_keys = {t.split("=", 1)[0].strip() for t in given}
    return [t for t in recorded if t.split("=", 1)[0].strip() not in given_keys] + list(given)
