"""`sweeper plots`: every figure from the store, the same bytes on every run, and a clear
exit-2 message when static export cannot work."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import figures


def plots(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.cli", "plots", *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})  # fmt: skip


def tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_html_plots_are_byte_identical_on_every_run_and_work_offline(finished_dir, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        result = plots(str(finished_dir), "--out", str(out), "--file-types", "html")
        assert result.returncode == 0, result.stderr
    a, b = tree(first), tree(second)
    assert a == b
    assert set(a) == {f"{name}.html" for name in figures.FIGURES} | {"plotly.min.js", "index.html"}
    assert f"wrote {len(b)} files to {second}" in result.stdout  # the count names every file, plotly.min.js too
    for name in figures.FIGURES:
        page = a[f"{name}.html"].decode()
        assert f'id="sweeper-{name}"' in page
        assert '<script charset="utf-8" src="plotly.min.js"></script>' in page  # beside the page, no CDN
        assert "cdn.plot.ly" not in page
    assert b"Learning curves" in a["index.html"]


@pytest.mark.browser  # kaleido drives the system Chromium
@pytest.mark.slow
def test_png_plots_of_every_figure_at_print_resolution(finished, finished_dir, tmp_path):
    out = tmp_path / "png"
    result = plots(str(finished_dir), "--out", str(out), "--file-types", "png")
    assert result.returncode == 0, result.stderr
    for name, spec in figures.all_figures(finished).items():
        png = (out / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", png[16:24])
        assert (width, height) == (2 * figures.STATIC_WIDTH, 2 * spec["layout"]["height"])
    assert b'src="status.png"' in (out / "index.html").read_bytes()


@pytest.mark.browser
@pytest.mark.slow
def test_static_renderings_are_byte_identical_on_every_run(finished, tmp_path):
    from dashboards.export import write_static

    spec = figures.status_grid(finished)
    paths = write_static({"first": spec, "second": spec}, tmp_path, ["png", "svg", "pdf"])
    by_name = {p.name: p.read_bytes() for p in paths}
    for fmt in ("png", "svg", "pdf"):
        assert by_name[f"first.{fmt}"] == by_name[f"second.{fmt}"], fmt  # two renderings, one result
    assert by_name["first.svg"].startswith(b"<svg") and b'id="defs-fig"' in by_name["first.svg"]
    assert by_name["first.pdf"].startswith(b"%PDF") and b"(D:20000101000000" in by_name["first.pdf"]


def test_without_chrome_static_formats_exit_2_naming_what_to_install(finished_dir, tmp_path):
    out = tmp_path / "out"
    result = plots(
        str(finished_dir), "--out", str(out), "--file-types", "html,png", env={"BROWSER_PATH": str(tmp_path / "no-chrome")}
    )
    assert result.returncode == 2
    assert "apt install chromium" in result.stderr and "plotly_get_chrome" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()  # nothing written


@pytest.mark.parametrize(
    "args, message",
    [
        (["--file-types", "html,gif"], "unknown format 'gif'"),
        (["--file-types", ","], "--file-types: empty"),
        (["--scale", "0"], "--scale"),
    ],
)
def test_bad_arguments_exit_2(finished_dir, tmp_path, args, message):
    result = plots(str(finished_dir), "--out", str(tmp_path / "o"), *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_bad_directories_exit_2(tmp_path, finished_dir):
    assert "no such directory" in plots(str(tmp_path / "nope"), "--out", str(tmp_path / "o")).stderr
    target = tmp_path / "file"
    target.write_text("x")
    result = plots(str(finished_dir), "--out", str(target), "--file-types", "html")
    assert result.returncode == 2 and "not a directory" in result.stderr
