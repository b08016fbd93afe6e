"""`sweeper gamma PATH...`: the γ probe — how norm gains change with depth in trained checkpoints.

Reads the per-layer norm gains of each PATH (Hugging Face folders or weights files, this
project's exported members), computes magnitude trends, LayerRoPE's schedule fit and the
direction statistics (`sweeper.analysis.gamma.stats`), prints a table, and with `--out DIR` writes
`gamma.json` and the figure page `gamma.html` (offline: plotly.js is written beside it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from sweeper.commands.cliargs import add_format
from sweeper.core.errors import UserError
from sweeper.analysis.gamma.layouts import RULES, SITE_GROUPS

DESCRIPTION = """\
Measure how the per-layer norm gains γ of trained models change with depth.

PATH: a Hugging Face model folder (config.json + model.safetensors, sharded safetensors with
model.safetensors.index.json, or pytorch_model.bin[.index.json], loaded with weights_only);
a single .safetensors/.bin/.pt file; a folder exported by this project's trials
(config.json with "format": "layerrope-sweeper"), or any folder holding such exports (an
export_dir, a sweep's exports/, the sweep directory; --best keeps each cell's best member).

Known per-layer norm namings (first match per layer stack):
{rules}

Sites: attn_in / mlp_in (the norm feeding attention / the MLP) and attn_out / mlp_out (a norm
after the sublayer: Post-LN, or the output norms of Gemma 2/3 and OLMo-2). Gemma, RecurrentGemma
and Qwen3-Next store RMSNorm gains as w and scale by (1 + w): their gains are reported as 1 + w.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gamma",
        help="γ probe: depth trends of norm gains in checkpoints",
        description=DESCRIPTION.format(rules="\n".join(f"  - {rule.name}" for rule in RULES)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="checkpoint folder or weights file")
    parser.add_argument(
        "--site", choices=tuple(SITE_GROUPS), default="mlp",
        help="which sites: the MLP block's norms (default), the attention block's, or all",
    )
    parser.add_argument(
        "--best", action="store_true",
        help="for folders of this project's exports (a sweep directory, its exports/, an export_dir): "
        "keep per model configuration and seed only the member that finished ok with the lowest loss",
    )
    parser.add_argument("--out", metavar="DIR", help="write gamma.json and gamma.html (figures) here")
    add_format(parser)
    parser.set_defaults(func=run)


def _check_out(out: str | None) -> Path | None:
    if out is None:
        return None
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    return path


CONSOLE_COLUMNS = (
    "model", "site", "layers", "mean_first", "mean_last", "mean_spearman", "p99_spearman",
    "schedule_b", "schedule_r2", "mean_adjacent_cosine", "first_last_cosine", "arc_order",
)


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.4g}"
    return str(value)


def _print_table(results: dict[str, Any]) -> None:
    # start-up time: imported when used, not on every CLI start
    from rich.table import Table
    from rich.text import Text

    from sweeper.analysis.gamma.report import SUMMARY_COLUMNS, summary_rows
    from sweeper.records.table import make_console

    console = make_console(width=200)
    table = Table(title=f"γ probe — {results['site_group']} sites", show_lines=False)
    for key in CONSOLE_COLUMNS:
        table.add_column(SUMMARY_COLUMNS[key], justify="left" if key in ("model", "site") else "right",
                         overflow="fold", min_width=24 if key == "model" else None)
    for row in summary_rows(results):
        table.add_row(*(_fmt(row[key]) for key in CONSOLE_COLUMNS))
    console.print(table)
    for model in results["models"]:
        header = Text.assemble((str(model["name"]), "bold"),
                               f": {model['layout']}, {model['n_layers']} layers, gain = {model['gain_transform']}")
        console.print(header)
        for note in model["notes"]:
            console.print(f"  · {note}")


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from sweeper.analysis.gamma.checkpoints import check_path
    from sweeper.records.durable import write_text_atomic

    paths = [Path(p) for p in args.paths]
    for path in paths:
        check_path(path)
    out = _check_out(args.out)

    # start-up time: imported when used, not on every CLI start
    from sweeper.analysis.gamma.checkpoints import read_checkpoint
    from sweeper.analysis.gamma.report import analyze

    models = [model for path in paths for model in read_checkpoint(path, best=args.best)]
    results = analyze(models, args.site)
    if not any(m["sites"] for m in results["models"]):
        raise UserError(f"--site {args.site}: none of the models has such a site (see `sweeper gamma --help`)")

    if out is not None:
        # start-up time: imported when used, not on every CLI start
        from dashboards.gamma_figures import write_page

        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / "gamma.json", json.dumps(results))
        page = write_page(results, out)
    if args.json:
        json.dump(results, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print_table(results)
        if out is not None:
            print(f"wrote {out / 'gamma.json'} and {page}")
    return 0
