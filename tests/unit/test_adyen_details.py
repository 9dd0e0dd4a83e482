"""The shopper's 3-D Secure result forwarded to Adyen's ``/payments/details`` (decision 0073),
on Adyen's library against a fake with Adyen's idempotency semantics (one answer stored per
key, replayed), and the capability every provider declares: no network, no mocks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import urllib3

from orchestrator.providers.adyen_adapter import AdyenProvider
from orchestrator.providers.base import (
    ACTION_RESULT_NOT_SUPPORTED,
    ActionResult,
    Declined,
    OutcomeUnknown,
    PaymentOrder,
    Permanent,
    accepts_action_result,
)
from orchestrator.providers.observed import ObservedProvider
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.fakes.provider import FakeProvider
from tests.fakes.stripe_http import FakeStripeTransport

ORDER = PaymentOrder(
    record_id="pay_01adyen",
    amount=1250,
    currency="eur",
    payment_method="4917610000000000",
    return_url="https://shop.example/return",
)
PASSED = {"details": {"threeDSResult": "eyJ0cmFuc1N0YXR1cyI6IlkifQ=="}, "paymentData": "pd1"}
FAILED = {"details": {"threeDSResult": "eyJ0cmFuc1N0YXR1cyI6Ik4ifQ=="}}
FINGERPRINT = {"details": {"threeds2.fingerprint": "fp"}}


@dataclass
class DetailsFake:
    """``/payments`` answers a fingerprint request; ``/payments/details`` answers the
    shopper's result: a passed challenge authorises, a failed one is refused (11), a
    fingerprint asks for the challenge.  Answers are stored per key and replayed; the
    ``timeout_after_effect`` fault stores the answer and loses it on the way back."""

    faults: list[str] = field(default_factory=list)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    authorisations: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["Idempotency-Key"]
        if key not in self.stored:
            self.stored[key] = self._process(request.url.path, json.loads(request.content))
        if self.faults and self.faults.pop(0) == "timeout_after_effect":
            raise urllib3.exceptions.ReadTimeoutError(None, request.url.path, "Read timed out.")  # type: ignore[arg-type]
        return httpx.Response(200, json=self.stored[key])

    def _process(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/payments"):
            return {
                "resultCode": "IdentifyShopper",
                "action": {"type": "threeDS2", "subtype": "fingerprint"},
            }
        details = body["details"]
        if "threeds2.fingerprint" in details:
            return {
                "resultCode": "ChallengeShopper",
                "action": {"type": "threeDS2", "subtype": "challenge"},
            }
        if details["threeDSResult"] == PASSED["details"]["threeDSResult"]:
            self.authorisations += 1
            return {"pspReference": "PSP0000000000001", "resultCode": "Authorised"}
        return {
            "pspReference": "PSP0000000000002",
            "resultCode": "Refused",
            "refusalReason": "3D Not Authenticated",
            "refusalReasonCode": "11",
        }


def adyen(*faults: str) -> tuple[AdyenProvider, DetailsFake, FakeStripeTransport]:
    fake = DetailsFake(faults=list(faults))
    transport = FakeStripeTransport(fake)
    provider = AdyenProvider(
        api_key="AQE_test_key",
        merchant_account="PayorchECOM",
        api_base="http://adyen.test",
        connect_timeout=1,
        read_timeout=1,
        transport=transport,
    )
    return provider, fake, transport


def test_the_shoppers_result_is_forwarded_as_sent_under_our_derived_key() -> None:
    provider, fake, transport = adyen()

    payment = provider.submit_action_result(
        "reference:pay_01adyen",
        record_id="pay_01adyen",
        action_result=ActionResult(body=PASSED, attempt=1),
        order=ORDER,
    )

    (sent,) = transport.requests
    assert str(sent.url) == "http://adyen.test/v71/payments/details"
    assert sent.headers["Idempotency-Key"] == "payorch-pay_01adyen-details-1"
    assert json.loads(sent.content) == PASSED
    assert payment.status == "succeeded"
    assert payment.id == "PSP0000000000001"
    assert payment.amount_received == 1250
    assert fake.authorisations == 1


def test_a_failed_authentication_is_a_decline_with_adyens_refusal() -> None:
    provider, _, _ = adyen()

    with pytest.raises(Declined) as declined:
        provider.submit_action_result(
            "x", record_id="pay_01adyen", action_result=ActionResult(FAILED, 1), order=ORDER
        )

    assert declined.value.code == "3d_not_authenticated"
    assert declined.value.decline_code == "11"


def test_an_answer_asking_for_another_action_is_requires_action_with_it() -> None:
    provider, _, _ = adyen()

    payment = provider.submit_action_result(
        "x", record_id="pay_01adyen", action_result=ActionResult(FINGERPRINT, 1), order=ORDER
    )

    assert payment.status == "requires_action"
    assert payment.next_action == {
        "type": "adyen_action",
        "adyen_action": {"type": "threeDS2", "subtype": "challenge"},
    }


def test_a_lost_answer_is_read_back_by_replaying_the_details_key_not_the_confirm() -> None:
    provider, fake, transport = adyen("timeout_after_effect")
    result = ActionResult(PASSED, 2)

    with pytest.raises(OutcomeUnknown):
        provider.submit_action_result(
            "x", record_id="pay_01adyen", action_result=result, order=ORDER
        )
    read = provider.retrieve_payment("x", order=ORDER, confirm_attempt=1, action_result=result)

    assert read.status == "succeeded"
    assert [(r.url.path, r.headers["Idempotency-Key"]) for r in transport.requests] == [
        ("/v71/payments/details", "payorch-pay_01adyen-details-2"),
        ("/v71/payments/details", "payorch-pay_01adyen-details-2"),
    ]
    assert json.loads(transport.requests[1].content) == PASSED
    assert fake.authorisations == 1


def test_a_refusal_read_back_from_a_details_replay_is_a_declined_payment_not_an_error() -> None:
    provider, _, _ = adyen()

    read = provider.retrieve_payment(
        "x", order=ORDER, confirm_attempt=1, action_result=ActionResult(FAILED, 1)
    )

    assert read.status == "requires_payment_method"
    assert read.last_payment_error is not None
    assert read.last_payment_error.code == "3d_not_authenticated"


def test_only_adyen_declares_it_takes_a_forwarded_result() -> None:
    stripe = StripeProvider(
        api_key="sk_test_unit", api_base="https://stripe.invalid", connect_timeout=1, read_timeout=1
    )
    provider, _, _ = adyen()

    assert accepts_action_result(provider)
    assert accepts_action_result(ObservedProvider(provider))
    assert not accepts_action_result(stripe)
    assert not accepts_action_result(ObservedProvider(stripe))
    assert not accepts_action_result(FakeProvider())
    assert not accepts_action_result(object())  # a provider that does not say takes none


def test_stripe_refuses_a_forwarded_result_without_sending_anything() -> None:
    sent: list[httpx.Request] = []
    transport = FakeStripeTransport(lambda request: sent.append(request) or httpx.Response(500))
    stripe = StripeProvider(
        api_key="sk_test_unit",
        api_base="https://stripe.invalid",
        connect_timeout=1,
        read_timeout=1,
        transport=transport,
    )

    with pytest.raises(Permanent) as refused:
        stripe.submit_action_result(
            "pi_1", record_id="pay_1", action_result=ActionResult(PASSED, 1)
        )

    assert refused.value.code == ACTION_RESULT_NOT_SUPPORTED
    assert sent == []


def test_the_observed_wrapper_forwards_the_result_and_records_the_step_with_its_key() -> None:
    provider, _, _ = adyen()
    rows: list[Any] = []
    observed = ObservedProvider(provider, rows.append)

    observed.submit_action_result(
        "reference:pay_01adyen",
        record_id="pay_01adyen",
        action_result=ActionResult(PASSED, 1),
        order=ORDER,
    )
    observed.retrieve_payment(
        "PSP0000000000001", order=ORDER, confirm_attempt=1, action_result=ActionResult(PASSED, 1)
    )

    assert [(r.operation, r.method, r.path, r.idempotency_key, r.outcome) for r in rows] == [
        ("details", "POST", "/payments/details", "payorch-pay_01adyen-details-1", "ok"),
        ("retrieve", "POST", AdyenProvider.request_paths["retrieve"][1], None, "ok"),
    ]
    assert rows[0].payment_id == "pay_01adyen"
    assert rows[0].provider_status == "succeeded"


def test_an_abandoned_challenge_is_canceled_without_a_request_only_while_known_by_reference() -> (
    None
):
    provider, _, transport = adyen()

    canceled = provider.cancel_payment(
        "reference:pay_01adyen",
        operation_id="pay_01adyen",
        attempt=1,
        reason="abandoned",
        order=ORDER,
    )
    with pytest.raises(Permanent) as authorised:
        provider.cancel_payment(
            "PSP0000000000001",
            operation_id="pay_01adyen",
            attempt=1,
            reason="abandoned",
            order=ORDER,
        )

    assert (canceled.status, canceled.cancellation_reason) == ("canceled", "abandoned")
    assert canceled.id == "reference:pay_01adyen"
    assert canceled.metadata["payorch_record_id"] == "pay_01adyen"
    # One Adyen knows by a pspReference takes the real cancel (decision 0072), which reads
    # the payment payorch recorded first: none here, so it is refused before sending.
    assert authorised.value.code == "payment_not_recorded"
    assert transport.requests == []
