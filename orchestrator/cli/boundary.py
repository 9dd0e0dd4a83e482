"""The CLI's one error boundary: a database that cannot be used ends any command with one
line and exit status 69, never a traceback (decision 0090).

Every command runs inside the root group's ``invoke``; this group catches what escapes it,
so no command has its own try/except for it, and a new command is covered without a line
of its own.  Only database trouble is caught (``orchestrator.db.unreachable``): anything
else is a bug or a refusal with its own handling, and keeps its traceback or exit status.

The line names the URL the command loaded (``load_settings`` remembers it), with its
password hidden::

    payorch: cannot use the database at postgresql+psycopg://payorch:***@db:5432/payorch:
    connection failed: … Connection refused …; check PAYORCH_DATABASE_URL, that the database
    server is running and reachable from here, and that the database exists
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from orchestrator.cli.exit_codes import EX_UNAVAILABLE
from orchestrator.db.unreachable import database_trouble


class _Loaded:
    # One command per process: the URL its load_settings() read.  None: the command read
    # no settings (the demo and the bench make their own databases), and the line then
    # names no URL rather than a wrong one.
    database_url: str | None = None


def remember_database_url(url: str) -> None:
    """Called by ``load_settings``: the URL the boundary names if the database fails."""
    _Loaded.database_url = url


class ReportingGroup(TyperGroup):
    """The root ``payorch`` group: every subcommand runs inside its ``invoke``."""

    # ``ctx`` is typer's own copy of click's Context (typer vendors click); its module is
    # private, hence Any.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise  # a command's own exit status: already said
        except Exception as exc:  # re-raised below unless it is database trouble
            trouble = database_trouble(exc)
            if trouble is None:
                raise
            typer.echo(f"payorch: {trouble.line(_Loaded.database_url)}", err=True)
            raise typer.Exit(EX_UNAVAILABLE) from None
