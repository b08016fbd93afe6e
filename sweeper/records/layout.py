"""Tables that fit the terminal they are printed to: the one table builder every command and the live
display use.

A table is declared as columns with priorities. `Col(keep=True)` marks a row's identity (method, size,
seed) or its answer (best LR, best loss): such a column is never dropped and never cut. The others are
dropped, lowest priority first (the highest `priority` number goes first; among equals the rightmost),
after the compact style (short headers, no frame or vertical rules) has been tried, until the table fits the width. When even the kept columns do
not fit, the table is printed as one record per block (`label: value` pairs wrapped at the width). A
footnote says which columns were left out and how to see them (`--wide`, a wider terminal, `--format json`).

Widths: rich's own measurement of the table (what it would print with no width limit). The width is
the console's: a terminal's own, `COLUMNS` when set, 100 columns when the output is a pipe or a file
(`make_console`). `--wide` prints every column at its natural width, whatever the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

HINT = "--wide or a wider terminal shows them; --format json has every field"
UNLIMITED = 100_000


@dataclass(frozen=True)
class Col:
    """One column: its header, whether it is a row's identity or answer (`keep`), and how soon it goes."""

    name: str
    keep: bool = False
    priority: int = 1
    justify: str = "right"
    short: str | None = None  # a shorter header, tried before any column is dropped


@dataclass
class Layout:
    """A table to print at some width: its title, columns, rows and caption."""

    title: str | None
    cols: Sequence[Col]
    caption: str | None = None
    hint: str = HINT
    style: dict[str, Any] = field(default_factory=dict)  # rich.table.Table options of the full-width table
    rows: list[list[Any]] = field(default_factory=list)
    sections: set[int] = field(default_factory=set)  # rows that start a new section (a rule above them)
    dropped: list[str] = field(default_factory=list)  # after `render`: the columns left out

    def add_row(self, *cells: Any, section: bool = False) -> None:
        """A row (one cell per column); `section`: a rule above it (the full-width table only)."""
        if len(cells) != len(self.cols):
            raise ValueError(f"{len(cells)} cells for {len(self.cols)} columns")
        if section and self.rows:
            self.sections.add(len(self.rows))
        self.rows.append(list(cells))

    def _table(self, shown: list[int], short: bool) -> Table:
        """The table with the `shown` columns; `short`: short headers and the compact style (no frame, no
        vertical rules, two spaces between columns), what a narrow terminal gets before losing columns."""
        compact = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "padding": (0, 1, 0, 0)} \
            if short else self.style
        table = Table(header_style="bold", **compact)  # type: ignore[arg-type]
        for i in shown:
            col = self.cols[i]
            table.add_column((col.short or col.name) if short else col.name, justify=col.justify,  # type: ignore[arg-type]
                             no_wrap=True)
        for n, row in enumerate(self.rows):
            if n in self.sections and not short:
                table.add_section()
            table.add_row(*(_cell(row[i]) for i in shown))
        return table

    def render(self, console: Console, *, wide: bool = False) -> list[RenderableType]:
        """What to print: the table (all its columns when `wide` or when they fit), or the table without its
        low-priority columns, or one block per row; and a footnote naming what was left out."""
        # The title and caption wrap at the console's width, not at a narrow table's.
        head = [Text(self.title, style="bold")] if self.title else []
        body, note = self._fit(console, wide)
        return head + body + ([Text(self.caption, style="dim")] if self.caption else []) + ([note] if note else [])

    def _fit(self, console: Console, wide: bool) -> tuple[list[RenderableType], Text | None]:
        """The table or the blocks, and the note on what was left out (None: nothing)."""
        every = list(range(len(self.cols)))
        self.dropped = []
        if wide:
            return [self._table(every, short=False)], None
        width = console.width
        shown = every
        table = self._table(shown, short=False)
        if _width(console, table) <= width:
            return [table], None
        table = self._table(shown, short=True)
        order = sorted((i for i in every if not self.cols[i].keep), key=lambda i: (-self.cols[i].priority, -i))
        for i in order:
            if _width(console, table) <= width:
                break
            shown = [j for j in shown if j != i]
            self.dropped.append(self.cols[i].name)
            table = self._table(shown, short=True)
        if _width(console, table) > width:  # even the identity and the answer do not fit side by side
            self.dropped = []
            return self._blocks(), self._note(width, blocks=True)
        self.dropped = [c.name for c in self.cols if c.name in self.dropped]  # in the table's order
        return [table], self._note(width) if self.dropped else None

    def _note(self, width: int, blocks: bool = False) -> Text:
        if blocks:
            return Text(f"one block per row: the table needs more than {width} columns (--wide prints it as a table)",
                        style="dim")
        return Text(f"not shown at {width} columns: {', '.join(self.dropped)} ({self.hint})", style="dim")

    def _blocks(self) -> list[RenderableType]:
        out: list[RenderableType] = []
        for row in self.rows:
            for kept in (True, False):  # the identity and answer first, the other columns indented below
                line = Text("" if kept else "  ")
                cells = [(col.name, _cell(row[i])) for i, col in enumerate(self.cols) if col.keep == kept]
                for n, (name, value) in enumerate(cells):
                    line.append(" · " if n else "")
                    line.append(f"{name}: ", style="dim")
                    line.append_text(value)
                if cells:
                    out.append(line)
        return out


def fitted(console: Console, layout: Layout, *, wide: bool = False) -> Group:
    """`layout` as one renderable fitted to `console` (a live display's, or part of a larger group)."""
    return Group(*layout.render(console, wide=wide))


def print_layout(console: Console, layout: Layout, *, wide: bool = False) -> list[str]:
    """Print `layout` to fit the console (every column when `wide`); returns the columns left out."""
    for part in layout.render(console, wide=wide):
        if wide and isinstance(part, Table):
            _widened(console, _width(console, part)).print(part)
        else:
            console.print(part, highlight=False)
    return layout.dropped


def _widened(console: Console, width: int) -> Console:
    """A console like `console` (same file, colours) at least `width` columns wide: rich never prints wider than
    its console, and `--wide` asks for the table's natural width (a terminal wraps what it cannot show)."""
    if width <= console.width:
        return console
    return Console(file=console.file, width=width, markup=False, color_system=console.color_system,
                   force_terminal=console.is_terminal, highlight=False)


def _cell(value: Any) -> Text:
    if isinstance(value, Text):
        return value
    return Text("" if value is None else str(value))


def _width(console: Console, table: Table) -> int:
    options = console.options.update_width(UNLIMITED)
    return Measurement.get(console, options, table).maximum
