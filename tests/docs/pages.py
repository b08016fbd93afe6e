"""The README and the documentation pages as the docs tests read them: code blocks (with the snippet
marker on the line before), inline code, links, headings and their anchors. Standard library only."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
GENERATED = (DOCS / "reference" / "sweep-yaml.md", DOCS / "reference" / "cli.md")
MARKER = re.compile(r"<!--\s*snippet:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```(\w*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str | None  # the `<!-- snippet: ... -->` on the line before, if any

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages(*, readme: bool = True, generated: bool = True) -> list[Path]:
    """README.md and every Markdown page of the site."""
    found = sorted(DOCS.rglob("*.md"))
    if not generated:
        found = [p for p in found if p not in GENERATED]
    return ([README] if readme else []) + found


def blocks(path: Path) -> list[Block]:
    """Every fenced code block of a page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, lang = match.groups()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        marker = MARKER.search(lines[i - 1]) if i > 0 else None
        out.append(Block(path, i + 1, lang, "\n".join(body) + "\n", marker.group(1) if marker else None))
        i = j + 1
    return out


def prose(path: Path) -> str:
    """A page without its fenced code blocks and HTML comments."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"(?ms)^\s*```.*?^\s*```", "", text)
    return re.sub(r"(?s)<!--.*?-->", "", text)


def inline_code(path: Path) -> list[str]:
    """Every inline code span outside fenced blocks."""
    return re.findall(r"`([^`\n]+)`", prose(path))


def links(path: Path) -> list[str]:
    """Every Markdown link or image target outside code."""
    text = re.sub(r"`[^`\n]*`", "", prose(path))
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"`", "", heading)
    text = re.sub(r"\{#[^}]*\}\s*$", "", text).strip()
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (lower case, punctuation dropped, spaces to hyphens)."""
    text = re.sub(r"\{#[^}]*\}\s*$", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings, under both MkDocs' and GitHub's rules, and explicit `{#id}`s."""
    found: set[str] = set()
    for heading in re.findall(r"(?m)^#{1,6} (.*)$", prose(path)):
        found |= {slug(heading), github_slug(heading)}
        explicit = re.search(r"\{#([^}]*)\}\s*$", heading)
        if explicit:
            found.add(explicit.group(1))
    return found


def squeeze(text: str) -> str:
    """Whitespace collapsed to single spaces (output wrapped at a terminal's width reads as one line)."""
    return " ".join(text.split())
