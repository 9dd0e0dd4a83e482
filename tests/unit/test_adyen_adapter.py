"""The Adyen adapter on Adyen's library, against a fake with Adyen's idempotency semantics
(``AdyenCheckoutFake``: stored answers per key, 704 while a key's first request runs) and
a fault per request: no network, no mocks of the library."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import urllib3

from orchestrator.domain.states import Outcome
from orchestrator.engine.kinds.payment_reading import Next, read_payment
from orchestrator.providers.adyen_adapter import AdyenProvider, checkout_base_url
from orchestrator.providers.adyen_declines import REFUSALS, refusal
from orchestrator.providers.adyen_errors import ProviderBug
from orchestrator.providers.adyen_objects import REFERENCE_PREFIX
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    PaymentOrder,
    PendingCall,
    Permanent,
    RecordedPayment,
    Retryable,
)
from orchestrator.providers.observed import ObservedProvider
from tests.fakes.stripe_http import FakeStripeTransport

API_KEY = "AQE_test_key"
MERCHANT = "PayorchECOM"

REFUSED_BY_HOLDER = {
    "NOT_ENOUGH_BALANCE": ("12", "Not enough balance"),
    "ISSUER_UNAVAILABLE": ("9", "Issuer Unavailable"),
    "DECLINED": ("2", "Refused"),
}


@dataclass
class AdyenCheckoutFake:
    """Adyen's ``/payments`` as its docs describe it: the first request under a key is
    processed and its answer stored; a replay returns the stored answer.  ``faults`` are
    consumed one per request: ``timeout_after_effect``, ``500_before_effect``,
    ``in_progress`` (704), ``401``, ``422``."""

    faults: list[str] = field(default_factory=list)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    authorisations: list[dict[str, Any]] = field(default_factory=list)
    # (path, body) of each modification processed (a replay under a stored key is not).
    modifications: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "401":
            return httpx.Response(
                401,
                json={
                    "status": 401,
                    "errorCode": "000",
                    "message": "HTTP Status Response - Unauthorized",
                    "errorType": "security",
                },
            )
        if fault == "422":
            return httpx.Response(
                422,
                json={
                    "status": 422,
                    "errorCode": "130",
                    "message": "Required field 'reference' is not provided.",
                    "errorType": "validation",
                },
            )
        if fault == "in_progress":
            return httpx.Response(
                422,
                json={
                    "status": 422,
                    "errorCode": "704",
                    "message": "request already processed or in progress",
                    "errorType": "validation",
                },
                headers={"transient-error": "true"},
            )
        if fault == "500_before_effect":
            return httpx.Response(
                500,
                json={
                    "status": 500,
                    "errorCode": "905",
                    "message": "internal",
                    "errorType": "internal",
                },
            )
        key = request.headers["Idempotency-Key"]
        if key not in self.stored:
            body = json.loads(request.content)
            path = request.url.path
            self.stored[key] = (
                self._process(body) if path.endswith("/payments") else self._modify(path, body)
            )
        if fault == "timeout_after_effect":
            raise urllib3.exceptions.ReadTimeoutError(None, request.url.path, "Read timed out.")  # type: ignore[arg-type]
        return httpx.Response(200, json=self.stored[key])

    def _modify(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A capture, cancel or refund: ``received``, its outcome left to notifications."""
        self.modifications.append((path, body))
        answer = {
            "merchantAccount": body["merchantAccount"],
            "paymentPspReference": path.split("/")[-2],
            "pspReference": f"MOD{len(self.modifications):013d}",
            "reference": body["reference"],
            "status": "received",
        }
        if "amount" in body:
            answer["amount"] = body["amount"]
        return answer

    def _process(self, body: dict[str, Any]) -> dict[str, Any]:
        method = body["paymentMethod"]
        holder = method.get("holderName", "")
        psp = f"PSP{len(self.authorisations) + 1:013d}"
        if holder in REFUSED_BY_HOLDER:
            code, reason = REFUSED_BY_HOLDER[holder]
            return {
                "pspReference": psp,
                "resultCode": "Refused",
                "refusalReason": reason,
                "refusalReasonCode": code,
            }
        if holder == "ERROR":
            return {
                "pspReference": psp,
                "resultCode": "Error",
                "refusalReason": "Acquirer Error",
                "refusalReasonCode": "4",
            }
        if method.get("encryptedCardNumber") == "test_5454545454545454":
            return {
                "resultCode": "ChallengeShopper",
                "action": {
                    "type": "threeDS2",
                    "subtype": "challenge",
                    "paymentData": "pd",
                    "token": "tok",
                },
            }
        self.authorisations.append(body)
        return {
            "pspReference": psp,
            "resultCode": "Authorised",
            "merchantReference": body["reference"],
        }


def card(number: str = "test_4111111111111111", holder: str = "Ada") -> dict[str, str]:
    return {
        "type": "scheme",
        "encryptedCardNumber": number,
        "encryptedExpiryMonth": "test_03",
        "encryptedExpiryYear": "test_2030",
        "encryptedSecurityCode": "test_737",
        "holderName": holder,
    }


def order(**overrides: Any) -> PaymentOrder:
    values: dict[str, Any] = {
        "record_id": "pay_01adyen",
        "amount": 1250,
        "currency": "eur",
        "payment_method": card(),
        "description": "order 7",
        "metadata": {"order": "7"},
        "return_url": "https://shop.example/return",
    }
    values.update(overrides)
    return PaymentOrder(**values)


@dataclass
class StoredNotifications:
    """``ProviderEventLog`` as payorch's store answers it: the items stored (once each) for
    payment ``PSP_PAID``, and the payment as payorch recorded it."""

    items: list[dict[str, Any]] = field(default_factory=list)
    recorded: RecordedPayment | None = field(
        default_factory=lambda: RecordedPayment(
            record_id="pay_01adyen", amount=1250, currency="eur", capture_method="manual"
        )
    )

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        return list(self.items) if provider_payment_id == PSP_PAID else []

    def recorded_payment(self, provider_payment_id: str) -> RecordedPayment | None:
        return self.recorded if provider_payment_id == PSP_PAID else None

    def add(self, code: str, psp: str, reference: str, value: int, **fields: Any) -> None:
        item: dict[str, Any] = {
            "eventCode": code,
            "pspReference": psp,
            "merchantReference": reference,
            "amount": {"currency": "EUR", "value": value},
            "success": "true",
            **fields,
        }
        if code != "AUTHORISATION":
            item["originalReference"] = PSP_PAID
        self.items.append(item)


PSP_PAID = "PSP0000000000001"
Build = Callable[..., tuple[AdyenProvider, AdyenCheckoutFake, FakeStripeTransport]]


@pytest.fixture
def notifications() -> StoredNotifications:
    return StoredNotifications()


@pytest.fixture
def build(notifications: StoredNotifications) -> Build:
    def make(
        *faults: str, api_base: str = "http://adyen.test", live_url_prefix: str | None = None
    ) -> tuple[AdyenProvider, AdyenCheckoutFake, FakeStripeTransport]:
        fake = AdyenCheckoutFake(faults=list(faults))
        transport = FakeStripeTransport(fake)
        provider = AdyenProvider(
            api_key=API_KEY,
            merchant_account=MERCHANT,
            api_base=api_base,
            live_url_prefix=live_url_prefix,
            connect_timeout=1,
            read_timeout=1,
            transport=transport,
            events=notifications,
        )
        return provider, fake, transport

    return make


def test_the_create_sends_nothing_and_names_the_payment_by_our_reference(build: Build) -> None:
    provider, _, transport = build()

    created = provider.create_payment(
        record_id="pay_01adyen",
        amount=1250,
        currency="eur",
        payment_method="storedPM1",
        description=None,
        metadata={},
    )

    assert transport.requests == []
    assert created.id == REFERENCE_PREFIX + "pay_01adyen"
    assert created.status == "requires_confirmation"
    assert created.metadata["payorch_record_id"] == "pay_01adyen"


def test_the_confirm_authorises_with_our_reference_key_and_merchant_account(build: Build) -> None:
    provider, fake, transport = build()

    payment = provider.confirm_payment(
        REFERENCE_PREFIX + "pay_01adyen", record_id="pay_01adyen", attempt=1, order=order()
    )

    (sent,) = transport.requests
    assert str(sent.url) == "http://adyen.test/v71/payments"
    assert sent.headers["Idempotency-Key"] == "payorch-pay_01adyen-confirm-1"
    assert sent.headers["X-API-Key"] == API_KEY
    body = json.loads(sent.content)
    assert body["reference"] == "pay_01adyen"
    assert body["merchantAccount"] == MERCHANT
    assert body["amount"] == {"currency": "EUR", "value": 1250}
    assert "additionalData" not in body  # automatic capture: Adyen's default
    assert payment.status == "succeeded"
    assert payment.id == "PSP0000000000001"
    assert payment.amount_received == 1250
    assert len(fake.authorisations) == 1


def test_a_manual_capture_is_asked_for_per_payment_and_stops_at_requires_capture(
    build: Build,
) -> None:
    provider, _, transport = build()

    payment = provider.confirm_payment(
        "x", record_id="pay_01adyen", attempt=1, order=order(capture_method="manual")
    )

    assert json.loads(transport.requests[0].content)["additionalData"] == {"manualCapture": "true"}
    assert payment.status == "requires_capture"
    assert payment.amount_capturable == 1250


def test_an_answer_lost_after_the_effect_is_resolved_by_replaying_the_same_key(
    build: Build,
) -> None:
    provider, fake, transport = build("timeout_after_effect")

    with pytest.raises(OutcomeUnknown):
        provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())
    found = provider.retrieve_payment("x", order=order(), confirm_attempt=1)

    assert found.status == "succeeded"
    assert [r.headers["Idempotency-Key"] for r in transport.requests] == [
        "payorch-pay_01adyen-confirm-1",
        "payorch-pay_01adyen-confirm-1",
    ]
    assert len(fake.authorisations) == 1


def test_a_5xx_before_the_effect_is_unknown_and_the_replay_authorises_once(build: Build) -> None:
    provider, fake, _ = build("500_before_effect")

    with pytest.raises(OutcomeUnknown):
        provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())
    assert fake.authorisations == []
    found = provider.retrieve_payment("x", order=order(), confirm_attempt=1)

    assert found.status == "succeeded"
    assert len(fake.authorisations) == 1


def test_a_retrieve_before_any_confirm_sends_nothing(build: Build) -> None:
    provider, _, transport = build()

    found = provider.retrieve_payment("x", order=order(), confirm_attempt=0)

    assert found.status == "requires_confirmation"
    assert transport.requests == []


def test_a_read_after_the_charge_is_the_stored_notifications_and_sends_nothing(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, _, transport = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)

    found = provider.retrieve_payment(PSP_PAID)

    assert found.status == "requires_capture"
    assert found.amount_capturable == 1250
    assert found.metadata["payorch_record_id"] == "pay_01adyen"
    assert transport.requests == []


@pytest.mark.parametrize(
    ("holder", "code", "decline_code", "kind"),
    [
        ("NOT_ENOUGH_BALANCE", "not_enough_balance", "12", "card"),
        ("DECLINED", "refused", "2", "card"),
        ("ISSUER_UNAVAILABLE", "issuer_unavailable", "9", "provider"),
        ("ERROR", "acquirer_error", "4", "provider"),
    ],
)
def test_a_refusal_is_a_decline_with_our_code_adyens_code_and_whose_problem_it_is(
    build: Build, holder: str, code: str, decline_code: str, kind: str
) -> None:
    provider, _, _ = build()

    with pytest.raises(Declined) as declined:
        provider.confirm_payment(
            "x", record_id="pay_01adyen", attempt=1, order=order(payment_method=card(holder=holder))
        )

    assert (declined.value.code, declined.value.decline_code, declined.value.kind) == (
        code,
        decline_code,
        kind,
    )
    assert declined.value.provider_payment_id is not None


def test_a_challenge_asks_for_the_shoppers_action_and_keeps_our_reference(build: Build) -> None:
    provider, _, _ = build()

    payment = provider.confirm_payment(
        "x",
        record_id="pay_01adyen",
        attempt=1,
        order=order(payment_method=card(number="test_5454545454545454")),
    )

    assert payment.status == "requires_action"
    assert payment.id == REFERENCE_PREFIX + "pay_01adyen"
    assert payment.next_action is not None
    assert payment.next_action["adyen_action"]["subtype"] == "challenge"


@pytest.mark.parametrize(
    ("fault", "error", "code"),
    [
        ("in_progress", Retryable, "704"),
        ("401", Permanent, "authentication_failed"),
        ("422", Permanent, "130"),
    ],
)
def test_adyens_error_answers_map_to_the_taxonomy(
    build: Build, fault: str, error: type[Exception], code: str
) -> None:
    provider, fake, _ = build(fault)

    with pytest.raises(error) as raised:
        provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())

    assert getattr(raised.value, "code", None) == code
    assert fake.authorisations == []


def test_a_bug_in_the_transport_surfaces_as_itself_not_as_a_timeout(build: Build) -> None:
    provider, _, transport = build()

    def broken(request: httpx.Request) -> httpx.Response:
        raise LookupError("no cassette entry for this request")

    transport.handler = broken
    with pytest.raises(LookupError):
        provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())


def test_a_key_adyen_would_refuse_is_refused_before_anything_is_sent(build: Build) -> None:
    provider, _, transport = build()
    long_id = "pay_" + "x" * 60

    with pytest.raises(Permanent):
        provider.confirm_payment("x", record_id=long_id, attempt=1, order=order(record_id=long_id))
    assert transport.requests == []


def test_the_checkout_url_is_the_test_endpoint_a_configured_root_or_the_live_prefix() -> None:
    assert checkout_base_url("https://checkout-test.adyen.com", None) == (
        "https://checkout-test.adyen.com/v71"
    )
    assert checkout_base_url("http://127.0.0.1:12112/", None) == "http://127.0.0.1:12112/v71"
    assert checkout_base_url("ignored", "1797a841fbb37ca7-AdyenDemo") == (
        "https://1797a841fbb37ca7-AdyenDemo-checkout-live.adyenpayments.com/checkout/v71"
    )


def test_a_live_account_sends_to_its_prefix_url(build: Build) -> None:
    provider, _, transport = build(live_url_prefix="abc123-payorch")

    provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())

    assert str(transport.requests[0].url) == (
        "https://abc123-payorch-checkout-live.adyenpayments.com/checkout/v71/payments"
    )


OPERATION_IDS = {"capture": "cap_01", "cancel": "can_01", "refund": "rfd_01"}


def pending(step: str, attempt: int = 1, amount: int | None = 1000) -> PendingCall:
    return PendingCall(
        step=step,
        operation_id=OPERATION_IDS[step],
        attempt=attempt,
        amount=amount,
        provider_payment_id=PSP_PAID,
    )


def test_a_capture_sends_our_operation_as_reference_and_answers_processing(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, fake, transport = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)

    captured = provider.capture_payment(
        PSP_PAID, operation_id="cap_01", attempt=1, amount_to_capture=1000
    )

    (sent,) = transport.requests
    assert str(sent.url) == f"http://adyen.test/v71/payments/{PSP_PAID}/captures"
    assert sent.headers["Idempotency-Key"] == "payorch-cap_01-capture-1"
    assert json.loads(sent.content) == {
        "merchantAccount": MERCHANT,
        "reference": "cap_01",
        "amount": {"currency": "EUR", "value": 1000},
    }
    assert captured.status == "processing"
    assert captured.metadata["payorch_record_id"] == "pay_01adyen"
    assert len(fake.modifications) == 1


def test_a_read_never_says_a_pending_capture_is_owed_it_replays_it_under_its_key(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, fake, transport = build("timeout_after_effect")
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)

    with pytest.raises(OutcomeUnknown):
        provider.capture_payment(PSP_PAID, operation_id="cap_01", attempt=1, amount_to_capture=1000)
    read = provider.retrieve_payment(PSP_PAID, pending=pending("capture"))

    # Without the call named, the same notifications read as still awaiting a capture.
    assert provider.retrieve_payment(PSP_PAID).status == "requires_capture"
    assert read.status == "processing"
    assert [r.headers["Idempotency-Key"] for r in transport.requests] == [
        "payorch-cap_01-capture-1",
        "payorch-cap_01-capture-1",
    ]
    assert len(fake.modifications) == 1  # the replay was answered from Adyen's store


def test_a_capture_notification_settles_the_read_with_the_captured_amount(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, _, transport = build()
    notifications.add("CAPTURE", "MOD1", "cap_01", 1000)  # before its authorisation
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)
    notifications.add("CAPTURE", "MOD1", "cap_01", 1000)  # a duplicate the store kept twice

    read = provider.retrieve_payment(PSP_PAID, pending=pending("capture"))

    assert read.status == "succeeded"
    assert read.amount_received == 1000
    assert read.refused_call is None
    assert transport.requests == []


@pytest.mark.parametrize(
    ("items", "code", "reason"),
    [
        (
            [
                ("CAPTURE", "MOD1", "true", None),
                ("CAPTURE_FAILED", "MOD1", "true", "Capture Failed"),
            ],
            "capture_failed",
            "Capture Failed",
        ),
        (
            [
                ("CAPTURE_FAILED", "MOD1", "true", "Capture Failed"),
                ("CAPTURE", "MOD1", "true", None),
            ],
            "capture_failed",
            "Capture Failed",
        ),
        (
            [("CAPTURE", "MOD1", "false", "Insufficient balance on payment")],
            "capture_refused",
            "Insufficient balance on payment",
        ),
    ],
)
def test_a_capture_adyen_refused_or_failed_later_is_named_and_the_payment_still_capturable(
    build: Build,
    notifications: StoredNotifications,
    items: list[tuple[str, str, str, str | None]],
    code: str,
    reason: str,
) -> None:
    provider, _, transport = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)
    for event, psp, success, why in items:
        notifications.add(event, psp, "cap_01", 1000, success=success, reason=why or "")

    read = provider.retrieve_payment(PSP_PAID, pending=pending("capture"))

    assert read.status == "requires_capture"
    assert read.refused_call is not None
    assert (read.refused_call.operation_id, read.refused_call.code) == ("cap_01", code)
    assert read.refused_call.message == reason
    assert transport.requests == []


def test_another_operations_capture_does_not_answer_ours(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, fake, _ = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)
    notifications.add("CAPTURE", "MOD9", "cap_other", 1000, success="false", reason="closed")

    read = provider.retrieve_payment(PSP_PAID, pending=pending("capture"))

    assert read.status == "processing"
    assert read.refused_call is None
    assert len(fake.modifications) == 1  # ours, replayed: it never arrived before


def test_a_cancel_is_read_canceled_from_its_notification(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, _, transport = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)

    answered = provider.cancel_payment(PSP_PAID, operation_id="can_01", attempt=1, reason=None)
    notifications.add("CANCELLATION", "MOD1", "can_01", 1250)
    read = provider.retrieve_payment(PSP_PAID, pending=pending("cancel", amount=None))

    (sent,) = transport.requests
    assert str(sent.url).endswith(f"/payments/{PSP_PAID}/cancels")
    assert sent.headers["Idempotency-Key"] == "payorch-can_01-cancel-1"
    assert json.loads(sent.content) == {"merchantAccount": MERCHANT, "reference": "can_01"}
    assert answered.status == "processing"
    assert read.status == "canceled"


def test_a_refund_is_pending_until_its_notification_then_succeeded_or_failed(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, _, transport = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)
    notifications.add("CAPTURE", "MODC", "cap_01", 1250)

    refund = provider.create_refund(
        provider_payment_id=PSP_PAID,
        operation_id="rfd_01",
        attempt=1,
        amount=300,
        reason=None,
        metadata={"payorch_refund_id": "rfd_01"},
    )
    waiting = provider.retrieve_refund(refund.id, pending=pending("refund", amount=300))
    notifications.add("REFUND", refund.id, "rfd_01", 300)
    done = provider.retrieve_refund(refund.id, pending=pending("refund", amount=300))
    notifications.add("REFUND_FAILED", refund.id, "rfd_01", 300, reason="Refund Failed")
    failed = provider.retrieve_refund(refund.id, pending=pending("refund", amount=300))

    assert str(transport.requests[0].url).endswith(f"/payments/{PSP_PAID}/refunds")
    assert json.loads(transport.requests[0].content)["reference"] == "rfd_01"
    # The read before any notification replayed the create under its fixed key.
    assert [r.headers["Idempotency-Key"] for r in transport.requests] == [
        "payorch-rfd_01-refund-1"
    ] * 2
    assert (refund.status, refund.metadata, refund.amount) == (
        "pending",
        {"payorch_refund_id": "rfd_01"},
        300,
    )
    assert (waiting.id, waiting.status) == (refund.id, "pending")
    assert (done.status, done.amount, done.provider_payment_id) == ("succeeded", 300, PSP_PAID)
    assert (failed.status, failed.failure_reason, failed.failure_message) == (
        "failed",
        "refund_failed",
        "Refund Failed",
    )


def test_the_refund_list_is_what_the_notifications_name_newest_first(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, _, transport = build()
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)
    notifications.add("REFUND", "MODA", "rfd_a", 100)
    notifications.add("REFUND", "MODB", "pay_01adyen", 200)  # made without our reference
    notifications.add("REFUND", "MODA", "rfd_a", 100)

    page = provider.list_refunds(PSP_PAID, starting_after=None, limit=100)
    empty = provider.list_refunds("PSP_UNKNOWN", starting_after=None, limit=100)

    assert [(r.id, r.metadata, r.status) for r in page.refunds] == [
        ("MODB", {}, "succeeded"),
        ("MODA", {"payorch_refund_id": "rfd_a"}, "succeeded"),
    ]
    assert not page.has_more
    assert empty.refunds == ()
    assert transport.requests == []


def test_a_modification_of_a_payment_we_never_recorded_is_refused_before_sending(
    build: Build,
) -> None:
    provider, _, transport = build()

    with pytest.raises(Permanent) as raised:
        provider.capture_payment("PSP_NOT_OURS", operation_id="c", attempt=1, amount_to_capture=1)

    assert raised.value.code == "payment_not_recorded"
    assert transport.requests == []


def test_every_refusal_code_has_a_distinct_snake_case_code() -> None:
    codes = [row.code for row in REFUSALS.values()]
    assert len(codes) == len(set(codes))
    assert all(code == code.lower() and " " not in code for code in codes)


def test_an_unknown_refusal_code_is_the_cards_problem_and_an_unknown_error_the_providers() -> None:
    assert refusal("999", "Brand New Reason", result_code="Refused").kind == "card"
    assert refusal("999", "Brand New Reason", result_code="Refused").code == "brand_new_reason"
    assert refusal(None, None, result_code="Error").kind == "provider"


def test_the_library_refusing_to_send_is_a_bug_not_an_outage() -> None:
    provider = AdyenProvider(
        api_key="",
        merchant_account=MERCHANT,
        connect_timeout=1,
        read_timeout=1,
        transport=FakeStripeTransport(AdyenCheckoutFake()),
    )

    with pytest.raises(ProviderBug):
        provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())


def test_the_operators_page_shows_adyens_requests_not_stripes(build: Build) -> None:
    provider, _, _ = build()
    rows: list[Any] = []
    observed = ObservedProvider(provider, rows.append)

    observed.create_payment(
        record_id="pay_01adyen",
        amount=1250,
        currency="eur",
        payment_method="storedPM1",
        description=None,
        metadata={},
    )
    observed.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=order())
    observed.retrieve_payment("x", order=order(), confirm_attempt=1)

    assert [(row.operation, row.method, row.path) for row in rows] == [
        ("create", "-", "(nothing sent: known by our reference)"),
        ("confirm", "POST", "/payments"),
        (
            "retrieve",
            "POST",
            "/payments (the last confirm or details, or the pending modification, replayed)"
            " or /cancels",
        ),
    ]


def test_an_order_without_a_return_url_is_refused_before_anything_is_sent(build: Build) -> None:
    provider, _, transport = build()

    with pytest.raises(Permanent) as raised:
        provider.confirm_payment(
            "x", record_id="pay_01adyen", attempt=1, order=order(return_url=None)
        )

    assert raised.value.code == "return_url_required"
    assert transport.requests == []


def test_a_refusal_whose_answer_was_lost_reads_back_as_a_declined_payment_not_an_error(
    build: Build,
) -> None:
    provider, fake, _ = build("timeout_after_effect")
    refused = order(payment_method=card(holder="NOT_ENOUGH_BALANCE"))

    with pytest.raises(OutcomeUnknown):
        provider.confirm_payment("x", record_id="pay_01adyen", attempt=1, order=refused)
    found = provider.retrieve_payment("x", order=refused, confirm_attempt=1)

    assert found.status == "requires_payment_method"
    assert found.last_payment_error is not None
    assert (found.last_payment_error.code, found.last_payment_error.decline_code) == (
        "not_enough_balance",
        "12",
    )
    reading = read_payment(found)
    assert (reading.next, reading.outcome) == (Next.SETTLE, Outcome.FAILED)
    assert reading.failure is not None and reading.failure.code == "not_enough_balance"
    assert fake.authorisations == []


def test_a_capture_adyen_refuses_outright_is_named_by_the_read_that_replays_it(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, fake, _ = build("422", "422")
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)

    with pytest.raises(Permanent):
        provider.capture_payment(PSP_PAID, operation_id="cap_01", attempt=1, amount_to_capture=1000)
    read = provider.retrieve_payment(PSP_PAID, pending=pending("capture"))

    assert read.status == "requires_capture"
    assert read.refused_call is not None
    assert (read.refused_call.operation_id, read.refused_call.code) == ("cap_01", "130")
    assert fake.modifications == []  # nothing happened at Adyen


def test_a_read_whose_replay_is_unauthorised_raises_for_an_operator(
    build: Build, notifications: StoredNotifications
) -> None:
    provider, _, _ = build("401")
    notifications.add("AUTHORISATION", PSP_PAID, "pay_01adyen", 1250)

    with pytest.raises(Permanent) as raised:
        provider.retrieve_payment(PSP_PAID, pending=pending("capture"))

    assert raised.value.http_status == 401
