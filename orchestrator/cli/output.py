"""Printing for the CLI: rich tables for people, JSON for scripts.

Tables fold long cells onto several lines instead of cutting them with an ellipsis: a
payment id or a client id cut short in an 80-column terminal is an id that cannot be
copied.  Secrets (a new API key) are never put in a table at all: ``print_secret`` writes
them alone on a line, whole, however narrow the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True)


def print_json(data: Any) -> None:
    # Plain print: rich would wrap long lines and break the JSON for a pipe.
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_secret(value: str) -> None:
    """A secret on its own line of stdout, never wrapped, cut or styled."""
    print(value, flush=True)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title)
    for column in columns:
        # fold: wrap inside a long token rather than replace its end with an ellipsis.
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console.print(table)
