"""Command summaries in ``--help`` listings: whole, wrapped, never cut (decision 0096).

The CLI prints click's plain help (``rich_markup_mode=None`` in ``cli.main``): click
rewraps every docstring paragraph to the terminal (80 columns at most) and keeps a
paragraph that starts with ``\\b`` line for line, so examples keep their lines.  Its one
cut is the summary a group lists for each command: the first sentence, truncated with
"..." to fit one line.  ``PayorchGroup`` gives every command in the tree, once at start,
a summary that is its docstring's whole first paragraph on one logical line, which the
listing then wraps in its column instead of cutting.
"""

from __future__ import annotations

import inspect
from typing import Any

from orchestrator.cli.boundary import ReportingGroup


def first_paragraph(help_text: str) -> str:
    """The first paragraph of a docstring with its line breaks undone."""
    paragraph = inspect.cleandoc(help_text).split("\n\n")[0]
    return " ".join(paragraph.replace("\b", "").split())


def summarise(command: Any) -> None:
    """Set a whole summary on ``command`` and every command under it (click objects are
    typer's vendored click, hence Any)."""
    if command.short_help is None and command.help:
        command.short_help = first_paragraph(command.help)
    for child in getattr(command, "commands", {}).values():
        summarise(child)


class PayorchGroup(ReportingGroup):
    """The root ``payorch`` group: the error boundary, and whole command summaries."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        summarise(self)
