"""``payorch db``: schema migrations."""

from __future__ import annotations

import typer

from orchestrator.cli.config import load_settings
from orchestrator.db.migrate import upgrade as run_upgrade

app = typer.Typer(help="Database schema (Alembic).", no_args_is_help=True)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Apply migrations up to REVISION (idempotent)."""
    settings = load_settings()
    run_upgrade(settings.database_url, revision)
    typer.echo(f"database at revision {revision}")
