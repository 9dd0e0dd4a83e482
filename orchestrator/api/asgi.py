"""ASGI entry point for uvicorn (``--factory``): each server process builds its own
container from the environment."""

from __future__ import annotations

from fastapi import FastAPI

from orchestrator.api.app import create_app
from orchestrator.bootstrap import bootstrap
from orchestrator.logging import capture_standard_logging


def app_from_environment() -> FastAPI:
    container = bootstrap()
    # uvicorn's own log lines (a refused request, a bind error) in our JSON too.
    capture_standard_logging(container.settings)
    return create_app(container)
