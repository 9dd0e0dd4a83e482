"""Stripe's own schemas as a test oracle: could the real Stripe have sent this body?

Stripe's OpenAPI spec is OpenAPI 3.0: its schemas say ``nullable: true`` where JSON Schema
says "or null".  The spec is rewritten once (``nullable`` -> ``anyOf [..., null]``), registered
under one URI so its ``#/components/schemas/...`` references resolve, and each response is
validated against the schema of its path, method and status (``default`` = Stripe's error
object for every non-2xx).  A path the spec does not know fails: a body with no schema to
check is not "valid".
"""

from __future__ import annotations

import json
import re
import threading
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).parent / "stripe_openapi" / "openapi-2023-08-16-subset.json"
_SPEC_URI = "urn:stripe:openapi-2023-08-16"


class NotStripeShaped(AssertionError):
    """A response body the real Stripe could not have sent."""


def _without_nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {k: _without_nullable(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@cache
def _spec() -> dict[str, Any]:
    spec = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    assert isinstance(spec, dict)
    return spec


@cache
def _registry() -> Registry[Any]:
    converted = _without_nullable(_spec())
    return Registry().with_resource(_SPEC_URI, Resource(converted, specification=DRAFT202012))


@cache
def _routes() -> tuple[tuple[re.Pattern[str], str], ...]:
    routes = []
    for template in _spec()["paths"]:
        pattern = re.sub(r"\\\{[^}]+\\\}", r"[^/]+", re.escape(template))
        routes.append((re.compile(f"^{pattern}$"), template))
    # Literal paths before templated ones (``/v1/x/search`` before ``/v1/x/{id}``).
    return tuple(sorted(routes, key=lambda r: r[1].count("{")))


def _pointer(template: str, method: str, status: int) -> str:
    responses = _spec()["paths"][template][method.lower()]["responses"]
    key = str(status) if str(status) in responses else "default"
    if key not in responses:
        raise NotStripeShaped(f"{method} {template}: no response {status} in Stripe's spec")
    escaped = template.replace("~", "~0").replace("/", "~1")
    return (
        f"{_SPEC_URI}#/paths/{escaped}/{method.lower()}/responses/{key}"
        "/content/application~1json/schema"
    )


@cache
def _validator(template: str, method: str, status: int) -> Draft202012Validator:
    return Draft202012Validator({"$ref": _pointer(template, method, status)}, registry=_registry())


# Lists the simulator serves whose path the subset lacks, though it has their object's
# component schema (decision 0108): only each listed object is validated, against it, and
# the envelope against Stripe's list shape.
PATHLESS_LISTS = {"/v1/balance_transactions": "balance_transaction"}


@cache
def _component_validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": f"{_SPEC_URI}#/components/schemas/{name}"}, registry=_registry()
    )


def _pathless_list_errors(method: str, path: str, status: int, body: Any) -> list[str]:
    if status != 200:
        # An error answer has the same shape on every path.
        return schema_errors(method, "/v1/refunds", status, body)
    envelope = isinstance(body, dict) and (
        body.get("object") == "list"
        and isinstance(body.get("data"), list)
        and isinstance(body.get("has_more"), bool)
        and body.get("url") == path
    )
    if not envelope:
        return [f"{method} {path} {status}: not a Stripe list: {str(body)[:200]}"]
    validator = _component_validator(PATHLESS_LISTS[path])
    return [
        f"{method} {path} {status} at /data/{n}/{'/'.join(map(str, e.absolute_path))}: "
        f"{e.message[:300]}"
        for n, item in enumerate(body["data"])
        for e in validator.iter_errors(item)
    ]


def schema_errors(method: str, path: str, status: int, body: Any) -> list[str]:
    """Why ``body`` cannot be Stripe's answer to ``method path`` with ``status`` (empty: it can)."""
    if method.upper() == "GET" and path in PATHLESS_LISTS:
        return _pathless_list_errors(method, path, status, body)
    template = next((t for pattern, t in _routes() if pattern.match(path)), None)
    if template is None or method.lower() not in _spec()["paths"][template]:
        return [f"{method} {path}: not a path of Stripe's spec (nothing to validate against)"]
    validator = _validator(template, method, status)
    errors: list[ValidationError] = sorted(
        validator.iter_errors(body), key=lambda e: list(e.absolute_path)
    )
    return [
        f"{method} {path} {status} at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
        for e in errors
    ]


def assert_stripe_shaped(method: str, path: str, status: int, body: Any) -> None:
    problems = schema_errors(method, path, status, body)
    if problems:
        raise NotStripeShaped("\n".join(problems))


class AnswerWatch:
    """A simulator ``answer_observer``: keeps every answer and checks them afterwards.

    Nothing is validated inside the request (validating an intent is slow enough that a
    page of 100 would turn into a client timeout).  Non-list answers are validated whole;
    of a list page, the envelope and its first and last items (every item comes from the
    same renderer, and a 10,000-intent scan would otherwise cost minutes).  Search is
    outside the spec subset.
    """

    def __init__(self) -> None:
        self.checked = 0
        self.problems: list[str] = []
        self._answers: list[tuple[str, str, int, bytes]] = []
        self._lock = threading.Lock()

    def __call__(self, method: str, path: str, status: int, body: bytes) -> None:
        if not path.startswith("/v1/") or path.endswith("/search"):
            return
        with self._lock:
            self._answers.append((method, path, status, body))

    def _check(self, method: str, path: str, status: int, body: bytes) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            self.problems.append(f"{method} {path} {status}: not JSON: {body[:200]!r}")
            return
        data = parsed.get("data") if isinstance(parsed, dict) else None
        if isinstance(data, list) and len(data) > 2:
            parsed = {**parsed, "data": [data[0], data[-1]]}
        self.checked += 1
        self.problems.extend(schema_errors(method, path, status, parsed))

    def assert_clean(self) -> None:
        with self._lock:
            answers, self._answers = self._answers, []
        for answer in answers:
            self._check(*answer)
        if self.problems:
            raise NotStripeShaped("\n".join(self.problems[:20]))
