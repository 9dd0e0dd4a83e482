"""The Adyen adapter's resolution ladder for an authorisation whose outcome stays unknown:
replay the key, then a technical cancel by our reference, then the stored notifications.

Against a fake of Checkout (``/payments`` and ``/cancels`` with Adyen's per-key stored
answers) and a fake event log that the fake's notifications land in, as payorch's route
stores them: no network, no mocks of the library."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from orchestrator.domain.states import Outcome
from orchestrator.engine.kinds.payment_reading import Next, read_payment
from orchestrator.providers.adyen_adapter import AdyenProvider
from orchestrator.providers.adyen_notifications import event_from_item
from orchestrator.providers.adyen_objects import REFERENCE_PREFIX
from orchestrator.providers.adyen_technical_cancel import FAILURE_CODE
from orchestrator.providers.base import OutcomeUnknown, PaymentOrder
from orchestrator.providers.observed import ObservedProvider
from tests.fakes.stripe_http import FakeStripeTransport

MERCHANT = "PayorchECOM"
RECORD = "pay_01tcancel"
CANCEL_KEY = f"payorch-{RECORD}-technical-cancel"
CONFIRM_KEY = f"payorch-{RECORD}-confirm-1"


@dataclass
class FakeEventLog:
    """The notifications payorch stored, by our record id (``ProviderEventLog``)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    reads: int = 0

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        self.reads += 1
        return [
            i
            for i in self.items
            if event_from_item(i).record_id == record_id
            or (provider_payment_id and i.get("originalReference") == provider_payment_id)
        ]


def item(code: str, psp: str, *, success: bool, **fields: Any) -> dict[str, Any]:
    return {
        "eventCode": code,
        "pspReference": psp,
        "success": "true" if success else "false",
        "merchantAccountCode": MERCHANT,
        "merchantReference": RECORD,
        "amount": {"currency": "EUR", "value": 1250},
        "eventDate": "2026-01-01T00:00:00+00:00",
        **fields,
    }


@dataclass
class Checkout:
    """``/payments`` and ``/cancels`` with Adyen's idempotency: a key's first request is
    processed and its answer kept; a replay gets the kept answer.  ``payments_fail`` /
    ``cancels_fail``: how many of the next requests answer 503 before doing anything.
    ``authorised``: whether an authorisation exists for our reference (its answer lost);
    ``captured``: it was captured automatically.  ``notify``: the cancel's notification is
    stored before its answer returns (else it is "late": never)."""

    events: FakeEventLog
    payments_fail: int = 0
    cancels_fail: int = 0
    authorised: bool = False
    captured: bool = False
    notify: bool = True
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancels_processed: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/payments"):
            if self.payments_fail:
                self.payments_fail -= 1
                return _unavailable()
            return httpx.Response(200, json={"pspReference": "AUTHPSP", "resultCode": "Authorised"})
        assert path.endswith("/cancels"), path
        if self.cancels_fail:
            self.cancels_fail -= 1
            return _unavailable()
        key = request.headers["Idempotency-Key"]
        if key not in self.kept:
            self.kept[key] = self._cancel(json.loads(request.content))
        return httpx.Response(201, json=self.kept[key])

    def _cancel(self, body: dict[str, Any]) -> dict[str, Any]:
        self.cancels_processed += 1
        mod = f"TCPSP{self.cancels_processed:011d}"
        if self.notify:
            if not self.authorised:
                self.events.items.append(
                    item("TECHNICAL_CANCEL", mod, success=False, reason="not found")
                )
            else:
                self.events.items.append(
                    item(
                        "TECHNICAL_CANCEL",
                        mod,
                        success=not self.captured,
                        originalReference="AUTHPSP",
                    )
                )
        return {
            "merchantAccount": body["merchantAccount"],
            "paymentReference": body["paymentReference"],
            "reference": body["reference"],
            "pspReference": mod,
            "status": "received",
        }


def _unavailable() -> httpx.Response:
    return httpx.Response(
        503, json={"status": 503, "errorCode": "905", "message": "x", "errorType": "internal"}
    )


def order(**overrides: Any) -> PaymentOrder:
    values: dict[str, Any] = {
        "record_id": RECORD,
        "amount": 1250,
        "currency": "eur",
        "payment_method": {"type": "scheme", "storedPaymentMethodId": "8415718415172200"},
        "return_url": "https://shop.example/return",
    }
    values.update(overrides)
    return PaymentOrder(**values)


def build(**checkout: Any) -> tuple[AdyenProvider, Checkout, FakeStripeTransport, FakeEventLog]:
    events = FakeEventLog()
    fake = Checkout(events=events, **checkout)
    transport = FakeStripeTransport(fake)
    provider = AdyenProvider(
        api_key="AQE_test_key",
        merchant_account=MERCHANT,
        api_base="http://adyen.test",
        connect_timeout=1,
        read_timeout=1,
        transport=transport,
        events=events,
        technical_cancel_after=3,
    )
    return provider, fake, transport, events


def retrieve(provider: Any, unknown: int, **overrides: Any) -> Any:
    return provider.retrieve_payment(
        REFERENCE_PREFIX + RECORD,
        order=order(**overrides),
        confirm_attempt=1,
        unknown_outcomes=unknown,
    )


def keys(transport: FakeStripeTransport) -> list[tuple[str, str]]:
    return [(r.url.path, r.headers["Idempotency-Key"]) for r in transport.requests]


def test_below_the_threshold_the_read_replays_the_confirms_key() -> None:
    provider, _, transport, _ = build()

    found = retrieve(provider, 2)

    assert found.status == "succeeded"
    assert keys(transport) == [("/v71/payments", CONFIRM_KEY)]


def test_at_the_threshold_a_technical_cancel_by_our_reference_replaces_the_replay() -> None:
    provider, fake, transport, _ = build(notify=False)

    found = retrieve(provider, 3)

    # Adyen has the cancel; its answer is a notification: the payment waits for it.
    assert found.status == "processing"
    assert "TECHNICAL_CANCEL notification has not arrived" in (found.awaiting or "")
    assert read_payment(found).next is Next.WAIT
    assert keys(transport) == [("/v71/cancels", CANCEL_KEY)]
    assert json.loads(transport.requests[0].content) == {
        "merchantAccount": MERCHANT,
        "paymentReference": RECORD,
        "reference": f"{RECORD}-technical-cancel",
    }
    assert fake.cancels_processed == 1


def test_while_its_notification_is_awaited_the_cancel_is_resent_never_the_confirm() -> None:
    provider, fake, transport, _ = build(notify=False)

    for unknown in (3, 4, 5):
        assert retrieve(provider, unknown).status == "processing"

    assert keys(transport) == [("/v71/cancels", CANCEL_KEY)] * 3
    assert fake.cancels_processed == 1  # Adyen answers the kept one


def test_a_cancel_that_found_no_payment_fails_the_payment_as_the_providers_problem() -> None:
    provider, _, transport, _ = build(authorised=False)

    found = retrieve(provider, 3)

    assert found.status == "requires_payment_method"
    error = found.last_payment_error
    assert error is not None
    assert error.code == FAILURE_CODE
    assert error.kind == "provider"
    assert "TCPSP00000000001" in (error.message or "")
    assert "nothing was authorised" in (error.message or "")
    reading = read_payment(found)
    assert (reading.next, reading.outcome) == (Next.SETTLE, Outcome.FAILED)
    assert reading.failure is not None and reading.failure.code == FAILURE_CODE
    assert keys(transport) == [("/v71/cancels", CANCEL_KEY)]


def test_once_the_cancels_notification_is_stored_a_read_sends_nothing_at_all() -> None:
    provider, _, transport, _ = build(authorised=False)
    retrieve(provider, 3)

    again = retrieve(provider, 3)

    assert again.last_payment_error is not None
    assert again.last_payment_error.code == FAILURE_CODE
    assert keys(transport) == [("/v71/cancels", CANCEL_KEY)]


def test_an_authorisation_the_cancel_undid_is_failed_naming_both_and_nothing_charged() -> None:
    provider, _, _, _ = build(authorised=True)

    found = retrieve(provider, 3, capture_method="manual")

    assert found.id == "AUTHPSP"
    assert found.status == "requires_payment_method"
    assert found.amount_received is None
    error = found.last_payment_error
    assert error is not None and error.kind == "provider"
    assert "cancelled authorisation AUTHPSP" in (error.message or "")


def test_a_captured_authorisation_the_cancel_could_not_undo_is_read_as_succeeded() -> None:
    provider, _, _, events = build(authorised=True, captured=True)
    events.items.append(item("AUTHORISATION", "AUTHPSP", success=True))

    found = retrieve(provider, 3)

    assert (found.id, found.status, found.amount_received) == ("AUTHPSP", "succeeded", 1250)


def test_a_payment_the_cancel_could_not_undo_waits_for_its_authorisation_notification() -> None:
    provider, _, _, events = build(authorised=True, captured=True)

    waiting = retrieve(provider, 3)

    assert waiting.status == "processing"
    assert "could not cancel payment AUTHPSP" in (waiting.awaiting or "")

    events.items.append(item("AUTHORISATION", "AUTHPSP", success=True))
    assert retrieve(provider, 4).status == "succeeded"


def test_a_refused_payment_the_cancel_found_is_a_card_decline_with_its_reason() -> None:
    provider, _, _, events = build(authorised=True, captured=True)
    events.items.append(
        item("AUTHORISATION", "AUTHPSP", success=False, reason="Not enough balance")
    )

    found = retrieve(provider, 3)

    assert found.status == "requires_payment_method"
    error = found.last_payment_error
    assert error is not None
    assert (error.code, error.kind) == ("not_enough_balance", "card")


def test_a_lost_answer_to_the_cancel_is_unknown_and_resent_under_the_same_key() -> None:
    provider, fake, transport, _ = build(cancels_fail=1)

    with pytest.raises(OutcomeUnknown):
        retrieve(provider, 3)
    found = retrieve(provider, 4)

    assert found.last_payment_error is not None
    assert found.last_payment_error.code == FAILURE_CODE
    assert keys(transport) == [("/v71/cancels", CANCEL_KEY)] * 2
    assert fake.cancels_processed == 1


@pytest.mark.parametrize("reference", [RECORD, f"{RECORD}-technical-cancel"])
def test_a_technical_cancel_notification_finds_its_payment_by_our_reference(
    reference: str,
) -> None:
    event = event_from_item(
        item("TECHNICAL_CANCEL", "TCPSP", success=True, merchantReference=reference)
    )

    assert event.record_id == RECORD
    assert event.type == "adyen.technical_cancel"


def test_other_modifications_do_not_claim_a_payment_by_reference() -> None:
    event = event_from_item(item("CANCELLATION", "CPSP", success=True, originalReference="P"))

    assert event.record_id is None


def test_the_observed_wrapper_forwards_the_count_of_unknown_outcomes() -> None:
    provider, _, transport, _ = build(notify=False)
    observed = ObservedProvider(provider)

    found = observed.retrieve_payment(
        REFERENCE_PREFIX + RECORD, order=order(), confirm_attempt=1, unknown_outcomes=3
    )

    assert found.status == "processing"

    assert keys(transport) == [("/v71/cancels", CANCEL_KEY)]
