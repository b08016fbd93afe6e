"""`sweeper models [--json]`: the named model sizes with exact parameter counts and training FLOPs per token.

Counts come from `models.count_params` / `models.flops_per_token`, computed from the configuration
(no torch import, so the listing is instant); a scheme changes only the norm-gain parameters, so
the listing is for one scheme at a time (`--scheme`, default `pre`). Also lists the registered
normalization schemes and their options.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from sweeper.commands.cliargs import add_format, add_wide
from sweeper.core.errors import UserError


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be >= 1")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "models",
        help="named model sizes: exact parameter counts (total, non-embedding) and training FLOPs per token",
        description=(
            "List every named model configuration (the depth ladder w128-L48..L512, the width ladder "
            "58M..1.3B, tiny CPU sizes) with exact parameter counts and training FLOPs per token "
            "(6*N_matmul + 12*L*T*d; see models/counting.py), and the registered normalization schemes."
        ),
    )
    parser.add_argument("--scheme", default="pre", help="count the norm gains of this scheme (default: pre)")
    parser.add_argument("--seq-len", type=_positive_int, default=None, metavar="T",
                        help="sequence length for the attention FLOPs (default: each config's seq_len, 256)")
    add_format(parser)
    add_wide(parser)
    parser.set_defaults(func=run)


def collect(scheme: str, seq_len: int | None) -> dict[str, Any]:
    # Here, not at the top: the CLI imports every command module when it starts (`sweeper validate`'s speed).
    from models import count_params, flops_per_token, named_configs
    from models.family import family_of
    from models.named import ladder_of
    from models.registry import get_scheme, scheme_names

    try:
        get_scheme(scheme)
    except ValueError as exc:
        raise UserError(f"--scheme: {exc}") from None
    rows = []
    for name, base in named_configs().items():
        cfg = replace(base, scheme=scheme)
        counts, family = count_params(cfg), family_of(cfg)
        rows.append({
            "name": name, "ladder": ladder_of(name), "family": cfg.family, "blocks": family.blocks_label(cfg),
            "width": cfg.width, "n_heads": cfg.n_heads, "depth": cfg.depth, "mlp_hidden": family.mlp_hidden(cfg),
            # an image fixes a ViT's tokens per sample: --seq-len is for the language models
            "vocab": cfg.vocab, "seq_len": seq_len if seq_len is not None and family.data_kind == "tokens" else cfg.seq_len,
            "params": counts["total"], "params_nonembed": counts["nonembed"], "params_matmul": counts["matmul"],
            "flops_per_token": flops_per_token(cfg, seq_len),
        })
    schemes = []
    for name in scheme_names():
        cls = get_scheme(name)
        schemes.append({"name": name, "description": cls(1).describe(), "options": dict(cls.defaults)})
    return {"scheme": scheme, "configs": rows, "schemes": schemes,
            "flops_definition": "training FLOPs per token per model: 6*N_matmul (all parameter matmuls incl. the "
                                "LM head, not the embedding lookup) + 12*L*T*d (attention QK^T and AV, full TxT)"}


def _short(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.4g}{unit}"
    return f"{value:g}"


def run(args: argparse.Namespace) -> int:
    data = collect(args.scheme, args.seq_len)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    # start-up time: imported when used, not on every CLI start
    from rich import box
    from rich.table import Table

    from sweeper.records.layout import Col, Layout, print_layout
    from sweeper.records.table import make_console

    console = make_console()
    table = Layout(f"Named model sizes: scheme {data['scheme']}, exact counts per model", [
        Col("name", keep=True, justify="left"), Col("d/heads", priority=2), Col("L", priority=2),
        Col("MLP", priority=4), Col("V", priority=3), Col("T", priority=3), Col("params", keep=True),
        Col("non-embed", keep=True), Col("FLOPs/tok", priority=2)],
        style={"box": box.SIMPLE_HEAD, "padding": (0, 0), "pad_edge": False}, hint="--wide or a wider terminal shows "
        "them; --format json has every field")
    previous = None
    for row in data["configs"]:
        table.add_row(
            row["name"], f"{row['width']}/{row['n_heads']}", row["blocks"], str(row["mlp_hidden"]), str(row["vocab"]),
            str(row["seq_len"]), f"{row['params']:,}", f"{row['params_nonembed']:,}", _short(row["flops_per_token"]),
            section=previous is not None and row["ladder"] != previous,
        )
        previous = row["ladder"]
    print_layout(console, table, wide=args.wide)
    console.print(f"{data['flops_definition']}; non-embed excludes the input embedding and the LM head; "
                  "V vocabulary, T sequence length.", style="dim")
    console.print("looped (parcae-*): L = prelude/core/coda blocks, FLOPs at the mean training loop count with "
                  "backprop through the last k loops; *-gpt is the non-looped baseline of the same blocks. "
                  "vit: V classes, T tokens per image (patches + class token), FLOPs per token "
                  "(see models/families/).", style="dim")
    schemes = Table(title="Normalization schemes (options go in scheme_options)", box=box.SIMPLE_HEAD, padding=(0, 1))
    schemes.add_column("scheme")
    schemes.add_column("wiring")
    schemes.add_column("options (defaults)")
    for scheme in data["schemes"]:
        options = ", ".join(f"{k}={v}" for k, v in scheme["options"].items()) or "-"
        schemes.add_row(scheme["name"], scheme["description"], options)
    console.print(schemes)
    return 0
