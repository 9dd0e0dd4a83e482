"""What the replay tests and their fixtures share: modes, matchers, the socket guard's
exception, and the ``Cassette`` handle a test receives (see conftest.py for the modes)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pytest
import vcr
from vcr.cassette import Cassette as VcrCassette
from vcr.request import Request as VcrRequest

from devtools.simulator import RunningSimulator
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.replay.stripe_schema import assert_stripe_shaped

Mode = Literal["replay", "simulator", "stripe"]

CASSETTE_DIR = Path(__file__).resolve().parents[2] / "cassettes" / "stripe_adapter"
# Replays point the SDK here: TEST-NET-1 is unroutable, so an escaped request could never
# reach anything (and the socket guard fails it immediately anyway).
UNROUTABLE_API_BASE = "http://192.0.2.1:9"
# Recorded simulator URLs are rewritten to this, so re-recording does not churn random ports.
SIMULATOR_HOST = "http://provider-sim.invalid"
# Requests carrying this header reach the server but never the cassette (recording setup).
UNRECORDED_HEADER = "X-Payorch-Unrecorded"
FILTERED_HEADERS = (
    "authorization",
    "host",
    "user-agent",
    "x-stripe-client-user-agent",
    "x-stripe-client-telemetry",
)
# Recording against real Stripe can be slow; replay never waits on a socket at all.
RECORDING_READ_TIMEOUT_SECONDS = 20.0


def cassette_mode() -> Mode:
    value = os.environ.get("PAYORCH_CASSETTES", "replay") or "replay"
    if value not in ("replay", "simulator", "stripe"):
        raise pytest.UsageError(f"PAYORCH_CASSETTES={value!r}: use replay, simulator or stripe")
    return value  # type: ignore[return-value]


# -- matching and filtering ------------------------------------------------------------


def _form(request: VcrRequest) -> list[tuple[str, str]]:
    body = request.body or b""
    text = body.decode() if isinstance(body, bytes) else str(body)
    return sorted(parse_qsl(text, keep_blank_values=True))


def match_form_body(r1: VcrRequest, r2: VcrRequest) -> None:
    """Same form parameters (order-insensitive, so an SDK that reorders still matches)."""
    if _form(r1) != _form(r2):
        raise AssertionError(f"form bodies differ: {_form(r1)} != {_form(r2)}")


def _header(request: VcrRequest, name: str) -> str | None:
    value = request.headers.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    return str(value) if value is not None else None


def match_idempotency_key(r1: VcrRequest, r2: VcrRequest) -> None:
    """Only the Idempotency-Key header: vcrpy's own headers matcher compares every header."""
    k1, k2 = _header(r1, "Idempotency-Key"), _header(r2, "Idempotency-Key")
    if k1 != k2:
        raise AssertionError(f"Idempotency-Key {k1!r} != {k2!r}")


def match_stripe_version(r1: VcrRequest, r2: VcrRequest) -> None:
    """The API version is part of the request: a cassette recorded with another version is
    a miss (a loud failure), never a silent replay of shapes from another version."""
    v1, v2 = _header(r1, "Stripe-Version"), _header(r2, "Stripe-Version")
    if v1 != v2:
        raise AssertionError(f"Stripe-Version {v1!r} != {v2!r}")


def _before_record_request(mode: Mode) -> Callable[[VcrRequest], VcrRequest | None]:
    def prepare(request: VcrRequest) -> VcrRequest | None:
        if urlsplit(request.uri).path.startswith("/_sim/") or _header(request, UNRECORDED_HEADER):
            return None
        if mode != "stripe":
            parts = urlsplit(request.uri)
            base = urlsplit(SIMULATOR_HOST)
            request.uri = urlunsplit((base.scheme, base.netloc, parts.path, parts.query, ""))
        return request

    return prepare


def recorder(mode: Mode) -> vcr.VCR:
    configured = vcr.VCR(
        cassette_library_dir=str(CASSETTE_DIR),
        serializer="yaml",
        match_on=("method", "path", "query", "form_body", "idempotency_key", "stripe_version"),
        filter_headers=FILTERED_HEADERS,
        before_record_request=_before_record_request(mode),
        decode_compressed_response=True,
    )
    configured.register_matcher("form_body", match_form_body)
    configured.register_matcher("idempotency_key", match_idempotency_key)
    configured.register_matcher("stripe_version", match_stripe_version)
    return configured


# -- the socket guard ------------------------------------------------------------------


class SocketDuringReplay(RuntimeError):
    """Raised when anything tries to reach the network while replaying cassettes."""


# -- recordings -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    mode: Mode
    api_base: str
    api_key: str
    simulator: RunningSimulator | None


@dataclass
class Cassette:
    """What a replay test gets: the provider, and the recording's context."""

    mode: Mode
    provider: StripeProvider
    recorded: VcrCassette
    simulator: RunningSimulator | None
    run: str
    scenario: str
    api_base: str

    @property
    def recording(self) -> bool:
        return self.mode != "replay"

    def record_id(self, label: str) -> str:
        """A record id that is the same on every replay of this cassette."""
        return f"{self.run}-{self.scenario}-{label}"

    def arm(self, spec: str) -> None:
        """Inject a fault while recording; on replay the cassette already holds its effect."""
        if self.simulator is not None:
            self.simulator.admin.add_fault(spec)

    def check_bodies(self) -> None:
        """Every answer of this recording or replay, against Stripe's schemas."""
        for request, response in zip(self.recorded.requests, self.recorded.responses, strict=True):
            raw = response["body"]["string"]
            body = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            assert_stripe_shaped(
                request.method, urlsplit(request.uri).path, response["status"]["code"], body
            )

    def response_headers(self, index: int) -> dict[str, str]:
        headers = self.recorded.responses[index]["headers"]
        return {name.lower(): values[0] for name, values in headers.items()}
