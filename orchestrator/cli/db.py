"""``payorch db``: schema migrations."""

from __future__ import annotations

import typer

from orchestrator.db.migrate import upgrade as run_upgrade
from orchestrator.settings import Settings

app = typer.Typer(help="Database schema (Alembic).", no_args_is_help=True)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Apply migrations up to REVISION (idempotent)."""
    settings = Settings()
    run_upgrade(settings.database_url, revision)
    typer.echo(f"database at revision {revision}")
