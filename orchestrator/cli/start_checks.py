"""What a long-running command checks before it says it started (decisions 0090 and 0100).

``payorch api``, ``worker``, ``sweeper``, ``relay``, ``dispatcher`` and ``beat`` refuse to
start on a database or a broker they cannot use: one JSON log line
``<process>_database_unusable`` or ``<process>_broker_unusable`` (the URL with its password
hidden, the ``cause`` in the driver's words, what to ``check``), then exit 69, before any
``*_started`` line.  A wrong URL, a database never created or migrated, a vhost that does not
exist do not heal by waiting; a process that looks started hides them, and every restart by
the supervisor repeats the cause.  Trouble that starts after the start is retried by each
process's own loop (Celery's reconnect, the sweeper's next pass, the relay's back-off).

The checks are a log line, not the CLI boundary's stderr line: these processes write JSON
lines, and a log collector reads one stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from orchestrator.broker_check import probe_broker, shown_broker_url
from orchestrator.cli.exit_codes import EX_UNAVAILABLE
from orchestrator.db.unreachable import probe, shown_url
from orchestrator.logging import get_logger
from orchestrator.settings import Settings

if TYPE_CHECKING:
    from celery import Celery
    from sqlalchemy.engine import Engine

log = get_logger("payorch.cli")


def refuse_unusable_services(
    process: str,
    settings: Settings,
    *,
    engine: Engine | None = None,
    celery_app: Celery | None = None,
) -> None:
    """Check the database through ``engine`` and the broker through ``celery_app`` (each
    when given); on trouble log ``<process>_database_unusable`` or
    ``<process>_broker_unusable`` and exit 69.  The database first: a worker with neither
    says the first thing to fix.  Logging must already be configured."""
    if engine is not None:
        trouble = probe(engine)
        if trouble is not None:
            log.error(
                f"{process}_database_unusable",
                database=shown_url(settings.database_url),
                cause=trouble.cause,
                check=trouble.hint,
            )
            raise typer.Exit(EX_UNAVAILABLE)
    if celery_app is not None:
        broker_trouble = probe_broker(celery_app)
        if broker_trouble is not None:
            log.error(
                f"{process}_broker_unusable",
                broker=shown_broker_url(settings.broker_url),
                cause=broker_trouble.cause,
                check=broker_trouble.hint,
            )
            raise typer.Exit(EX_UNAVAILABLE)


def service_fields(settings: Settings, *, broker: bool) -> dict[str, str]:
    """The services a start line names, passwords hidden: which database (and broker) this
    process uses is the first question when two environments get mixed up."""
    fields = {"database": shown_url(settings.database_url)}
    if broker:
        fields["broker"] = shown_broker_url(settings.broker_url)
    return fields
