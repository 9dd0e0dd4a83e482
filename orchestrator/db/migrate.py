"""Alembic, driven from code: ``payorch db upgrade`` and the test fixtures call this."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


class MigrationRefused(RuntimeError):
    """A migration found data it cannot carry forward (its message says what to fix).  It is
    raised before the migration changes anything, and its transaction rolls back: the
    database stays at the revision before it."""


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # '%' is ConfigParser's interpolation character; URLs may contain it (escaped passwords).
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Idempotent: running it on an up-to-date database changes nothing."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)
