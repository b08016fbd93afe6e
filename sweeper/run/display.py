"""What `sweeper launch` shows while it runs: a live per-cell table on a terminal, plain
lines (cell status changes and notable events) otherwise (logs, CI)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from sweeper.core.states import PointState
from sweeper.records.layout import fitted
from sweeper.records.table import cells_table, counts_line, make_console, status_counts
from sweeper.run.sweep_run import SweepRun

REFRESH_SECONDS = 0.5


def cell_progress(sweep: SweepRun) -> dict[str, str]:
    """'step 120/300 ×5' for cells with running points."""
    book = sweep.book
    out = {}
    for cid, cell in book.cells.items():
        running = [r for r in book.points[cid].values() if r.state is PointState.RUNNING]
        if running:
            step = max(r.steps for r in running)
            out[cid] = f"step {step}/{cell.steps_per_point} ×{len(running)}"
        elif book.queue.get(cid):
            out[cid] = f"{len(book.queue[cid])} queued"
        elif cid in book.waiting:
            out[cid] = book.waiting[cid]
    return out


class LiveDisplay:
    def __init__(self, sweep: SweepRun, console: Console | None = None) -> None:
        self.sweep = sweep
        self.console = console or make_console()
        self.tty = self.console.is_terminal
        self._live: Live | None = None
        self._last = 0.0
        self._messages_seen = 0
        self._statuses: dict[str, str] = {}
        self._started = time.time()

    def render(self) -> Group:
        rows = [r.columns() for r in self.sweep.cell_rows() if r.cell.cell_id in self.sweep.cells]
        elapsed = time.time() - self._started
        header = Text(
            f"{self.sweep.plan.config.name}: {counts_line(status_counts(rows))} · {elapsed:.0f} s · "
            f"training {self.sweep.stats.train_seconds:.0f} s summed",
            style="bold",
        )
        return Group(header, fitted(self.console, cells_table(rows, progress=cell_progress(self.sweep))))

    def __enter__(self) -> "LiveDisplay":
        if self.tty:
            self._live = Live(self.render(), console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        self._statuses = {cid: self.sweep.status(cid) for cid in self.sweep.cells}
        return self

    def update(self, sweep: Any = None, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last < REFRESH_SECONDS:
            return
        self._last = now
        messages = self.sweep.messages[self._messages_seen:]
        self._messages_seen += len(messages)
        lines = [f"· {m}" for m in messages]
        for cid in self.sweep.cells:
            status = self.sweep.status(cid)
            if status != self._statuses.get(cid):
                self._statuses[cid] = status
                d = self.sweep.book.decisions.get(cid)
                extra = ""
                if d is not None and d.best is not None and d.done:
                    extra = f": best lr {d.best.lr:.3g} loss {d.best.objective:.4f}"
                    if d.interp_lr:
                        extra += f", interpolated {d.interp_lr:.3g}"
                elif d is not None and d.done and d.reason:
                    extra = f": {d.reason}"
                lines.append(f"{cid} → {status}{extra}")
        if self._live is not None:
            for line in lines:
                self._live.console.print(line, highlight=False)
            self._live.update(self.render(), refresh=True)
        else:
            for line in lines:
                self.console.print(line, highlight=False, soft_wrap=True)

    def __exit__(self, *exc: Any) -> None:
        self.update(force=True)
        if self._live is not None:
            self._live.stop()
