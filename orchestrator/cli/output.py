"""Printing for the CLI: rich tables for people, JSON for scripts."""

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


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    console.print(table)
