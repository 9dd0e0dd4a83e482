"""The OpenAPI document: FastAPI's, plus the request body schema we validate by hand."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from orchestrator.api.problems import PROBLEM_JSON
from orchestrator.api.refund_schemas import RefundCreate
from orchestrator.api.schemas import PaymentCreate
from orchestrator.domain.ids import PAYMENT_ID_PATTERN

# Bodies the routes validate by hand (orchestrator.api.body) and name by reference in their
# ``openapi_extra``: their schemas must be in the components, or the reference dangles.
REFERENCED_BODIES = (PaymentCreate, RefundCreate)

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
        for model in REFERENCED_BODIES:
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, definition in body.pop("$defs", {}).items():
                components.setdefault(name, definition)
            components[model.__name__] = body
        _describe_url_parameters(schema)
        _optional_headers_are_strings(schema)
        _drop_fastapi_validation_errors(schema)
        _problems_are_problem_json(schema)
        document_refusals(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]


# orchestrator.api.middleware refuses control characters anywhere in the URL (400).
NO_CONTROL_CHARACTERS = "^[^\\x00-\\x1f\\x7f]*$"


def _describe_url_parameters(schema: dict[str, Any]) -> None:
    """Say in the document what the middleware enforces for every URL parameter: no
    control characters; and every ``{payment_id}`` in a path has the payment id's shape."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") not in ("path", "query"):
                    continue
                value = parameter.setdefault("schema", {})
                if parameter["in"] == "path" and parameter.get("name") == "payment_id":
                    value["pattern"] = PAYMENT_ID_PATTERN
                    parameter.setdefault("description", "A payment id: 'pay_' + 32 hex digits.")
                elif _is_free_string(value):
                    value["pattern"] = NO_CONTROL_CHARACTERS


def _optional_headers_are_strings(schema: dict[str, Any]) -> None:
    """An optional header (``str | None`` in the route) is absent or a string; FastAPI's
    ``anyOf [string, null]`` would invite clients (and schemathesis) to send the text
    ``null``.  Keep the string branch, with the keys documented beside it (a pattern)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                value = parameter.get("schema", {})
                branches = value.get("anyOf")
                if parameter.get("in") != "header" or not branches:
                    continue
                strings = [b for b in branches if b.get("type") != "null"]
                if len(strings) == 1 and len(branches) == 2:
                    del value["anyOf"]
                    value.update(strings[0])


def _is_free_string(value: dict[str, Any]) -> bool:
    branches = value.get("anyOf", [value])
    return (
        any(b.get("type") == "string" and "pattern" not in b and "enum" not in b for b in branches)
        and "pattern" not in value
    )


def _drop_fastapi_validation_errors(schema: dict[str, Any]) -> None:
    """FastAPI documents a 422 "Validation Error" on every operation with parameters, but
    our handler answers request validation errors with a 400 problem (422 means a reused
    Idempotency-Key here), so those entries would be false."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            documented = responses.get("422", {})
            content = documented.get("content", {}).get("application/json", {})
            if content.get("schema", {}).get("$ref", "").endswith("/HTTPValidationError"):
                del responses["422"]
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)


def _problems_are_problem_json(schema: dict[str, Any]) -> None:
    """A route's ``problem(...)`` entry names ``ProblemOut`` as its model, which FastAPI puts
    under the route's own media type (``application/json``, a plain-text route's
    ``text/plain``), a type no problem is sent as, and leaves the
    ``application/problem+json`` it is sent as without a schema, so no client (and no
    Schemathesis check) could validate a problem body.  Move the schema where it belongs."""
    problem_ref = "#/components/schemas/ProblemOut"
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                content = response.get("content", {})
                if PROBLEM_JSON not in content:
                    continue
                for media_type in list(content):
                    value = content[media_type].get("schema", {})
                    if media_type != PROBLEM_JSON and value.get("$ref") == problem_ref:
                        content[PROBLEM_JSON] = {"schema": value}
                        del content[media_type]


# What every route answers before its own code runs (the middleware, orchestrator.api.body,
# the validation handler), so no route lists them by hand and none can forget them.
_URL_REFUSAL = "Invalid parameter (the problem names it), or control characters in the URL"
_BODY_REFUSALS = {
    "400": "Invalid body, parameter or header (the problem names it); not valid JSON",
    "413": "The body is larger than the limit (the problem says it)",
    "415": "The body is not sent as application/json",
}


def document_refusals(schema: dict[str, Any]) -> None:
    """Add the refusals every operation can give to the operations that lack them: a 400
    wherever a parameter or a body can be wrong, a 413 and a 415 wherever a body is read.
    A route's own description of a status is kept."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            refusals: dict[str, str] = {}
            if operation.get("parameters"):
                refusals["400"] = _URL_REFUSAL
            if "requestBody" in operation:
                refusals.update(_BODY_REFUSALS)
            for status, description in refusals.items():
                responses.setdefault(status, _problem(description))


def _problem(description: str) -> dict[str, Any]:
    reference = {"$ref": "#/components/schemas/ProblemOut"}
    return {"description": description, "content": {PROBLEM_JSON: {"schema": reference}}}
