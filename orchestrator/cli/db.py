"""``payorch db``: schema migrations."""

from __future__ import annotations

import typer

from orchestrator.cli.config import load_settings
from orchestrator.cli.exit_codes import EXIT_FAILED
from orchestrator.db.migrate import MigrationRefused
from orchestrator.db.migrate import upgrade as run_upgrade

app = typer.Typer(help="Database schema (Alembic).", no_args_is_help=True)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Apply migrations up to REVISION (idempotent)."""
    settings = load_settings()
    try:
        run_upgrade(settings.database_url, revision)
    except MigrationRefused as refused:
        # The migrations before it are applied; the refused one changed nothing.
        typer.echo(f"payorch: the upgrade stopped: {refused}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    typer.echo(f"database at revision {revision}")
