"""Printing for the CLI: rich tables for people, JSON for scripts.

Tables fold long cells onto several lines instead of cutting them with an ellipsis: a
payment id or a client id cut short in an 80-column terminal is an id that cannot be
copied.  Secrets (a new API key) are never put in a table at all: ``print_secret`` writes
them alone on a line, whole, however narrow the terminal.

One rule for narrow terminals (decision 0096), applied by ``print_table`` to every table
whose command marks some columns as extras: when the table's natural width exceeds the
terminal, extra columns are hidden, the last listed first, until every row fits on one
line; the caption names what was hidden and that ``--wide`` (every column at its full
width, wider than the terminal if need be) or ``--json`` shows it.  Id columns are never
hidden, folded or cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

_UNBOUNDED = 100_000

console = Console()
errors = Console(stderr=True)

# The flag of every list command whose table hides extras (one wording, one behaviour).
WideFlag = Annotated[
    bool, typer.Option("--wide", help="Every column, however narrow the terminal.")
]


@dataclass(frozen=True)
class Column:
    """A table column.  ``id``: an identifier someone copies, shown whole on one line
    (never folded, never hidden).  ``extra``: hidden first when the terminal is narrow."""

    name: str
    id: bool = False
    extra: bool = False


def print_json(data: Any) -> None:
    # Plain print: rich would wrap long lines and break the JSON for a pipe.
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_secret(value: str) -> None:
    """A secret on its own line of stdout, never wrapped, cut or styled."""
    print(value, flush=True)


def print_table(
    title: str,
    columns: Sequence[str | Column],
    rows: Sequence[Sequence[Any]],
    *,
    wide: bool = False,
) -> None:
    """Print ``rows`` under ``columns``; narrow terminals hide extras (see the module)."""
    specs = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    shown = list(range(len(specs)))
    hidden: list[str] = []
    if not wide:
        # Hide extras from the right until the natural (unfolded) width fits.
        for index in reversed(range(len(specs))):
            if _natural_width(specs, cells, shown) <= console.width:
                break
            if specs[index].extra:
                shown.remove(index)
                hidden.insert(0, specs[index].name)
    table = _table(title, specs, cells, shown)
    if hidden:
        table.caption = f"hidden here: {', '.join(hidden)} (--wide or --json shows them)"
    if wide:
        # Every column at its full width, one line per row even when that is wider than
        # the terminal (like `kubectl get -o wide`; `less -S` scrolls it): folding twelve
        # columns into 80 made 4-character slivers, and cut ids.
        natural = _natural_width(specs, cells, shown)
        Console(width=max(console.width, natural)).print(table)
        return
    console.print(table)


def _natural_width(specs: Sequence[Column], cells: list[list[str]], shown: list[int]) -> int:
    table = _table(None, specs, cells, shown)
    # Measured as if the terminal had no edge: rich clamps a measurement to the width it
    # is given, and the question is how wide the table wants to be.
    unbounded = console.options.update_width(_UNBOUNDED)
    return Measurement.get(console, unbounded, table).maximum


def _table(
    title: str | None, specs: Sequence[Column], cells: list[list[str]], shown: list[int]
) -> Table:
    table = Table(title=title)
    for index in shown:
        spec = specs[index]
        # An id keeps its whole width (min_width) on one line; rich folds the other
        # columns first when space runs out.  fold: wrap inside a long token rather than
        # replace its end with an ellipsis.
        widest = max((len(row[index]) for row in cells), default=0)
        table.add_column(
            spec.name,
            overflow="fold",
            no_wrap=spec.id,
            min_width=max(widest, len(spec.name)) if spec.id else None,
        )
    for row in cells:
        table.add_row(*(row[index] for index in shown))
    return table
