"""Adyen's Checkout v71 and notification schemas (copied from ``../shared/adyen`` into
``tests/fixtures/adyen``), as validators: every body the Adyen simulator takes or gives must
be one the real Adyen could (``AdyenWatch``, an ``answer_observer``), and so must every body
of the Adyen cassettes (``test_cassettes_against_adyen_schema.py``).  It lives beside
``stripe_schema.py`` so the replay suite and the integration tests share it."""

from __future__ import annotations

import json
import re
import threading
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adyen"
CHECKOUT = json.loads((FIXTURES / "checkout-v71-subset.json").read_text())
NOTIFICATIONS = json.loads((FIXTURES / "notifications-subset.json").read_text())
_VERSION_ROOT = re.compile(r"^(/checkout)?/v71")


@cache
def _validator(document: str, name: str) -> Draft202012Validator:
    spec = CHECKOUT if document == "checkout" else NOTIFICATIONS
    return Draft202012Validator({**spec, "$ref": f"#/components/schemas/{name}"})


def _ref_name(schema: dict[str, Any]) -> str:
    return str(schema["$ref"]).rsplit("/", 1)[-1]


def _operation(path: str) -> dict[str, Any]:
    bare = _VERSION_ROOT.sub("", path)
    for template, item in CHECKOUT["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, bare):
            return dict(item["post"])
    raise AssertionError(f"{path} is not a path of the Checkout v71 subset")


def schema_errors(document: str, name: str, body: Any) -> list[str]:
    return [
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in _validator(document, name).iter_errors(body)
    ]


def request_errors(path: str, body: Any) -> list[str]:
    schema = _operation(path)["requestBody"]["content"]["application/json"]["schema"]
    return schema_errors("checkout", _ref_name(schema), body)


def response_errors(path: str, status: int, body: Any) -> list[str]:
    responses = _operation(path)["responses"]
    answer = responses.get(str(status))
    name = (
        _ref_name(answer["content"]["application/json"]["schema"])
        if answer is not None
        else "ServiceError"  # 404 / 429 / 502 / 503: Adyen's error shape all the same
    )
    return schema_errors("checkout", name, body)


def notification_errors(body: Any) -> list[str]:
    """A notification request against the schema of its event (``webhooks`` section)."""
    errors: list[str] = []
    for wrapper in body.get("notificationItems", []):
        event = wrapper["NotificationRequestItem"]["eventCode"]
        webhook = NOTIFICATIONS["webhooks"].get(f"/{event}")
        if webhook is None:
            errors.append(f"{event}: not an event of the notifications subset")
            continue
        schema = webhook["post"]["requestBody"]["content"]["application/json"]["schema"]
        single = {**body, "notificationItems": [wrapper]}
        errors += [f"{event}: {e}" for e in schema_errors("webhooks", _ref_name(schema), single)]
    return errors


class AdyenWatch:
    """An ``answer_observer``: checks each exchange; a 2xx's request is checked too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.problems: list[str] = []
        self.checked = 0
        self.statuses: set[tuple[str, int]] = set()

    def __call__(self, method: str, path: str, status: int, request: bytes, answer: bytes) -> None:
        try:
            problems = response_errors(path, status, json.loads(answer))
            if 200 <= status < 300:
                problems += [f"request: {p}" for p in request_errors(path, json.loads(request))]
        except Exception as exc:  # an observer must not raise inside the request
            problems = [f"{type(exc).__name__}: {exc}"]
        bare = _VERSION_ROOT.sub("", path)
        template = re.sub(
            r"^/payments/[^/]+/(captures|cancels|refunds|reversals)$", r"/payments/{psp}/\1", bare
        )
        with self._lock:
            self.checked += 1
            self.statuses.add((template, status))
            self.problems += [f"{method} {path} {status}: {p}" for p in problems]

    def assert_clean(self) -> None:
        assert not self.problems, "\n".join(self.problems)
