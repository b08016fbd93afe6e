"""The README and the pages against their promises: a short first screen whose two commands are the ones
CI runs, every shipped sweep and every command listed, run-log phrasing kept to the benchmark pages and
the changelog, and every benchmark page saying when, at which commit, on what and with which command."""

from __future__ import annotations

import re

import pytest

from sweeper.commands.parser import COMMANDS
from tests.docs.pages import DOCS, README, ROOT, blocks, pages, prose

CI = ROOT / ".ci" / "run"
# Narration of a run or of a change, which belongs on a dated benchmark page or in the changelog.
RUN_LOG = re.compile(
    r"\bformer(ly)?\b|\bused to\b|\bthe fix\b|before the fix|load average|2-core VM|not met yet|not yet met"
    r"|\bcommit [0-9a-f]{7}|(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w-])",
    re.IGNORECASE,
)


def test_the_readme_is_a_first_screen():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 350, f"README.md has {len(lines)} lines (at most 350: the reference belongs in docs/)"


def test_ci_runs_the_readmes_two_commands_as_written():
    commands = [b.text.strip() for b in blocks(README) if b.lang == "bash"][:2]
    assert commands[0].startswith("python3 -m venv .venv") and "sweeper launch sweeps/quickstart.yaml" in commands[0]
    assert "python -m pytest" in commands[1] and "bash tests/setup.sh" in commands[1]
    ci = CI.read_text(encoding="utf-8").splitlines()
    for command in commands:
        assert command in ci, f".ci/run does not run the README's command as written: {command}"


def _section(path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index(heading)
    following = re.search(r"(?m)^#{1,3} ", text[start + len(heading):])
    return text[start: start + len(heading) + (following.start() if following else len(text))]


@pytest.mark.parametrize("name", sorted(str(p.relative_to(ROOT / "sweeps")) for p in (ROOT / "sweeps").rglob("*.yaml")))
def test_every_shipped_sweep_is_in_the_ready_sweeps_table(name: str):
    assert f"`{name}`" in _section(DOCS / "workflows" / "launch.md", "## Ready sweeps")


def test_every_command_is_in_the_conventions_table():
    table = (DOCS / "reference" / "conventions.md").read_text(encoding="utf-8")
    assert not [c for c in COMMANDS if f"`sweeper {c}" not in table]


def test_run_log_phrasing_stays_in_the_benchmark_pages_and_the_changelog():
    found = []
    for page in pages():
        if DOCS / "benchmarks" in page.parents:
            continue
        for number, line in enumerate(prose(page).splitlines(), start=1):
            for match in RUN_LOG.finditer(line):
                found.append(f"{page.relative_to(ROOT)}: {match.group(0)!r} in {line.strip()[:80]!r}")
    assert not found, "\n".join(found)


def test_the_run_log_check_finds_run_log_phrasing():
    for text in ("the former default", "it used to grow", "a 2-core VM at load average 20", "commit e47d45a",
                 "see b6f19c4 for", "the goal is 15; not met yet"):
        assert RUN_LOG.search(text), text
    for text in ("sha256-72dd1c415c712343", "a stale cache", "1e-3", "the fixed recipe", "deadbeef"):
        assert not RUN_LOG.search(text), text


BENCHMARKS = sorted(p for p in (DOCS / "benchmarks").glob("*.md") if p.name != "index.md")


@pytest.mark.parametrize("page", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_page_says_when_where_and_how(page):
    text = page.read_text(encoding="utf-8").lower()
    for word in ("measured", "commit", "machine", "command"):
        assert word in text, f"{page.name} does not say its {word}"
    assert re.search(r"20\d\d-\d\d-\d\d", text), f"{page.name} gives no date"
    assert re.search(r"\b[0-9a-f]{7}\b", text), f"{page.name} names no commit"
