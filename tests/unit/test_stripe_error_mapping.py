"""The adapter's error mapping and request shape, through a fake HTTP transport.

The fake is an ``httpx.MockTransport`` backed by a function that answers canned Stripe
responses (or raises transport errors) and records every request, so these tests run the real
SDK end to end with no network and no mocks of the SDK itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from http.client import RemoteDisconnected
from urllib.parse import parse_qsl

import httpx
import pytest
import stripe
import urllib3

from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderError,
    Retryable,
)
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.providers.stripe_errors import ProviderBug, map_stripe_error, retry_after_seconds
from orchestrator.settings import Settings
from orchestrator.stripe_version import PINNED_API_VERSION
from tests.fakes.stripe_http import FakeStripeTransport

# A pool for the errors that name one (urllib3 raises them with the pool they came from).
_POOL = urllib3.HTTPConnectionPool("stripe.invalid")

Handler = Callable[[httpx.Request], httpx.Response]


def _intent(**overrides: object) -> dict[str, object]:
    intent: dict[str, object] = {
        "id": "pi_fake",
        "object": "payment_intent",
        "amount": 1000,
        "currency": "usd",
        "status": "requires_confirmation",
        "metadata": {"payorch_record_id": "rec-1"},
        "latest_charge": None,
        "last_payment_error": None,
        "created": 1_700_000_000,
    }
    intent.update(overrides)
    return intent


def _error(
    status: int, type_: str, *, headers: dict[str, str] | None = None, **fields: object
) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"type": type_, "message": "canned", **fields}}, headers=headers
    )


class FakeStripe:
    """A function-backed transport: answers with ``handler`` and remembers the requests."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.handler: Handler = lambda request: httpx.Response(200, json=_intent())

    def transport(self) -> FakeStripeTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return self.handler(request)

        return FakeStripeTransport(handle)

    def answer(self, response: httpx.Response) -> None:
        self.handler = lambda request: response

    def fail_with(self, exc: BaseException) -> None:
        def raise_it(request: httpx.Request) -> httpx.Response:
            raise exc

        self.handler = raise_it

    def form(self, index: int = -1) -> dict[str, str]:
        return dict(parse_qsl(self.requests[index].content.decode()))


@pytest.fixture
def fake() -> FakeStripe:
    return FakeStripe()


@pytest.fixture
def provider(fake: FakeStripe) -> Iterator[StripeProvider]:
    with StripeProvider(
        api_key="sk_test_unit",
        api_base="https://stripe.invalid",
        connect_timeout=1.0,
        read_timeout=1.0,
        transport=fake.transport(),
    ) as provider:
        yield provider


def _confirm(provider: StripeProvider) -> None:
    provider.confirm_payment("pi_fake", record_id="rec-1", attempt=1)


# -- what we send ----------------------------------------------------------------------


def test_create_sends_an_unconfirmed_card_intent_with_our_key_and_record_id(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    intent = provider.create_payment(
        record_id="rec-1",
        amount=1000,
        currency="USD",
        payment_method="pm_card_visa",
        description="order 7",
        metadata={"order": "7", "payorch_record_id": "spoofed"},
    )

    request = fake.requests[0]
    assert request.method == "POST"
    assert request.url.path == "/v1/payment_intents"
    assert request.headers["Idempotency-Key"] == "payorch-rec-1-create"
    assert fake.form() == {
        "amount": "1000",
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "payment_method_types[0]": "card",
        "confirm": "false",
        "metadata[order]": "7",
        "metadata[payorch_record_id]": "rec-1",
        "description": "order 7",
    }
    assert intent.id == "pi_fake"
    assert intent.status == "requires_confirmation"


def test_confirm_sends_the_attempt_key(provider: StripeProvider, fake: FakeStripe) -> None:
    provider.confirm_payment("pi_fake", record_id="rec-1", attempt=3)

    assert fake.requests[0].url.path == "/v1/payment_intents/pi_fake/confirm"
    assert fake.requests[0].headers["Idempotency-Key"] == "payorch-rec-1-confirm-3"


def test_a_failed_call_is_sent_exactly_once_because_the_sdk_never_retries(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(_error(500, "api_error"))

    with pytest.raises(OutcomeUnknown):
        _confirm(provider)

    assert len(fake.requests) == 1


def test_building_a_provider_turns_the_sdks_telemetry_off(
    fake: FakeStripe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stripe, "enable_telemetry", True)
    fake.handler = lambda request: httpx.Response(
        200, json=_intent(), headers={"Request-Id": "req_1"}
    )

    with StripeProvider(
        api_key="sk_test_unit",
        api_base="https://stripe.invalid",
        connect_timeout=1.0,
        read_timeout=1.0,
        transport=fake.transport(),
    ) as provider:
        provider.retrieve_payment("pi_fake")
        provider.retrieve_payment("pi_fake")

    # With telemetry on, the second request would report the first one's request id.
    assert "X-Stripe-Client-Telemetry" not in fake.requests[1].headers
    assert "telemetry_id" not in fake.requests[1].headers["X-Stripe-Client-User-Agent"]


def test_list_asks_for_one_page_of_a_bounded_creation_window_and_never_searches(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        httpx.Response(
            200,
            json={
                "object": "list",
                "url": "/v1/payment_intents",
                "has_more": True,
                "data": [
                    _intent(id="pi_newer", metadata={"payorch_record_id": "rec-0"}),
                    _intent(id="pi_older", status="succeeded", amount_received=1000),
                ],
            },
        )
    )

    page = provider.list_payments(
        created_gte=1_700_000_000, created_lte=1_700_000_900, starting_after="pi_x", limit=500
    )

    assert [i.id for i in page.provider_payments] == ["pi_newer", "pi_older"]
    assert page.has_more is True
    assert page.provider_payments[1].amount_received == 1000
    [request] = fake.requests
    assert request.url.path == "/v1/payment_intents"
    params = request.url.params
    assert params["created[gte]"] == "1700000000"
    assert params["created[lte]"] == "1700000900"
    assert params["starting_after"] == "pi_x"
    assert params["limit"] == "100"  # Stripe's maximum, whatever the caller asks


def test_the_first_page_has_no_cursor(provider: StripeProvider, fake: FakeStripe) -> None:
    fake.answer(
        httpx.Response(
            200,
            json={"object": "list", "url": "/v1/payment_intents", "has_more": False, "data": []},
        )
    )

    page = provider.list_payments(created_gte=1, created_lte=2, starting_after=None, limit=10)

    assert page.provider_payments == () and page.has_more is False
    assert "starting_after" not in fake.requests[0].url.params


def test_every_request_carries_the_pinned_stripe_version(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    provider.retrieve_payment("pi_fake")

    assert fake.requests[0].headers["Stripe-Version"] == PINNED_API_VERSION


def test_the_stripe_version_is_configurable(fake: FakeStripe) -> None:
    with StripeProvider(
        api_key="sk_test_unit",
        api_base="https://stripe.invalid",
        connect_timeout=1.0,
        read_timeout=1.0,
        transport=fake.transport(),
        api_version="2099-01-01.future",
    ) as provider:
        provider.retrieve_payment("pi_fake")

    assert fake.requests[0].headers["Stripe-Version"] == "2099-01-01.future"


def test_parse_reads_what_the_match_needs(provider: StripeProvider, fake: FakeStripe) -> None:
    fake.answer(
        httpx.Response(
            200,
            json=_intent(
                status="requires_payment_method",
                payment_method=None,
                customer={"id": "cus_1", "object": "customer"},
                capture_method="automatic_async",
                last_payment_error={
                    "type": "card_error",
                    "code": "card_declined",
                    "payment_method": {"id": "pm_used", "object": "payment_method"},
                },
            ),
        )
    )

    intent = provider.retrieve_payment("pi_fake")

    assert intent.payment_method is None
    assert intent.customer == "cus_1"
    assert intent.capture_method == "automatic_async"
    assert intent.last_payment_error is not None
    assert intent.last_payment_error.payment_method == "pm_used"


# -- what we make of the answers -------------------------------------------------------


def test_a_card_error_is_a_decline_with_codes_and_the_intent_id(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        _error(
            402,
            "card_error",
            code="card_declined",
            decline_code="insufficient_funds",
            payment_intent=_intent(status="requires_payment_method"),
        )
    )

    with pytest.raises(Declined) as caught:
        _confirm(provider)

    assert caught.value.code == "card_declined"
    assert caught.value.decline_code == "insufficient_funds"
    assert caught.value.provider_payment_id == "pi_fake"
    assert caught.value.http_status == 402


@pytest.mark.parametrize(
    ("status", "type_", "code"),
    [
        (400, "invalid_request_error", "payment_intent_unexpected_state"),
        (400, "invalid_request_error", "parameter_unknown"),
        (404, "invalid_request_error", "resource_missing"),
        (401, "invalid_request_error", None),
        (403, "invalid_request_error", None),
        (409, "invalid_request_error", "resource_already_exists"),
    ],
)
def test_request_errors_are_permanent_and_keep_stripes_code(
    provider: StripeProvider, fake: FakeStripe, status: int, type_: str, code: str | None
) -> None:
    fields = {"code": code} if code else {}
    fake.answer(httpx.Response(status, json={"error": {"type": type_, "message": "x", **fields}}))

    with pytest.raises(Permanent) as caught:
        _confirm(provider)

    assert caught.value.code == code
    assert caught.value.http_status == status


def test_an_idempotency_error_is_permanent_with_its_type_as_code(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(_error(400, "idempotency_error"))

    with pytest.raises(Permanent) as caught:
        _confirm(provider)

    assert caught.value.code == "idempotency_error"


def test_a_rate_limit_is_retryable_after_the_retry_after_header(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        _error(429, "invalid_request_error", code="rate_limit", headers={"Retry-After": "7"})
    )

    with pytest.raises(Retryable) as caught:
        _confirm(provider)

    assert caught.value.retry_after == 7.0
    assert caught.value.code == "rate_limit"


def test_a_rate_limit_without_retry_after_leaves_the_wait_to_the_worker(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(_error(429, "invalid_request_error", code="rate_limit"))

    with pytest.raises(Retryable) as caught:
        _confirm(provider)

    assert caught.value.retry_after is None


def test_a_key_in_use_conflict_is_retryable_though_the_sdk_calls_it_a_plain_api_error(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(_error(409, "invalid_request_error", code="idempotency_key_in_use"))

    with pytest.raises(Retryable) as caught:
        _confirm(provider)

    assert caught.value.code == "idempotency_key_in_use"
    assert caught.value.http_status == 409


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_unknown_outcomes(
    provider: StripeProvider, fake: FakeStripe, status: int
) -> None:
    fake.answer(_error(status, "api_error"))

    with pytest.raises(OutcomeUnknown) as caught:
        _confirm(provider)

    assert caught.value.http_status == status


def test_stripe_should_retry_true_makes_a_server_error_retryable(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(_error(500, "api_error", headers={"Stripe-Should-Retry": "true"}))

    with pytest.raises(Retryable) as caught:
        _confirm(provider)

    assert caught.value.http_status == 500


def test_stripe_should_retry_true_makes_a_request_error_retryable(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        _error(
            400,
            "invalid_request_error",
            code="lock_timeout",
            headers={"Stripe-Should-Retry": "true"},
        )
    )

    with pytest.raises(Retryable) as caught:
        _confirm(provider)

    assert caught.value.code == "lock_timeout"


def test_stripe_should_retry_false_turns_a_retryable_conflict_into_query_first(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        _error(
            409,
            "invalid_request_error",
            code="idempotency_key_in_use",
            headers={"Stripe-Should-Retry": "false"},
        )
    )

    with pytest.raises(OutcomeUnknown) as caught:
        _confirm(provider)

    assert caught.value.http_status == 409


def test_stripe_should_retry_false_leaves_a_server_error_unknown(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(_error(500, "api_error", headers={"Stripe-Should-Retry": "false"}))

    with pytest.raises(OutcomeUnknown):
        _confirm(provider)


def test_stripe_should_retry_never_turns_a_decline_into_a_retry(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        _error(
            402,
            "card_error",
            code="card_declined",
            decline_code="generic_decline",
            headers={"Stripe-Should-Retry": "true"},
        )
    )

    with pytest.raises(Declined):
        _confirm(provider)


@pytest.mark.parametrize("status", [200, 502])
def test_an_answer_that_is_not_stripe_json_is_an_unknown_outcome(
    provider: StripeProvider, fake: FakeStripe, status: int
) -> None:
    fake.answer(httpx.Response(status, text="<html>bad gateway</html>"))

    with pytest.raises(OutcomeUnknown):
        _confirm(provider)


@pytest.mark.parametrize(
    "failure",
    [
        urllib3.exceptions.ReadTimeoutError(_POOL, "/v1", "read timed out"),
        urllib3.exceptions.ConnectTimeoutError("connect timed out"),
        urllib3.exceptions.NewConnectionError(
            urllib3.connection.HTTPConnection("stripe.invalid"), "connection refused"
        ),
        urllib3.exceptions.ProtocolError("Connection aborted.", RemoteDisconnected()),
        urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError()),
        urllib3.exceptions.IncompleteRead(10, 20),
        urllib3.exceptions.DecodeError("truncated gzip stream"),
        urllib3.exceptions.SSLError("certificate verify failed"),
        ConnectionResetError("reset by peer"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_transport_failures_are_unknown_outcomes(
    provider: StripeProvider, fake: FakeStripe, failure: Exception
) -> None:
    fake.fail_with(failure)

    with pytest.raises(OutcomeUnknown) as caught:
        _confirm(provider)

    assert caught.value.__cause__ is not None
    assert isinstance(caught.value.__cause__.__cause__, type(failure))


def test_a_non_network_exception_in_the_http_stack_surfaces_as_itself(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    class CassetteMiss(Exception):
        pass

    fake.fail_with(CassetteMiss("no recorded response for this request"))

    with pytest.raises(CassetteMiss):
        _confirm(provider)


def test_a_malformed_url_is_a_bug_not_an_unknown_outcome(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.fail_with(urllib3.exceptions.URLSchemeUnknown("ftp"))

    with pytest.raises(ProviderBug) as caught:
        _confirm(provider)

    assert not isinstance(caught.value, ProviderError)


@pytest.mark.parametrize("api_base", ["ftp://stripe.invalid", "http://"])
def test_a_malformed_api_base_through_the_real_transport_is_a_bug(api_base: str) -> None:
    # Nothing is sent: urllib3 refuses the URL before it opens a connection.
    with (
        StripeProvider(
            api_key="sk_test_unit", api_base=api_base, connect_timeout=1.0, read_timeout=1.0
        ) as provider,
        pytest.raises(ProviderBug) as caught,
    ):
        provider.retrieve_payment("pi_fake")

    assert not isinstance(caught.value, ProviderError)


def test_a_connection_error_the_sdk_wrapped_around_a_non_network_cause_is_a_bug() -> None:
    # What the SDK's own HTTP clients do with *any* exception, e.g. a vcrpy cassette miss.
    wrapped = stripe.APIConnectionError("Unexpected error communicating with Stripe.")  # type: ignore[no-untyped-call]
    wrapped.__cause__ = KeyError("not a network failure")

    mapped = map_stripe_error(wrapped)

    assert isinstance(mapped, ProviderBug)
    assert not isinstance(mapped, ProviderError)


def test_a_connection_error_around_a_socket_timeout_is_an_unknown_outcome() -> None:
    wrapped = stripe.APIConnectionError("Network error")  # type: ignore[no-untyped-call]
    wrapped.__cause__ = TimeoutError("timed out")

    assert isinstance(map_stripe_error(wrapped), OutcomeUnknown)


def test_a_refused_connection_from_settings_is_an_unknown_outcome() -> None:
    # Port 1 on loopback is closed: a real, fast transport failure through from_settings.
    settings = Settings(
        env="test",
        secret_key="x" * 32,
        stripe_api_base="http://127.0.0.1:1",
        provider_connect_timeout_seconds=1,
    )
    with StripeProvider.from_settings(settings) as provider, pytest.raises(OutcomeUnknown):
        provider.retrieve_payment("pi_fake")


def test_the_parsed_intent_carries_the_last_payment_error_and_raw_object(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        httpx.Response(
            200,
            json=_intent(
                status="requires_payment_method",
                latest_charge="ch_1",
                last_payment_error={
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": "generic_decline",
                    "message": "Your card was declined.",
                },
            ),
        )
    )

    intent = provider.retrieve_payment("pi_fake")

    assert intent.latest_charge == "ch_1"
    assert intent.last_payment_error is not None
    assert intent.last_payment_error.decline_code == "generic_decline"
    assert intent.created == 1_700_000_000
    assert intent.raw["object"] == "payment_intent"
    assert json.dumps(intent.raw)  # plain data, no SDK objects


def test_retry_after_accepts_an_http_date() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    later = format_datetime(datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC), usegmt=True)

    assert retry_after_seconds({"Retry-After": later}, now=now.timestamp()) == 30.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
