"""`sweeper plots DIR --out OUT`: regenerate every figure of a sweep from its store."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import FORMATS, add_format, add_out
from sweeper.core.errors import UserError


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
    add_out(parser, "the folder to write into (created if missing)", required=True, metavar="DIR")
    parser.add_argument("--file-types", default=None, metavar="TYPES",
                        help="comma-separated: html, png, svg, pdf (default html,png)")
    parser.add_argument("--scale", type=float, default=2.0, help="pixel density of PNGs (default 2: print quality)")
    # --format: how the list of files written is printed; a list of file types there is the old spelling of --file-types
    parser.add_argument("--format", default="table", metavar="{table,json}",
                        help="how to print the files written: table or json (default table)")
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from dashboards.data import load_sweep
    from dashboards.export import STATIC_FORMATS, check_static_export, parse_formats, write_plots
    from sweeper.records.manifest import read_manifest

    read_manifest(args.dir)

    file_types = args.file_types
    if args.format not in FORMATS:  # `--format html,png`: how plots spelled --file-types before
        if file_types is not None:
            raise UserError(f"--format: expected one of {', '.join(FORMATS)} (got {args.format!r})")
        sys.stderr.write(f"warning: --format {args.format} is read as --file-types {args.format} (its old spelling)\n")
        file_types, args.format = args.format, "table"
    as_json = args.format == "json"
    formats = parse_formats(file_types or "html,png")
    if not 0.25 <= args.scale <= 8:
        raise UserError(f"--scale: must be between 0.25 and 8 (got {args.scale})")
    if any(f in STATIC_FORMATS for f in formats):
        check_static_export()
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")

    data = load_sweep(args.dir)
    paths = write_plots(data, out, formats, scale=args.scale)
    if as_json:
        print(json.dumps({"out": str(out), "files": [str(p) for p in paths]}, indent=2))
    else:
        print(f"wrote {len(paths)} files to {out} (open {out / 'index.html'})")
    return 0
