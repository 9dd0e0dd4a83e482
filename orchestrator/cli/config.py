"""The one way a ``payorch`` command gets its settings.

Every command that reads configuration calls ``load_settings()``: bad configuration is
refused before anything starts, with one line per problem naming the environment
variable, exit status ``EX_CONFIG`` (78) and no traceback.  The refusal's text is
``orchestrator.settings_loading``'s, shared with the entry points that start without
``payorch`` (uvicorn's ``orchestrator.api.asgi:app``, Celery's ``-A workers.celery_app``).
"""

from __future__ import annotations

import typer
from pydantic import ValidationError

from orchestrator.cli.boundary import remember_database_url
from orchestrator.cli.exit_codes import EX_CONFIG
from orchestrator.settings import Settings
from orchestrator.settings_loading import describe_configuration_error, refusal

__all__ = ["EX_CONFIG", "describe_configuration_error", "load_settings"]


def load_settings() -> Settings:
    """Settings from the environment, or a clear message and exit status 78."""
    try:
        settings = Settings()
    except ValidationError as error:
        typer.echo(refusal(error), err=True)
        raise typer.Exit(EX_CONFIG) from None
    remember_database_url(settings.database_url)
    return settings
