"""The layers hold: `lint-imports` keeps pyproject.toml's contracts, and an independent AST check of every
module of the four packages finds no upward import between layers (imports inside functions included), no
import cycle, no source module over 600 lines and no `if __name__ == "__main__"` block in a library module.

The layer table below is README's "Architecture" table, written out again on purpose: the AST check does
not read the import-linter contract it double-checks."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("models", "trials", "sweeper", "dashboards")

# Top to bottom. A module imports only from its own layer or those below; the members of one layer are
# independent siblings (neither imports the other).
LAYERS: list[tuple[str, ...]] = [
    ("sweeper.cli",),
    ("sweeper.commands",),
    ("sweeper.api", "sweeper.bench"),
    ("dashboards",),
    ("sweeper.run",),
    ("sweeper.sim",),
    ("sweeper.tracking",),
    ("sweeper.analysis",),
    ("sweeper.records",),
    ("sweeper.search",),
    ("sweeper.spec",),
    ("sweeper.core", "sweeper.stats"),
    ("trials",),
    ("models",),
]
ENTRY_POINTS = {"sweeper/cli.py"}  # `python -m sweeper.cli`: the one module that may run as a script
MAX_LINES = 600
# Modules still over the limit while a split is under way (none now: trials/train.py was the last): listed so
# that the rule holds everywhere else meanwhile. The test fails once one of them is under the limit.
PENDING_SPLIT: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _owner(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _imports(name: str, path: Path) -> set[str]:
    """Every project module `name` imports, at any depth of its code (functions and TYPE_CHECKING too)."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package[: len(package) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found |= {owner for t in targets if (owner := _owner(t)) and owner != name}
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> tuple[int, str] | None:
    """(depth of the layer, the member) of a module; None for the `sweeper` package's own __init__ (the top)."""
    for depth, members in enumerate(LAYERS):
        for member in members:
            if name == member or name.startswith(member + "."):
                return depth, member
    return None


def test_import_linter_keeps_the_contracts() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert config["root_packages"] == list(PACKAGES)
    assert not [c["name"] for c in config["contracts"] if c.get("ignore_imports")], "no exception may hide a cycle"
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--no-cache", "--no-logo"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_every_module_belongs_to_a_layer() -> None:
    assert [n for n in MODULES if _layer(n) is None] == ["sweeper"]  # the package itself: `sweeper.open`, on top


def test_no_upward_import_between_layers() -> None:
    upward = []
    for name, targets in GRAPH.items():
        mine = _layer(name)
        for target in targets:
            theirs = _layer(target)
            if mine is None or theirs is None:
                continue  # the `sweeper` package itself imports only `sweeper.api` (on `sweeper.open()`)
            if theirs[0] < mine[0] or (theirs[0] == mine[0] and theirs[1] != mine[1]):
                upward.append(f"{name} -> {target}")
    assert not upward, upward


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def test_no_cycle_between_the_sub_packages_of_sweeper() -> None:
    def sub(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = defaultdict(set)
    for name, targets in GRAPH.items():
        if name.startswith("sweeper."):
            graph[sub(name)] |= {sub(t) for t in targets if t.startswith("sweeper.") and sub(t) != sub(name)}
    assert not _cycles(graph)


def test_no_import_cycle_between_modules() -> None:
    """Counting imports inside functions too: no import inside a function keeps a cycle apart."""
    cycles = _cycles(GRAPH)
    assert not cycles, sorted(sorted(c) for c in cycles)


def test_no_source_module_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) <= PENDING_SPLIT, {k: v for k, v in long.items() if k not in PENDING_SPLIT}
    split = PENDING_SPLIT - set(long)
    assert not split, f"now under {MAX_LINES} lines: remove {sorted(split)} from PENDING_SPLIT"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_main_block_in_a_library_module(package: str) -> None:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                found.append(str(path.relative_to(ROOT)))
    assert not [f for f in found if f not in ENTRY_POINTS], found
