"""ASGI entry points: each server process builds its own container from the environment.

``payorch api`` serves ``app_from_environment`` (``--factory``), after refusing bad
configuration itself.  ``app`` is the same application for a server started without
``payorch`` (``uvicorn orchestrator.api.asgi:app``): built when the server first reads it,
not at import, so importing this module connects to nothing.  Both refuse bad
configuration as ``payorch`` does (one line naming the variable, exit status 78, no
traceback): a supervisor that names this module directly must not get a server that
guessed its environment, nor a traceback instead of the reason.
"""

from __future__ import annotations

from fastapi import FastAPI

from orchestrator import tracing
from orchestrator.api.app import create_app
from orchestrator.bootstrap import bootstrap
from orchestrator.logging import capture_standard_logging
from orchestrator.settings_loading import settings_or_exit


def app_from_environment() -> FastAPI:
    settings = settings_or_exit()
    # Per server process (after uvicorn's fork with --workers N), before the container's
    # first connection: psycopg's connections are traced from the start.
    tracing.setup("payorch-api")
    container = bootstrap(settings)
    # uvicorn's own log lines (a refused request, a bind error) in our JSON too.
    capture_standard_logging(container.settings)
    return create_app(container)


def __getattr__(name: str) -> FastAPI:
    """``app``, built on first read and kept (PEP 562: only names not defined above)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = app_from_environment()
    globals()["app"] = built
    return built
