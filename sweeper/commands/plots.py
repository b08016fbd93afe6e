"""`sweeper plots DIR --out OUT`: regenerate every figure of a sweep from its store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sweeper.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plots",
        help="write every figure of a sweep as HTML and images (identical on every run)",
        description=(
            "Regenerate every figure from the sweep's store and fits.json: loss against LR, status grid, "
            "best loss and optimal LR against size with their fits, learning curves, progress. The same "
            "store always gives the same bytes. HTML pages work offline (plotly.min.js is written beside "
            "them); PNG/SVG/PDF need kaleido and a Chrome or Chromium on the machine."
        ),
    )
    parser.add_argument("dir", help="the sweep directory")
    parser.add_argument("--out", required=True, help="the folder to write into (created if missing)")
    parser.add_argument("--format", default="html,png", help="comma-separated: html, png, svg, pdf (default html,png)")
    parser.add_argument("--scale", type=float, default=2.0, help="pixel density of PNGs (default 2: print quality)")
    parser.add_argument("--json", action="store_true", help="print the files written as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from dashboards.data import load_sweep
    from dashboards.export import STATIC_FORMATS, check_static_export, parse_formats, write_plots
    from sweeper.records.store import read_manifest

    read_manifest(args.dir)

    formats = parse_formats(args.format)
    if not 0.25 <= args.scale <= 8:
        raise UserError(f"--scale: must be between 0.25 and 8 (got {args.scale})")
    if any(f in STATIC_FORMATS for f in formats):
        check_static_export()
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")

    data = load_sweep(args.dir)
    paths = write_plots(data, out, formats, scale=args.scale)
    if args.json:
        print(json.dumps({"out": str(out), "files": [str(p) for p in paths]}, indent=2))
    else:
        print(f"wrote {len(paths)} files to {out} (open {out / 'index.html'})")
    return 0
