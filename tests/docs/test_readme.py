"""The README against the product: every internal link resolves, every key of the sweep schema is in
the YAML reference, every command is in the commands table, and the plan figures it quotes for the
shipped depth study are the ones `launch --dry-run` prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pydantic
import pytest

from sweeper.cli import main
from sweeper.commands.parser import COMMANDS
from sweeper.spec.schema import SweepConfig

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PROSE = re.sub(r"```.*?```", "", README, flags=re.S)  # headings and links outside code blocks


def section(title: str) -> str:
    start = README.index(title)
    following = re.search(r"(?m)^#{2,3} ", README[start + len(title):])
    return README[start: start + len(title) + (following.start() if following else len(README))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_internal_link_resolves():
    anchors = {anchor(h) for h in re.findall(r"(?m)^#{1,6} (.*)$", PROSE)}
    links = set(re.findall(r"\]\(#([^)]+)\)", PROSE))
    assert links and not (links - anchors), sorted(links - anchors)


def _keys(model: type[pydantic.BaseModel], prefix: str = "", depth: int = 0):
    for name, field in model.model_fields.items():
        yield prefix + name, name
        annotation = field.annotation
        nested = [a for a in (annotation, *getattr(annotation, "__args__", ()))
                  if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
        if depth < 2:
            for sub in nested:
                yield from _keys(sub, f"{prefix}{name}.", depth + 1)


def test_every_schema_key_is_in_the_yaml_reference():
    table = section("### The sweep YAML, key by key")
    missing = [dotted for dotted, name in _keys(SweepConfig)
               if f"`{dotted}`" not in table and f"`{name}`" not in table and f"{name} " not in table]
    assert not missing, missing


def test_every_command_is_in_the_commands_table():
    table = section("### Commands and their conventions")
    assert not [c for c in COMMANDS if f"`sweeper {c}" not in table]


def test_the_depth_study_plan_figures_match_the_dry_run(capsys):
    assert main(["launch", str(ROOT / "sweeps" / "depth.yaml"), "--dry-run", "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert f"{totals['cells']} cells, {totals['initial_points']} points in the initial grids" in README
    assert f"{totals['initial_gpu_hours']:.3g} GPU-hours" in README


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "sweeps").glob("*.yaml")))
def test_every_shipped_sweep_is_in_the_sweeps_table(name: str):
    assert f"`{name}`" in section("### 1. Write a sweep and launch it")
