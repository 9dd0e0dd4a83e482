"""``/docs``: Swagger UI served entirely by this process (no CDN), so the API reference
works on a host without internet access.  The assets are Swagger UI 5's distribution files
as shipped inside the ``fastapi-offline`` package (only its static folder is used: Swagger
UI 4, as in ``swagger-ui-bundle``, cannot read the OpenAPI 3.1 document FastAPI writes)."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
STATIC = Path(fastapi_offline.__file__).parent / "static"


def install_docs(app: FastAPI) -> None:
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="payorch API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )
