"""Links: the site builds with `mkdocs build --strict` (every link and anchor between its pages resolves,
every page is in the navigation), and every link of the README resolves to a file of the checkout and,
for `#anchors`, to a heading of that file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.docs.pages import README, ROOT, anchors, links


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]') is not installed")
    pytest.importorskip("material", reason="the docs extra (pip install -e '.[docs]') is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "sweep-yaml" / "index.html").exists()


def test_every_readme_link_resolves():
    checked = 0
    for target in links(README):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        path = (README.parent / file).resolve() if file else README
        assert path.exists(), f"README links to {target}: no such file"
        assert ROOT in path.parents or path == ROOT, f"README links outside the checkout: {target}"
        if anchor:
            assert path.suffix == ".md", f"README links to an anchor of a non-Markdown file: {target}"
            assert anchor in anchors(path), f"README links to {target}: {path.name} has no heading with that anchor"
        checked += 1
    assert checked >= 10  # the README links its pages; a parsing slip would check nothing
