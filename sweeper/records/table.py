"""The per-cell table that `sweeper launch` shows live and `sweeper status` shows later, and the
console both print to."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from sweeper.core.rows import cell_order
from sweeper.core.states import CellStatus
from sweeper.records.layout import Col, Layout
from sweeper.records.manifest import Manifest

STATUS_STYLE = {
    "pending": "dim",
    "running": "yellow",
    "bracketed": "green",
    "edge": "magenta",
    "diverged": "red",
    "stalled": "bold magenta",
    "failed": "bold red",
    "fixed": "cyan",
    "infra_failed": "bold yellow",
}


def fmt(value: Any, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec)


def cells_table(rows: Iterable[dict[str, Any]], *, progress: dict[str, str] | None = None,
                title: str | None = None) -> Layout:
    """One row per cell: status, points finished / running / diverged / stalled (and failed / infra_failed when
    the rows carry them and some cell has one), grid best and interpolated optimum; a `progress` column when
    some cell has a running or queued point (never an always-empty column for a finished sweep). A `Layout`:
    it fits the console it is printed to (`sweeper.records.layout`)."""
    rows = sorted(rows, key=cell_order)
    progress = {k: v for k, v in (progress or {}).items() if v}
    failed = any(row.get("n_failed") or row.get("n_infra_failed") for row in rows)
    shown_progress = any(str(row.get("cell_id")) in progress for row in rows)
    cols = [
        Col("method", keep=True, justify="left"), Col("size", keep=True, justify="left"), Col("seed", keep=True),
        Col("status", priority=1, justify="left"), Col("points", priority=2, short="pts"),
        Col("running", priority=3, short="run"), Col("diverged", priority=2, short="div"),
        Col("stalled", priority=2, short="stall"),
        *([Col("failed", priority=4, short="fail"), Col("infra_failed", priority=4, short="infra")] if failed else []),
        Col("best lr", keep=True), Col("best objective", keep=True, short="best obj"),
        Col("interp lr", priority=3), *([Col("progress", priority=2, justify="left")] if shown_progress else []),
    ]
    table = Layout(title, cols)
    for row in rows:
        status = str(row.get("status") or "pending")
        cells: list[Any] = [
            str(row.get("method")), str(row.get("size")), str(row.get("seed")),
            Text(status, style=STATUS_STYLE.get(status, "")),
            str(row.get("n_points") or 0), str(row.get("n_running") or 0), str(row.get("n_diverged") or 0),
            Text(str(row.get("n_stalled") or 0), style="magenta" if row.get("n_stalled") else ""),
            *([str(row.get("n_failed") or 0), str(row.get("n_infra_failed") or 0)] if failed else []),
            fmt(row.get("best_lr"), ".3g"), fmt(row.get("best_objective"), ".4f"), fmt(row.get("interp_lr"), ".3g"),
        ]
        if shown_progress:
            cells.append(progress.get(str(row.get("cell_id")), ""))
        table.add_row(*cells)
    return table


def status_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        status = str(row.get("status") or "pending")
        out[status] = out.get(status, 0) + 1
    return out


def counts_line(counts: dict[str, int]) -> str:
    order = [CellStatus.BRACKETED, CellStatus.FIXED, CellStatus.RUNNING, CellStatus.PENDING, CellStatus.EDGE,
             CellStatus.DIVERGED, CellStatus.STALLED, CellStatus.FAILED, CellStatus.INFRA_FAILED]
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    return ", ".join(parts) if parts else "no cells"


def unigram_line(manifest: Manifest, baselines: Sequence[float] = ()) -> str | None:
    """The stall baseline as the trials used it (`baselines`: the points' frequency-only losses on their eval
    batches, `unigram_loss`), then the data's entropy from the manifest for reference (None: neither known)."""
    u = manifest.unigram_entropy
    margin = manifest.stall_margin
    parts = []
    if baselines:
        lo, hi = min(baselines), max(baselines)
        value = f"{lo:.4f}" if round(lo, 4) == round(hi, 4) else f"{lo:.4f} to {hi:.4f}"
        parts.append(f"stall baseline: frequency-only loss {value} nats on the eval batches")
    if u is not None and u.nats is not None:
        kind = "class-frequency entropy (chance)" if u.kind == "classes" else "unigram entropy"
        unit = "training labels" if u.kind == "classes" else "training tokens"
        counted = u.counted
        how = (f"exact, {counted:,} {unit}" if u.exact else f"estimated from the first {counted:,} {unit}") \
            if isinstance(counted, int) else str(u.how or "")
        parts.append(f"data: {kind} {float(u.nats):.4f} nats ({how})")
    if not parts:
        return None
    line = "; ".join(parts)
    if margin is not None:
        line += f"; a point is stalled unless its final eval loss is {margin:g} nats below the frequency-only loss"
        line += " on its eval batches" if not baselines else ""
    elif manifest.has("stall_margin"):
        line += "; stall rule off (divergence.stall_margin: null)"
    return line


PIPE_WIDTH = 100  # columns when the output is a pipe or a file and COLUMNS is not set


def make_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """The console every command prints through: a terminal's own width, `COLUMNS` when set (rich reads it),
    else 100 columns when output goes to a pipe or a file (`sweeper fit DIR | less` reads like the terminal;
    `--format json` or csv is the machine-readable output; `width` replaces the 100), and rich markup off, so that every string
    prints as written: a warning about the `[hf]` extra, an interval `[0.1, 0.2]`, a name like `[bold]` keep
    their brackets. Styles come from `style=` and `rich.text.Text` (`labelled`), never from markup."""
    import os  # start-up time: the CLI imports this module late

    probe = Console(stderr=stderr, markup=False)
    if probe.is_terminal:
        return probe
    columns = os.environ.get("COLUMNS", "")
    pipe = int(columns) if columns.isdigit() and int(columns) > 0 else (width or PIPE_WIDTH)
    return Console(stderr=stderr, width=pipe, markup=False)


def labelled(label: str, text: str, style: str = "yellow") -> Text:
    """`label text` with the label styled (e.g. a yellow `warning:`); the text printed as written."""
    return Text.assemble((label, style), " ", text)
