"""What the adapter sends and reads for captures, cancels, refunds, the new create/confirm
fields, and what a Stripe webhook becomes -- through the real SDK over a function-backed
``httpx.MockTransport`` (no network, no mocks of the SDK)."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl

import httpx
import pytest
import stripe
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderEvent,
    WebhookSignatureInvalid,
)
from orchestrator.providers.http_pools import trusted_context
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.providers.stripe_objects import WEBHOOK_TOLERANCE_SECONDS, parse_webhook_event
from tests.fakes.stripe_http import FakeStripeTransport, LocalStripeServer

Handler = Callable[[httpx.Request], httpx.Response]


def _intent(**overrides: object) -> dict[str, object]:
    intent: dict[str, object] = {
        "id": "pi_fake",
        "object": "payment_intent",
        "amount": 1000,
        "currency": "usd",
        "status": "succeeded",
        "metadata": {"payorch_record_id": "rec-1"},
        "created": 1_700_000_000,
    }
    intent.update(overrides)
    return intent


def _refund(**overrides: object) -> dict[str, object]:
    refund: dict[str, object] = {
        "id": "re_fake",
        "object": "refund",
        "amount": 400,
        "currency": "usd",
        "payment_intent": "pi_fake",
        "status": "succeeded",
        "metadata": {"payorch_refund_id": "rfd-1"},
        "reason": None,
        "created": 1_700_000_100,
    }
    refund.update(overrides)
    return refund


class FakeStripe:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.handler: Handler = lambda request: httpx.Response(200, json=_intent())

    def transport(self) -> FakeStripeTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return self.handler(request)

        return FakeStripeTransport(handle)

    def answer(self, status: int, body: dict[str, object]) -> None:
        self.handler = lambda request: httpx.Response(status, json=body)

    def form(self, index: int = -1) -> dict[str, str]:
        request = self.requests[index]
        text = request.content.decode() if request.method == "POST" else request.url.query.decode()
        return dict(parse_qsl(text))


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


# -- create and confirm: the new fields --------------------------------------------------


def _create(provider: StripeProvider, **extra: str) -> None:
    provider.create_payment(
        record_id="rec-1",
        amount=1000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
        **extra,  # type: ignore[arg-type]
    )


def test_create_sends_manual_capture_and_the_customer_when_asked(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    _create(provider, capture_method="manual", customer="cus_123")

    assert fake.form()["capture_method"] == "manual"
    assert fake.form()["customer"] == "cus_123"


def test_create_with_the_defaults_sends_the_same_body_as_before_these_fields_existed(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    # A create key saved by an older release must replay, not turn into idempotency_error.
    _create(provider)

    assert "capture_method" not in fake.form()
    assert "customer" not in fake.form()


def test_confirm_sends_off_session_and_return_url_only_when_given(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    provider.confirm_payment("pi_fake", record_id="rec-1", attempt=1)
    provider.confirm_payment(
        "pi_fake",
        record_id="rec-1",
        attempt=2,
        off_session=True,
        return_url="https://shop.example/back",
    )

    assert fake.form(0) == {}
    assert fake.form(1) == {"off_session": "true", "return_url": "https://shop.example/back"}
    assert fake.requests[1].headers["Idempotency-Key"] == "payorch-rec-1-confirm-2"


def test_an_intent_waiting_for_the_customer_exposes_next_action_and_client_secret(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    next_action = {
        "type": "redirect_to_url",
        "redirect_to_url": {"url": "https://hooks.example/3ds", "return_url": "https://r"},
    }
    fake.answer(
        200,
        _intent(status="requires_action", next_action=next_action, client_secret="pi_s_1"),
    )

    intent = provider.confirm_payment("pi_fake", record_id="rec-1", attempt=1)

    assert intent.status == "requires_action"
    assert intent.next_action == next_action
    assert intent.client_token == "pi_s_1"
    assert "pi_s_1" not in repr(intent)  # a browser could confirm with it: never logged


def test_an_off_session_card_that_needs_authentication_is_a_decline(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        402,
        {
            "error": {
                "type": "card_error",
                "code": "authentication_required",
                "decline_code": "authentication_required",
                "message": "Your card was declined. This transaction requires authentication.",
                "payment_intent": _intent(status="requires_payment_method"),
            }
        },
    )

    with pytest.raises(Declined) as declined:
        provider.confirm_payment("pi_fake", record_id="rec-1", attempt=1, off_session=True)

    assert declined.value.code == "authentication_required"
    assert declined.value.provider_payment_id == "pi_fake"


# -- capture and cancel ----------------------------------------------------------------


def test_capture_sends_the_amount_and_the_operation_key(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(200, _intent(amount_received=600, amount_capturable=0))

    intent = provider.capture_payment(
        "pi_fake", operation_id="op-1", attempt=2, amount_to_capture=600
    )

    request = fake.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v1/payment_intents/pi_fake/capture")
    assert request.headers["Idempotency-Key"] == "payorch-op-1-capture-2"
    assert fake.form() == {"amount_to_capture": "600"}
    assert (intent.amount_received, intent.amount_capturable) == (600, 0)


def test_capture_without_an_amount_takes_everything_capturable(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    provider.capture_payment("pi_fake", operation_id="op-1", attempt=1, amount_to_capture=None)

    assert fake.form() == {}


def test_a_capture_of_an_intent_that_is_not_capturable_is_permanent_unexpected_state(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        400,
        {
            "error": {
                "type": "invalid_request_error",
                "code": "payment_intent_unexpected_state",
                "message": "This PaymentIntent could not be captured because it has a status "
                "of succeeded.",
            }
        },
    )

    with pytest.raises(Permanent) as caught:
        provider.capture_payment("pi_fake", operation_id="op-1", attempt=1, amount_to_capture=None)

    assert caught.value.code == "payment_intent_unexpected_state"


def test_cancel_sends_the_reason_and_reads_it_back(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(200, _intent(status="canceled", cancellation_reason="abandoned"))

    intent = provider.cancel_payment("pi_fake", operation_id="op-2", attempt=1, reason="abandoned")

    assert fake.requests[0].url.path == "/v1/payment_intents/pi_fake/cancel"
    assert fake.requests[0].headers["Idempotency-Key"] == "payorch-op-2-cancel-1"
    assert fake.form() == {"cancellation_reason": "abandoned"}
    assert (intent.status, intent.cancellation_reason) == ("canceled", "abandoned")


def test_a_cancel_that_timed_out_is_an_unknown_outcome(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    def time_out(request: httpx.Request) -> httpx.Response:
        raise urllib3.exceptions.ReadTimeoutError(
            urllib3.HTTPConnectionPool("stripe.invalid"), str(request.url), "read timed out"
        )

    fake.handler = time_out

    with pytest.raises(OutcomeUnknown):
        provider.cancel_payment("pi_fake", operation_id="op-2", attempt=1, reason=None)
    assert len(fake.requests) == 1  # never retried by the SDK


# -- refunds ---------------------------------------------------------------------------


def test_a_refund_carries_our_refund_id_last_so_a_merchant_key_cannot_hide_it(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(200, _refund())

    refund = provider.create_refund(
        provider_payment_id="pi_fake",
        operation_id="rfd-1",
        attempt=1,
        amount=400,
        reason="requested_by_customer",
        metadata={"ticket": "T-9", "payorch_refund_id": "spoofed"},
    )

    request = fake.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v1/refunds")
    assert request.headers["Idempotency-Key"] == "payorch-rfd-1-refund-1"
    assert fake.form() == {
        "payment_intent": "pi_fake",
        "amount": "400",
        "reason": "requested_by_customer",
        "metadata[ticket]": "T-9",
        "metadata[payorch_refund_id]": "rfd-1",
    }
    assert (refund.id, refund.provider_payment_id, refund.amount) == ("re_fake", "pi_fake", 400)
    assert refund.status == "succeeded"
    assert refund.metadata["payorch_refund_id"] == "rfd-1"


def test_an_over_refund_is_permanent_with_stripes_code(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        400,
        {
            "error": {
                "type": "invalid_request_error",
                "code": "amount_too_large",
                "param": "amount",
                "message": "Refund amount ($20.00) is greater than charge amount ($10.00)",
            }
        },
    )

    with pytest.raises(Permanent) as caught:
        provider.create_refund(
            provider_payment_id="pi_fake",
            operation_id="r",
            attempt=1,
            amount=2000,
            reason=None,
            metadata={},
        )

    assert (caught.value.code, caught.value.http_status) == ("amount_too_large", 400)


def test_a_refund_answered_with_a_500_is_an_unknown_outcome(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(500, {"error": {"type": "api_error", "message": "An unknown error occurred"}})

    with pytest.raises(OutcomeUnknown):
        provider.create_refund(
            provider_payment_id="pi_fake",
            operation_id="r",
            attempt=1,
            amount=1,
            reason=None,
            metadata={},
        )


def test_a_failed_refund_reads_its_failure_reason(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(200, _refund(status="failed", failure_reason="expired_or_canceled_card"))

    refund = provider.retrieve_refund("re_fake")

    assert fake.requests[0].url.path == "/v1/refunds/re_fake"
    assert (refund.status, refund.failure_reason) == ("failed", "expired_or_canceled_card")


def test_listing_refunds_asks_for_one_intents_page_after_a_cursor(
    provider: StripeProvider, fake: FakeStripe
) -> None:
    fake.answer(
        200,
        {
            "object": "list",
            "url": "/v1/refunds",
            "has_more": True,
            "data": [_refund(id="re_2"), _refund(id="re_1", metadata={})],
        },
    )

    page = provider.list_refunds("pi_fake", starting_after="re_3", limit=500)

    request = fake.requests[0]
    assert (request.method, request.url.path) == ("GET", "/v1/refunds")
    assert fake.form() == {"payment_intent": "pi_fake", "starting_after": "re_3", "limit": "100"}
    assert [r.id for r in page.refunds] == ["re_2", "re_1"]
    assert page.has_more is True


# -- the connection pool -----------------------------------------------------------------


def test_a_thread_keeps_one_connection_alive_across_calls() -> None:
    # Against a real server: the second call goes out on the first call's connection.
    with (
        LocalStripeServer(_intent()) as server,
        StripeProvider(
            api_key="sk_test_unit",
            api_base=server.url,
            connect_timeout=1.0,
            read_timeout=5.0,
        ) as provider,
    ):
        provider.retrieve_payment("pi_fake")
        provider.retrieve_payment("pi_fake")

    assert server.paths == ["/v1/payment_intents/pi_fake"] * 2
    assert len(set(server.client_ports)) == 1


def test_a_read_after_unknown_outcomes_is_still_stripes_strongly_consistent_get() -> None:
    # The count is for a provider whose read is a replay (Adyen); Stripe reads the intent.
    with (
        LocalStripeServer(_intent()) as server,
        StripeProvider(
            api_key="sk_test_unit", api_base=server.url, connect_timeout=1.0, read_timeout=5.0
        ) as provider,
    ):
        intent = provider.retrieve_payment("pi_fake", confirm_attempt=2, unknown_outcomes=7)

    assert intent.id == "pi_fake"
    assert server.paths == ["/v1/payment_intents/pi_fake"]


def test_requests_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An egress proxy in front of Stripe is common: HTTP_PROXY is honoured (a plain-HTTP
    # proxy sees the absolute URL), and NO_PROXY exempts a host.
    with LocalStripeServer(_intent()) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "stripe.direct.invalid")
        with StripeProvider(
            api_key="sk_test_unit",
            api_base="http://stripe.proxied.invalid",
            connect_timeout=1.0,
            read_timeout=5.0,
        ) as provider:
            intent = provider.retrieve_payment("pi_fake")
            pools = provider._http_client._pools  # type: ignore[attr-defined]
            assert pools.proxy_for("http://stripe.direct.invalid/v1") is None

    assert intent.id == "pi_fake"
    assert proxy.paths == ["http://stripe.proxied.invalid/v1/payment_intents/pi_fake"]
    assert proxy.hosts == ["stripe.proxied.invalid"]


# -- webhooks ----------------------------------------------------------------------------

SECRET = "whsec_unit_test_secret"


def _event(type_: str, obj: dict[str, object]) -> bytes:
    return json.dumps(
        {
            "id": "evt_1",
            "object": "event",
            "api_version": "2026-10-28.endive",
            "created": 1_700_000_200,
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": type_,
            "data": {"object": obj},
        }
    ).encode()


def _sign(payload: bytes, *, secret: str = SECRET, at: int | None = None) -> str:
    timestamp = int(time.time()) if at is None else at
    signature = stripe.WebhookSignature._compute_signature(
        f"{timestamp}.{payload.decode()}", secret
    )
    return f"t={timestamp},v1={signature}"


def test_a_signed_payment_intent_event_names_its_intent() -> None:
    payload = _event("payment_intent.succeeded", _intent())

    event = parse_webhook_event(payload, _sign(payload), SECRET)

    assert event == ProviderEvent(
        id="evt_1",
        type="payment_intent.succeeded",
        created=1_700_000_200,
        object_id="pi_fake",
        object_type="payment_intent",
        provider_payment_id="pi_fake",
    )


@pytest.mark.parametrize(
    ("type_", "obj", "object_type"),
    [
        (
            "charge.refunded",
            {"id": "ch_1", "object": "charge", "payment_intent": "pi_fake"},
            "charge",
        ),
        ("refund.updated", _refund(), "refund"),
        (
            "charge.dispute.created",
            {"id": "dp_1", "object": "dispute", "payment_intent": "pi_fake"},
            "dispute",
        ),
    ],
)
def test_events_about_charges_refunds_and_disputes_name_the_intent_they_belong_to(
    type_: str, obj: dict[str, object], object_type: str
) -> None:
    payload = _event(type_, obj)

    event = parse_webhook_event(payload, _sign(payload), SECRET)

    assert (event.object_type, event.provider_payment_id) == (object_type, "pi_fake")


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "t=1,v1=deadbeef",
        "garbage",
    ],
)
def test_a_missing_or_wrong_signature_is_refused(header: str | None) -> None:
    payload = _event("payment_intent.succeeded", _intent())

    with pytest.raises(WebhookSignatureInvalid):
        parse_webhook_event(payload, header, SECRET)


def test_a_signature_made_with_another_secret_is_refused() -> None:
    payload = _event("payment_intent.succeeded", _intent())

    with pytest.raises(WebhookSignatureInvalid):
        parse_webhook_event(payload, _sign(payload, secret="whsec_other"), SECRET)


def test_a_body_changed_after_signing_is_refused() -> None:
    payload = _event("payment_intent.succeeded", _intent())
    header = _sign(payload)

    with pytest.raises(WebhookSignatureInvalid):
        parse_webhook_event(payload.replace(b"pi_fake", b"pi_evil"), header, SECRET)


def test_a_signature_older_than_the_tolerance_is_refused_and_a_fresh_one_accepted() -> None:
    payload = _event("payment_intent.succeeded", _intent())
    stale = int(time.time()) - WEBHOOK_TOLERANCE_SECONDS - 30
    fresh = int(time.time()) - WEBHOOK_TOLERANCE_SECONDS + 30

    with pytest.raises(WebhookSignatureInvalid):
        parse_webhook_event(payload, _sign(payload, at=stale), SECRET)
    assert parse_webhook_event(payload, _sign(payload, at=fresh), SECRET).id == "evt_1"


def test_a_signed_body_that_is_not_an_event_is_refused() -> None:
    for payload in (b"not json", b'{"id": "evt_1"}'):
        with pytest.raises(WebhookSignatureInvalid):
            parse_webhook_event(payload, _sign(payload), SECRET)


# -- TLS ----------------------------------------------------------------------------------


def test_the_tls_context_trusts_ssl_cert_file_when_it_is_set(tmp_path: Path) -> None:
    # A company's CA behind an intercepting egress proxy: SSL_CERT_FILE names its bundle.
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "payorch test egress CA")])
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    bundle = tmp_path / "egress-ca.pem"
    bundle.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))

    context = trusted_context({"SSL_CERT_FILE": str(bundle)})

    subjects = [dict(entry[0] for entry in ca["subject"]) for ca in context.get_ca_certs()]
    assert subjects == [{"commonName": "payorch test egress CA"}]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_the_tls_context_trusts_certifis_bundle_by_default() -> None:
    context = trusted_context({})

    assert len(context.get_ca_certs()) > 50  # certifi's roots, not an empty store
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
