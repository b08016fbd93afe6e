"""Safe loading of sweep YAML files: every hostile input becomes a one-line problem.

Beyond `yaml.safe_load` this loader
- rejects binary or non-UTF-8 files, files over `MAX_BYTES`, and empty documents;
- rejects duplicate keys in a mapping (PyYAML silently keeps the last one);
- rejects nesting deeper than `MAX_DEPTH` before composing (the composer recurses);
- rejects alias expansions larger than `MAX_NODES` (the "billion laughs" bomb): anchors
  and aliases stay usable for ordinary reuse;
- reads `1e-3` as a float (YAML 1.1 wants `1.0e-3`; every researcher writes `1e-3`);
- records the line of every value, so that schema errors can point at it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_NODES = 100_000

Path_ = tuple[str | int, ...]


class YamlProblem(Exception):
    """The file cannot be read as a sweep document; `message` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class LoadedYaml:
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)  # 1-based line of each value

    def line_of(self, path: Path_) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:cut]))
            if line is not None:
                return line
        return None


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2-style floats and duplicate-key detection."""

    yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise YamlProblem(f"line {key_node.start_mark.line + 1}: a mapping key must be a plain value") from None
            if key in seen:
                raise YamlProblem(
                    f"line {key_node.start_mark.line + 1}: duplicate key {key!r} "
                    f"(first at line {seen[key]}); each key may appear once"
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


for _first, _resolvers in list(_Loader.yaml_implicit_resolvers.items()):
    _Loader.yaml_implicit_resolvers[_first] = [(tag, rx) for tag, rx in _resolvers if tag != "tag:yaml.org,2002:float"]
for _ch in list("-+0123456789."):
    _Loader.yaml_implicit_resolvers.setdefault(_ch, []).insert(0, ("tag:yaml.org,2002:float", _FLOAT))


def _check_events(text: str) -> None:
    """Depth and document-count checks on the event stream (the parser does not recurse)."""
    depth = 0
    documents = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlProblem(
                    f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels; a sweep file is shallow"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise YamlProblem(f"line {event.start_mark.line + 1}: more than one YAML document; give one sweep per file")


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Number of nodes after expanding every alias (aliases share node objects)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a node that refers to itself counts once instead of looping
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    else:
        size = 1
    memo[key] = min(size, MAX_NODES + 1)
    return memo[key]


def _record_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int], budget: list[int]) -> None:
    if budget[0] <= 0:
        return
    budget[0] -= 1
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _record_lines(child, (*path, i), lines, budget)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                lines.setdefault((*path, key_node.value), key_node.start_mark.line + 1)
                _record_lines(value_node, (*path, key_node.value), lines, budget)


def load_text(text: str, *, source: str = "<string>") -> LoadedYaml:
    """Parse one YAML document with the checks above; raises YamlProblem."""
    try:
        _check_events(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return LoadedYaml(None)
            if _expanded_size(node, {}) > MAX_NODES:
                raise YamlProblem(
                    f"aliases expand to more than {MAX_NODES} values (an alias bomb?); write the values out"
                )
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except YamlProblem:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise YamlProblem(f"{where}invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise YamlProblem(f"nested deeper than {MAX_DEPTH} levels; a sweep file is shallow") from None
    lines: dict[Path_, int] = {}
    _record_lines(node, (), lines, [MAX_NODES])
    return LoadedYaml(data, lines)


def load_file(path: str | Path) -> LoadedYaml:
    """Read and parse a sweep file; every failure is a YamlProblem naming the file's problem."""
    p = Path(path)
    if not p.exists():
        raise YamlProblem("no such file")
    if p.is_dir():
        raise YamlProblem("is a directory; give a sweep YAML file")
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise YamlProblem(f"{size} bytes; a sweep file is at most {MAX_BYTES} bytes")
        raw = p.read_bytes()
    except OSError as exc:
        raise YamlProblem(f"cannot read ({exc.strerror or exc})") from None
    if b"\x00" in raw:
        raise YamlProblem("binary content (NUL bytes); a sweep file is YAML text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlProblem(f"not UTF-8 text (byte {exc.start}); a sweep file is YAML text") from None
    if not text.strip():
        raise YamlProblem("empty file; a sweep needs at least `methods`, `model` and `train`")
    return load_text(text, source=str(p))
