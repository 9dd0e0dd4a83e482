"""The console on the app: its pages' routers, its static files, and the redirect to the
sign-in page for a request that is not signed in."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from orchestrator.api.console import (
    capture_forms,
    chart_pages,
    connector_pages,
    overview_pages,
    payment_pages,
    reconciliation_pages,
    routing_pages,
    sign_in_pages,
    webhook_pages,
)
from orchestrator.api.console.guard import install_sign_in_redirect
from orchestrator.api.console.rendering import HERE


def install_console(app: FastAPI) -> None:
    for pages in (
        sign_in_pages,
        overview_pages,
        chart_pages,
        payment_pages,
        webhook_pages,
        capture_forms,
        connector_pages,
        routing_pages,
        reconciliation_pages,
    ):
        app.include_router(pages.router)
    app.mount("/ops/static", StaticFiles(directory=HERE / "static"), name="console-static")
    install_sign_in_redirect(app)
