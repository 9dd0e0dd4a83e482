"""The Adyen half of the replay suite's support: where Adyen cassettes live, how their
requests match, and the ``AdyenCassette`` handle a test receives (fixtures in conftest.py).

Adyen's cassettes are recorded against the Adyen simulator only (``make cassettes-adyen``,
or ``make cassettes`` with the Stripe ones); ``PAYORCH_CASSETTES=stripe`` leaves them alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import vcr
from vcr.cassette import Cassette as VcrCassette
from vcr.request import Request as VcrRequest

from devtools.adyen_simulator import RunningAdyenSimulator
from orchestrator.providers.adyen_adapter import AdyenProvider
from orchestrator.providers.base import RecordedPayment
from tests.replay.adyen_schema import request_errors, response_errors
from tests.replay.cassette_support import (
    SIMULATOR_HOST,
    UNRECORDED_HEADER,
    Mode,
    match_idempotency_key,
)

ADYEN_CASSETTE_DIR = Path(__file__).resolve().parents[2] / "cassettes" / "adyen_adapter"
# What the recordings are made with; replays send the same (the key never reaches a cassette).
ADYEN_API_KEY = "AQE_payorch_cassettes"
ADYEN_MERCHANT_ACCOUNT = "PayorchCassettesECOM"
ADYEN_FILTERED_HEADERS = ("x-api-key", "authorization", "host", "user-agent")


@dataclass(frozen=True)
class AdyenTarget:
    mode: Mode
    api_base: str
    simulator: RunningAdyenSimulator | None


class NotAdyenShaped(AssertionError):
    """A recorded body the real Adyen could not have taken or sent."""


def _json_body(raw: Any) -> Any:
    if raw is None or raw in (b"", ""):
        return None
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def match_json_body(r1: VcrRequest, r2: VcrRequest) -> None:
    """Same JSON document (key order and whitespace aside)."""
    b1, b2 = _json_body(r1.body), _json_body(r2.body)
    if b1 != b2:
        raise AssertionError(f"JSON bodies differ: {b1} != {b2}")


def _before_record_request(request: VcrRequest) -> VcrRequest | None:
    parts = urlsplit(request.uri)
    if parts.path.startswith("/_sim/") or request.headers.get(UNRECORDED_HEADER):
        return None
    base = urlsplit(SIMULATOR_HOST)
    request.uri = urlunsplit((base.scheme, base.netloc, parts.path, parts.query, ""))
    return request


def adyen_recorder() -> vcr.VCR:
    configured = vcr.VCR(
        cassette_library_dir=str(ADYEN_CASSETTE_DIR),
        serializer="yaml",
        match_on=("method", "path", "query", "json_body", "idempotency_key"),
        filter_headers=ADYEN_FILTERED_HEADERS,
        before_record_request=_before_record_request,
        decode_compressed_response=True,
    )
    configured.register_matcher("json_body", match_json_body)
    configured.register_matcher("idempotency_key", match_idempotency_key)
    return configured


def exchange_errors(path: str, status: int, request: Any, response: Any) -> list[str]:
    """Why a recorded exchange is not one with the real Adyen: the request against the
    operation's request schema, the answer against the schema of its status."""
    problems = [f"request: {e}" for e in request_errors(path, request)]
    problems += [f"response {status}: {e}" for e in response_errors(path, status, response)]
    return problems


def assert_adyen_shaped(method: str, path: str, status: int, request: Any, response: Any) -> None:
    problems = exchange_errors(path, status, request, response)
    if problems:
        raise NotAdyenShaped(f"{method} {path}: " + "; ".join(problems))


@dataclass
class CassetteEventLog:
    """The ``ProviderEventLog`` an Adyen cassette's provider reads: the payments payorch
    would have recorded (``recorded``, by pspReference) and the notifications it would have
    stored (``items``, by the payment's pspReference); tests fill them in."""

    recorded: dict[str, RecordedPayment] = field(default_factory=dict)
    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        return list(self.items.get(provider_payment_id or "", []))

    def recorded_payment(self, provider_payment_id: str) -> RecordedPayment | None:
        return self.recorded.get(provider_payment_id)


@dataclass
class AdyenCassette:
    """What an Adyen replay test gets: the provider, and the recording's context."""

    mode: Mode
    provider: AdyenProvider
    recorded: VcrCassette
    simulator: RunningAdyenSimulator | None
    run: str
    scenario: str
    api_base: str
    events: CassetteEventLog = field(default_factory=CassetteEventLog)

    @property
    def recording(self) -> bool:
        return self.mode != "replay"

    def record_id(self, label: str) -> str:
        """A record id that is the same on every replay of this cassette.  Short: our key
        ``payorch-{id}-confirm-{n}`` must fit Adyen's 64 characters."""
        return f"{self.run}-{self.scenario}-{label}"

    def arm(self, spec: str) -> None:
        """Inject a fault while recording; on replay the cassette already holds its effect."""
        if self.simulator is not None:
            self.simulator.admin.add_fault(spec)

    def check_bodies(self) -> None:
        """Every request and answer of this recording or replay, against Adyen's schemas."""
        for request, response in zip(self.recorded.requests, self.recorded.responses, strict=True):
            assert_adyen_shaped(
                request.method,
                urlsplit(request.uri).path,
                response["status"]["code"],
                _json_body(request.body),
                _json_body(response["body"]["string"]),
            )

    def response_headers(self, index: int) -> dict[str, str]:
        headers = self.recorded.responses[index]["headers"]
        return {name.lower(): values[0] for name, values in headers.items()}
