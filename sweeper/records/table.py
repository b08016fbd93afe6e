"""The per-cell table that `sweeper launch` shows live and `sweeper status` shows later, and the
console both print to."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sweeper.core.rows import cell_order
from sweeper.core.states import CellStatus
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


def cells_table(rows: Iterable[dict[str, Any]], *, progress: dict[str, str] | None = None, title: str | None = None) -> Table:
    """One row per cell: status, points finished / running / diverged / stalled, grid best and interpolated optimum."""
    table = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name, justify in (("method", "left"), ("size", "left"), ("seed", "right"), ("status", "left"),
                          ("done", "right"), ("run", "right"), ("div", "right"), ("stall", "right"),
                          ("best lr", "right"), ("best objective", "right"), ("interp lr", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    if progress is not None:
        table.add_column("progress", justify="left", no_wrap=True)
    for row in sorted(rows, key=cell_order):
        status = str(row.get("status") or "pending")
        cells = [
            str(row.get("method")), str(row.get("size")), str(row.get("seed")),
            Text(status, style=STATUS_STYLE.get(status, "")),
            str(row.get("n_points") or 0), str(row.get("n_running") or 0), str(row.get("n_diverged") or 0),
            Text(str(row.get("n_stalled") or 0), style="magenta" if row.get("n_stalled") else ""),
            fmt(row.get("best_lr"), ".3g"), fmt(row.get("best_objective"), ".4f"), fmt(row.get("interp_lr"), ".3g"),
        ]
        if progress is not None:
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


def unigram_line(manifest: Manifest) -> str | None:
    """The manifest's frequency-only loss of the data, and how it was obtained (None: not known yet)."""
    u = manifest.unigram_entropy
    if u is None or u.nats is None:
        return None
    kind = "class-frequency entropy (chance)" if u.kind == "classes" else "unigram entropy"
    unit = "training labels" if u.kind == "classes" else "training tokens"
    counted = u.counted
    how = (f"exact, {counted:,} {unit}" if u.exact else f"estimated from the first {counted:,} {unit}") \
        if isinstance(counted, int) else str(u.how or "")
    line = f"data: {kind} {float(u.nats):.4f} nats ({how})"
    margin = manifest.stall_margin
    if margin is not None:
        line += f"; a point is stalled unless its final eval loss is {margin:g} nats below the frequency-only loss"
    elif manifest.has("stall_margin"):
        line += "; stall rule off (divergence.stall_margin: null)"
    return line


def make_console(*, stderr: bool = False, width: int = 160) -> Console:
    """The console every command prints through: `width` columns when output goes to a file or a
    pipe (tables stay readable), and rich markup off, so that every string prints as written: a
    warning about the `[hf]` extra, an interval `[0.1, 0.2]`, a name like `[bold]` keep their
    brackets. Styles come from `style=` and `rich.text.Text` (`labelled`), never from markup."""
    probe = Console(stderr=stderr, markup=False)
    return probe if probe.is_terminal else Console(stderr=stderr, width=width, markup=False)


def labelled(label: str, text: str, style: str = "yellow") -> Text:
    """`label text` with the label styled (e.g. a yellow `warning:`); the text printed as written."""
    return Text.assemble((label, style), " ", text)
