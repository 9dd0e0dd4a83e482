"""ASGI entry point for uvicorn (``--factory``): each server process builds its own
container from the environment."""

from __future__ import annotations

from fastapi import FastAPI

from orchestrator.api.app import create_app
from orchestrator.bootstrap import bootstrap


def app_from_environment() -> FastAPI:
    return create_app(bootstrap())
