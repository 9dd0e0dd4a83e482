"""The OpenAPI document: FastAPI's, plus the request body schema we validate by hand."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from orchestrator.api.schemas import PaymentCreate

DESCRIPTION = """
payorch accepts payments idempotently and makes sure each one moves money exactly once at
the provider.

* `POST /v1/payments` with an `Idempotency-Key` answers `202 Accepted` and a URL to poll.
* Every error is an RFC 9457 problem document (`application/problem+json`).
* Idempotency keys are scoped to the API client and kept for
  `PAYORCH_IDEMPOTENCY_RETENTION_HOURS` (default 24 hours) after the payment was created
  and finished; then the key is forgotten and may start a new payment.
"""


def install_openapi(app: FastAPI) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title="payorch",
            version="1.0.0",
            description=DESCRIPTION,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        create = PaymentCreate.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in create.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components["PaymentCreate"] = create
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]
