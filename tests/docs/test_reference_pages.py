"""The generated reference pages (the sweep YAML from the pydantic schema, the command line from the
argument parsers) are what the code generates today, and cover every key and every command."""

from __future__ import annotations

import argparse
import importlib.util
import re

import pydantic

from sweeper.commands.parser import COMMANDS, build_parser
from sweeper.spec.schema import SweepConfig
from tests.docs.pages import ROOT

SPEC = importlib.util.spec_from_file_location("gen_reference_docs", ROOT / "scripts" / "gen_reference_docs.py")
GEN = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(GEN)  # type: ignore[union-attr]
REGENERATE = "regenerate with `python scripts/gen_reference_docs.py` and commit the result"


def test_the_sweep_yaml_reference_is_fresh():
    page = GEN.YAML_PAGE
    assert page.exists() and page.read_text(encoding="utf-8") == GEN.render_sweep_yaml(), (
        f"{page.relative_to(ROOT)} differs from the schema: {REGENERATE}")


def test_the_cli_reference_is_fresh():
    page = GEN.CLI_PAGE
    assert page.exists() and page.read_text(encoding="utf-8") == GEN.render_cli(), (
        f"{page.relative_to(ROOT)} differs from the argument parsers: {REGENERATE}")


def _keys(model: type[pydantic.BaseModel], prefix: str = ""):
    """(section, key) for every field of the schema, nested sections included (walked independently
    of the generator)."""
    for name, field in model.model_fields.items():
        yield prefix.rstrip("."), name
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
                yield from _keys(annotation, f"{prefix}{name}.")
            else:
                stack.extend(getattr(annotation, "__args__", ()))


def _sections(text: str) -> dict[str, str]:
    """Section title (the dotted path in its heading, `[]` dropped; "" for the top level) -> its text."""
    parts = re.split(r"(?m)^## ", text)
    out = {}
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        path = re.search(r"`([^`]+)`", title)
        out["" if title.startswith("Top level") else (path.group(1).replace("[]", "") if path else title)] = body
    return out


def test_every_schema_key_has_a_row_in_its_section():
    sections = _sections(GEN.YAML_PAGE.read_text(encoding="utf-8"))
    keys = list(_keys(SweepConfig))
    assert len(keys) > 100
    missing = [f"{s}.{k}" if s else k for s, k in keys if f"| `{k}` |" not in sections.get(s, "")]
    assert not missing, f"keys without a row in their section: {missing}"


def test_every_command_and_option_is_on_the_cli_page():
    text = GEN.CLI_PAGE.read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == set(COMMANDS)
    for name, sub in commands.items():
        assert f"## sweeper {name}\n" in text
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in text, f"sweeper {name} {option} is not on the CLI page"


def test_stale_pages_are_named_by_the_check(tmp_path, monkeypatch):
    stale = tmp_path / "sweep-yaml.md"
    stale.write_text("# an old page\n", encoding="utf-8")
    monkeypatch.setattr(GEN, "PAGES", {stale: GEN.render_sweep_yaml, GEN.CLI_PAGE: GEN.render_cli})
    assert GEN.stale_pages() == [stale]
    monkeypatch.setattr(GEN, "ROOT", tmp_path)
    assert GEN.main(["--check"]) == 1
