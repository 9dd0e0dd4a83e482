"""The app's OpenAPI document is valid OpenAPI 3.1 with no dangling ``$ref``, and says what
every operation can refuse (issue 43).

The document is built from the app, as ``devtools.reference_docs`` builds the copy in
docs/; a reference to a schema missing from the components (``RefundCreate`` was one)
made a client's generator, and Schemathesis, skip the body it names."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openapi_spec_validator import validate

from devtools import reference_docs
from orchestrator.api.openapi import document_refusals
from orchestrator.api.problems import PROBLEM_JSON as PROBLEM


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    built: dict[str, Any] = json.loads(reference_docs.openapi_document())
    return built


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_every_reference_names_a_component_that_exists(document: dict[str, Any]) -> None:
    references = set(re.findall(r'"\$ref": "([^"]+)"', json.dumps(document)))
    components = {f"#/components/schemas/{name}" for name in document["components"]["schemas"]}
    assert references, "the document uses no references at all: the check would be empty"
    assert references - components == set()
    assert "#/components/schemas/RefundCreate" in references


def _operations(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{method.upper()} {path}", operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def test_every_operation_reading_a_body_documents_400_413_and_415(
    document: dict[str, Any],
) -> None:
    with_body = [(label, op) for label, op in _operations(document) if "requestBody" in op]
    assert len(with_body) > 10
    missing = {
        label: sorted({"400", "413", "415"} - set(operation["responses"]))
        for label, operation in with_body
        if not {"400", "413", "415"} <= set(operation["responses"])
    }
    assert missing == {}


def test_every_operation_with_parameters_documents_400(document: dict[str, Any]) -> None:
    missing = [
        label
        for label, operation in _operations(document)
        if operation.get("parameters") and "400" not in operation["responses"]
    ]
    assert missing == []


def test_a_routes_own_description_of_a_refusal_is_kept() -> None:
    own = {"description": "Missing reason", "content": {}}
    schema: dict[str, Any] = {
        "paths": {"/x": {"post": {"requestBody": {}, "responses": {"400": own}}}}
    }
    document_refusals(schema)
    responses = schema["paths"]["/x"]["post"]["responses"]
    assert responses["400"] is own
    assert set(responses) == {"400", "413", "415"}


def test_the_headers_the_api_sends_are_documented(document: dict[str, Any]) -> None:
    def headers(path: str, method: str, status: str) -> set[str]:
        response = document["paths"][path][method]["responses"][status]
        return {name.lower() for name in response.get("headers", {})}

    assert "etag" in headers("/v1/payments/{payment_id}", "get", "200")
    assert "location" in headers("/v1/payments", "post", "202")
    assert "operation-id" in headers("/v1/payments/{payment_id}/capture", "post", "202")
    assert {"location", "operation-id"} <= headers(
        "/v1/ops/payments/{payment_id}/capture", "post", "202"
    )
    assert {"location", "etag"} <= headers("/v1/webhook_endpoints", "post", "201")
    assert {"location", "etag"} <= headers("/v1/connector_accounts", "post", "201")
    assert "etag" in headers("/v1/connector_accounts/{account_id}", "get", "200")
    assert "etag" in headers("/v1/webhook_endpoints/{endpoint_id}/rotate_secret", "post", "200")
    assert "www-authenticate" in headers("/v1/payments", "get", "401")


def test_every_refusal_is_a_problem_document_with_its_schema(document: dict[str, Any]) -> None:
    """Problems are sent as application/problem+json: documented under another type (where
    FastAPI puts a response model), their bodies could not be validated by anyone."""
    wrong = {
        f"{label} {status}": sorted(response.get("content", {}))
        for label, operation in _operations(document)
        for status, response in operation["responses"].items()
        if status[0] in "45"
        and response.get("content", {})
        != {PROBLEM: {"schema": {"$ref": "#/components/schemas/ProblemOut"}}}
    }
    assert wrong == {}
