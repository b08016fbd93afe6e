"""`sweeper plots`: every figure of a sweep written as HTML and static images, identical
bytes on every run.

HTML pages use the plotly.js of the installed plotly package, written once beside them
(`plotly.min.js`), so they open offline; each page's div id is fixed and every trace has a
stable uid, so the same store gives the same bytes. PNG, SVG and PDF go through kaleido,
which drives a Chrome/Chromium found on the machine; Chromium's random SVG element ids and
the PDF creation date are replaced by fixed values afterwards, so those are reproducible
too. Figures are drawn at a fixed publication width (`figures.STATIC_WIDTH`).
"""

from __future__ import annotations

import html
import os
import re
import shutil
from pathlib import Path
from typing import Any

from dashboards import figures
from dashboards.data import SweepData
from sweeper.core.errors import UserError

FORMATS = ("html", "png", "svg", "pdf")
STATIC_FORMATS = ("png", "svg", "pdf")
INSTALL_CHROME = (
    "install one: `apt install chromium` (Debian/Ubuntu), or `plotly_get_chrome` (downloads Chrome for kaleido), "
    "or point BROWSER_PATH at a Chrome/Chromium executable; or ask only for --format html"
)
HTML_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"format": "png", "scale": 2}}


def parse_formats(text: str) -> list[str]:
    chosen = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not chosen:
        raise UserError(f"--file-types: empty (choose from {', '.join(FORMATS)})")
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown:
        raise UserError(f"--file-types: unknown format {unknown[0]!r} (choose from {', '.join(FORMATS)}, comma-separated)")
    return sorted(set(chosen), key=FORMATS.index)


def find_chrome() -> str | None:
    """The Chrome/Chromium kaleido would drive, or None. BROWSER_PATH wins when set."""
    override = os.environ.get("BROWSER_PATH")
    if override:
        return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    try:
        from choreographer.browsers.chromium import Chromium

        found = Chromium.find_browser(skip_local=False)
    except Exception:  # an internal API of kaleido's browser driver: fall back to PATH
        found = None
    if not found:
        for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
            found = shutil.which(name)
            if found:
                break
    return found if found and os.path.isfile(found) and os.access(found, os.X_OK) else None


def check_static_export() -> str:
    """The browser path, or a UserError naming what to install."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise UserError(
            "static formats need kaleido: `pip install 'layerrope-sweeper[export]'` (or ask only for --format html)"
        ) from None
    chrome = find_chrome()
    if chrome is None:
        where = os.environ.get("BROWSER_PATH")
        detail = f"BROWSER_PATH={where} is not an executable" if where else "none found on this machine"
        raise UserError(
            f"static formats (png, svg, pdf) need Chrome or Chromium for kaleido: {detail}; {INSTALL_CHROME}"
        )
    return chrome


def _normalise_svg(text: str) -> str:
    """Replace the random id plotly.js gives each rendering with a fixed one."""
    match = re.search(r'<defs id="defs-([0-9a-z]+)"', text)
    if not match:
        return text
    return re.sub(r"(clip|legend|defs-)" + re.escape(match.group(1)), r"\1fig", text)


_PDF_DATE = re.compile(rb"/(CreationDate|ModDate) ?\(D:[0-9]{14}[^)]*\)")


def _normalise_pdf(raw: bytes) -> bytes:
    """Fixed creation/modification dates, of the same length (the xref offsets stay valid)."""

    def fixed(match: re.Match[bytes]) -> bytes:
        text = match.group(0)
        start = text.index(b"(D:") + 3
        return text[:start] + b"20000101000000" + text[start + 14 :]

    return _PDF_DATE.sub(fixed, raw)


def _index_page(name: str, written: dict[str, list[str]]) -> str:
    title = html.escape(name)
    rows = []
    for fig, (fig_title, _) in figures.FIGURES.items():
        links = " · ".join(
            f'<a href="{html.escape(f)}">{html.escape(f.rsplit(".", 1)[-1])}</a>' for f in written.get(fig, [])
        )
        preview = next((f for f in written.get(fig, []) if f.endswith((".png", ".svg"))), None)
        image = f'<br><img src="{html.escape(preview)}" alt="{html.escape(fig_title)}" width="900">' if preview else ""
        rows.append(f"<section><h2>{html.escape(fig_title)}</h2><p>{links}</p>{image}</section>")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}: plots</title>"
        "<style>body{font-family:Arial,Helvetica,sans-serif;margin:2rem;color:#222}h2{font-size:1.1rem}</style>"
        f"</head><body><h1>{title}</h1>\n" + "\n".join(rows) + "\n</body></html>\n"
    )


def write_static(specs: dict[str, Any], out: Path, formats: list[str], *, scale: float = 2.0) -> list[Path]:
    """`out/<name>.<format>` for every figure dict and static format, in one kaleido session,
    with Chromium's random SVG ids and PDF dates replaced by fixed values."""
    import plotly.io as pio  # slow to import: only when writing files (`sweeper plots`)

    figs: list[Any] = []
    targets: list[Path] = []
    fmts: list[str] = []
    heights: list[int] = []
    for name, spec in specs.items():
        for fmt in formats:
            figs.append(figures.to_figure(spec))
            targets.append(out / f"{name}.{fmt}")
            fmts.append(fmt)
            heights.append(int(spec["layout"].get("height") or 500))
    try:
        pio.write_images(figs, targets, format=fmts, width=figures.STATIC_WIDTH, height=heights,
                         scale=[scale if f == "png" else 1 for f in fmts])  # fmt: skip
    except Exception as exc:  # kaleido's browser failed to start or render
        raise UserError(f"static export failed ({type(exc).__name__}: {exc}); {INSTALL_CHROME}") from None
    for path, fmt in zip(targets, fmts):
        if fmt == "svg":
            path.write_text(_normalise_svg(path.read_text(encoding="utf-8")), encoding="utf-8")
        elif fmt == "pdf":
            path.write_bytes(_normalise_pdf(path.read_bytes()))
    return targets


def write_plots(data: SweepData, out: Path, formats: list[str], *, scale: float = 2.0) -> list[Path]:
    """Every figure of `data` in every format under `out`; returns the files written."""
    static = [f for f in formats if f in STATIC_FORMATS]
    if static:
        check_static_export()  # before anything is written
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    import plotly.io as pio  # (see write_static)

    specs = figures.all_figures(data)
    written: dict[str, list[str]] = {}
    paths: list[Path] = []
    for name, spec in specs.items():
        fig = figures.to_figure(spec)
        if "html" in formats:
            path = out / f"{name}.html"
            pio.write_html(fig, path, include_plotlyjs="directory", full_html=True, div_id=f"sweeper-{name}",
                           config=HTML_CONFIG, validate=True)  # fmt: skip
            written.setdefault(name, []).append(path.name)
            paths.append(path)
    if "html" in formats and (out / "plotly.min.js").is_file():
        paths.append(out / "plotly.min.js")  # written by include_plotlyjs="directory": the pages open offline
    if static:
        for path in write_static(specs, out, static, scale=scale):
            written.setdefault(path.stem, []).append(path.name)
            paths.append(path)
    index = out / "index.html"
    index.write_text(_index_page(data.name, written), encoding="utf-8")
    paths.append(index)
    return paths
