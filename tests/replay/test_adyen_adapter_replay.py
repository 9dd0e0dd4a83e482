"""The Adyen adapter's authorisation paths, replayed from HTTP that Adyen's library, driven
through ``AdyenProvider``, exchanged with the Adyen simulator.

One test, one cassette (``cassettes/adyen_adapter/<test name without test_>.yaml``).  The
assertions are about meaning -- status, decline code and class, which of our exceptions --
never about pspReferences or other values the simulator makes up, except that ids are equal
*within* one cassette.  Every request and answer is checked against Adyen's Checkout v71
schemas when the cassette is played (``AdyenCassette.check_bodies``).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from vcr.errors import CannotOverwriteExistingCassetteException

from devtools.adyen_simulator import three_ds_result
from orchestrator.providers import keys
from orchestrator.providers.adyen_adapter import AdyenProvider
from orchestrator.providers.adyen_objects import REFERENCE_PREFIX, payment_request
from orchestrator.providers.base import (
    ActionResult,
    Declined,
    OutcomeUnknown,
    PaymentOrder,
    PendingCall,
    Permanent,
    ProviderError,
    RecordedPayment,
    Retryable,
)
from tests.replay.adyen_cassette_support import (
    ADYEN_API_KEY,
    ADYEN_CASSETTE_DIR,
    ADYEN_MERCHANT_ACCOUNT,
    AdyenCassette,
    adyen_recorder,
)
from tests.replay.cassette_support import UNRECORDED_HEADER, UNROUTABLE_API_BASE

RETURN_URL = "https://shop.example/return"


def _card(number: str = "4111111111111111", holder: str | None = None) -> dict[str, Any]:
    """Adyen's test card fields, as the Checkout API's test "encryption" takes them."""
    method: dict[str, Any] = {
        "type": "scheme",
        "encryptedCardNumber": f"test_{number}",
        "encryptedExpiryMonth": "test_03",
        "encryptedExpiryYear": "test_2030",
        "encryptedSecurityCode": "test_737",
    }
    if holder is not None:
        method["holderName"] = holder
    return method


def _order(
    record: str,
    *,
    amount: int = 1250,
    method: dict[str, Any] | None = None,
    capture_method: str = "automatic",
) -> PaymentOrder:
    return PaymentOrder(
        record_id=record,
        amount=amount,
        currency="eur",
        payment_method=method or _card(),
        description="payorch replay test",
        metadata={"order": "o-1"},
        capture_method=capture_method,
        return_url=RETURN_URL,
    )


def _confirm(cassette: AdyenCassette, order: PaymentOrder, attempt: int = 1) -> Any:
    return cassette.provider.confirm_payment(
        REFERENCE_PREFIX + order.record_id, record_id=order.record_id, attempt=attempt, order=order
    )


def _sent(cassette: AdyenCassette, index: int) -> tuple[str, dict[str, Any]]:
    """The idempotency key and body of the cassette's request ``index``."""
    request = cassette.recorded.requests[index]
    key = request.headers.get("Idempotency-Key")
    body = request.body
    return str(key), json.loads(body.decode() if isinstance(body, bytes) else body)


# -- authorisations -------------------------------------------------------------------


def test_an_authorisation_with_automatic_capture_succeeds_under_our_reference_and_key(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"))

    paid = _confirm(adyen_cassette, order)

    assert paid.status == "succeeded"
    assert not paid.id.startswith(REFERENCE_PREFIX)  # Adyen's pspReference
    assert (paid.amount, paid.currency) == (1250, "eur")
    assert paid.amount_received == 1250
    assert paid.metadata[keys.RECORD_ID_METADATA_KEY] == order.record_id
    assert paid.raw["resultCode"] == "Authorised"
    assert paid.raw["merchantReference"] == order.record_id
    key, body = _sent(adyen_cassette, 0)
    assert key == keys.confirm_key(order.record_id, 1)
    assert body == payment_request(order, merchant_account=ADYEN_MERCHANT_ACCOUNT)
    assert "additionalData" not in body  # Adyen's default: immediate capture


def test_an_authorisation_with_manual_capture_requires_capture(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"), capture_method="manual")

    authorised = _confirm(adyen_cassette, order)

    assert authorised.status == "requires_capture"
    assert authorised.amount_capturable == 1250
    assert authorised.capture_method == "manual"
    assert authorised.raw["resultCode"] == "Authorised"
    _, body = _sent(adyen_cassette, 0)
    assert body["additionalData"] == {"manualCapture": "true"}


# -- refusals -------------------------------------------------------------------------


def _refused(cassette: AdyenCassette, holder: str) -> Declined:
    order = _order(cassette.record_id("order"), method=_card(holder=holder))
    with pytest.raises(Declined) as declined:
        _confirm(cassette, order)
    assert declined.value.http_status == 200  # a refusal is an answer, not a failed call
    assert declined.value.provider_payment_id is not None  # Adyen's pspReference
    assert not declined.value.provider_payment_id.startswith(REFERENCE_PREFIX)
    return declined.value


def test_not_enough_balance_is_a_soft_refusal_and_a_card_decline(
    adyen_cassette: AdyenCassette,
) -> None:
    declined = _refused(adyen_cassette, "NOT_ENOUGH_BALANCE")

    assert (declined.code, declined.decline_code) == ("not_enough_balance", "12")
    # Soft at the issuer (may pass later), but the card's problem: no failover.
    assert declined.kind == "card"


def test_a_blocked_card_is_a_hard_refusal_and_a_card_decline(
    adyen_cassette: AdyenCassette,
) -> None:
    declined = _refused(adyen_cassette, "BLOCKED_CARD")

    assert (declined.code, declined.decline_code) == ("blocked_card", "5")
    assert declined.kind == "card"


def test_result_code_error_is_a_provider_decline(adyen_cassette: AdyenCassette) -> None:
    order = _order(adyen_cassette.record_id("order"), method=_card(holder="ERROR"))

    with pytest.raises(Declined) as declined:
        _confirm(adyen_cassette, order)

    assert declined.value.kind == "provider"  # Adyen failed, not the card: worth another route
    assert declined.value.code == "acquirer_error"
    assert declined.value.decline_code == "4"
    assert adyen_cassette.recorded.responses[0]["status"]["code"] == 200


# -- 3-D Secure -----------------------------------------------------------------------


def test_a_3ds2_card_requires_action_with_adyens_challenge(adyen_cassette: AdyenCassette) -> None:
    order = _order(adyen_cassette.record_id("order"), method=_card("5454545454545454"))

    challenged = _confirm(adyen_cassette, order)

    assert challenged.status == "requires_action"
    # No pspReference until /payments/details answers: still known by our reference.
    assert challenged.id == REFERENCE_PREFIX + order.record_id
    assert challenged.next_action is not None
    action = challenged.next_action["adyen_action"]
    assert challenged.next_action["type"] == "adyen_action"
    assert (action["type"], action["subtype"]) == ("threeDS2", "challenge")
    assert action["paymentData"] and action["token"]


# -- 3-D Secure: the shopper's result, forwarded to /payments/details --------------------


def _challenged(cassette: AdyenCassette) -> tuple[PaymentOrder, dict[str, Any]]:
    """A 3DS2 card's order, and Adyen's challenge action for it."""
    order = _order(cassette.record_id("order"), method=_card("4917610000000000"))
    challenged = _confirm(cassette, order)
    assert challenged.status == "requires_action"
    return order, challenged.next_action["adyen_action"]


def _shopper_result(action: dict[str, Any], *, succeed: bool = True) -> ActionResult:
    """What the shopper's 3DS2 component hands the merchant (a pure function of the action,
    so a replay sends the very body that was recorded)."""
    result = three_ds_result(action["authorisationToken"], succeed=succeed)
    return ActionResult(body={"details": {"threeDSResult": result}}, attempt=1)


def _forward(cassette: AdyenCassette, order: PaymentOrder, result: ActionResult) -> Any:
    return cassette.provider.submit_action_result(
        REFERENCE_PREFIX + order.record_id,
        record_id=order.record_id,
        action_result=result,
        order=order,
    )


def test_details_with_a_passed_challenge_authorise_the_payment_under_the_details_key(
    adyen_cassette: AdyenCassette,
) -> None:
    order, action = _challenged(adyen_cassette)
    result = _shopper_result(action)

    paid = _forward(adyen_cassette, order, result)

    assert paid.status == "succeeded"
    assert not paid.id.startswith(REFERENCE_PREFIX)  # the pspReference, named at last
    assert paid.raw["resultCode"] == "Authorised"
    assert paid.raw["merchantReference"] == order.record_id
    key, body = _sent(adyen_cassette, 1)
    assert key == keys.details_key(order.record_id, 1)
    assert body == result.body  # forwarded as the merchant sent it
    assert adyen_cassette.recorded.requests[1].uri.endswith("/v71/payments/details")


def test_details_with_a_failed_challenge_are_a_3d_not_authenticated_card_decline(
    adyen_cassette: AdyenCassette,
) -> None:
    order, action = _challenged(adyen_cassette)

    with pytest.raises(Declined) as declined:
        _forward(adyen_cassette, order, _shopper_result(action, succeed=False))

    assert (declined.value.code, declined.value.decline_code) == ("3d_not_authenticated", "11")
    assert declined.value.kind == "card"
    assert declined.value.http_status == 200


def test_details_whose_answer_is_lost_are_read_back_by_replaying_the_details_key(
    adyen_cassette: AdyenCassette,
) -> None:
    order, action = _challenged(adyen_cassette)
    result = _shopper_result(action)
    adyen_cassette.arm("details:error_500_after:times=1")

    with pytest.raises(OutcomeUnknown):
        _forward(adyen_cassette, order, result)
    read = adyen_cassette.provider.retrieve_payment(
        REFERENCE_PREFIX + order.record_id, order=order, confirm_attempt=1, action_result=result
    )

    assert read.status == "succeeded"
    assert _sent(adyen_cassette, 1) == _sent(adyen_cassette, 2)  # same key, same body
    assert _sent(adyen_cassette, 2)[0] == keys.details_key(order.record_id, 1)
    if adyen_cassette.simulator is not None:  # recording: the simulator authorised once
        payments = adyen_cassette.simulator.admin.payments(reference=order.record_id)
        assert len([p for p in payments if p["status"] in ("authorised", "captured")]) == 1


# -- idempotency: a read is the confirm replayed --------------------------------------


def test_retrieve_replays_the_confirm_key_and_gets_the_stored_answer(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"), capture_method="manual")

    authorised = _confirm(adyen_cassette, order)
    read = adyen_cassette.provider.retrieve_payment(authorised.id, order=order, confirm_attempt=1)

    assert read.id == authorised.id  # the same authorisation, not a second one
    assert read.status == authorised.status == "requires_capture"
    first_key, first_body = _sent(adyen_cassette, 0)
    second_key, second_body = _sent(adyen_cassette, 1)
    assert first_key == second_key == keys.confirm_key(order.record_id, 1)
    assert first_body == second_body
    if adyen_cassette.simulator is not None:  # recording: the simulator authorised once
        payments = adyen_cassette.simulator.admin.payments(reference=order.record_id)
        assert len(payments) == 1


def test_a_500_after_the_effect_is_unknown_and_the_key_replay_finds_the_authorisation(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"))
    adyen_cassette.arm("payments:error_500_after:times=1")

    with pytest.raises(OutcomeUnknown) as unknown:
        _confirm(adyen_cassette, order)
    found = adyen_cassette.provider.retrieve_payment(
        REFERENCE_PREFIX + order.record_id, order=order, confirm_attempt=1
    )

    assert unknown.value.http_status == 500
    assert found.status == "succeeded"
    assert _sent(adyen_cassette, 0)[0] == _sent(adyen_cassette, 1)[0]


def test_past_its_replays_a_lost_authorisation_is_technically_cancelled_by_our_reference(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"), capture_method="manual")
    adyen_cassette.arm("payments:error_500_before:times=1:status=503")
    provider = adyen_cassette.provider

    with pytest.raises(OutcomeUnknown):
        _confirm(adyen_cassette, order)
    # Replays have not settled it: a technical cancel, whose outcome is a notification (none
    # is stored here), so the payment is still processing (it waits for the notification)
    # and the confirm's key is not sent.
    waiting = provider.retrieve_payment(
        REFERENCE_PREFIX + order.record_id,
        order=order,
        confirm_attempt=1,
        unknown_outcomes=provider.technical_cancel_after,
    )
    assert waiting.status == "processing"
    assert "TECHNICAL_CANCEL notification has not arrived" in (waiting.awaiting or "")

    assert len(adyen_cassette.recorded.requests) == 2
    assert adyen_cassette.recorded.requests[1].uri.endswith("/v71/cancels")
    key, body = _sent(adyen_cassette, 1)
    assert key == keys.technical_cancel_key(order.record_id)
    assert body == {
        "merchantAccount": ADYEN_MERCHANT_ACCOUNT,
        "paymentReference": order.record_id,
        "reference": f"{order.record_id}-technical-cancel",
    }
    answer = adyen_cassette.recorded.responses[1]
    assert answer["status"]["code"] == 201
    received = json.loads(answer["body"]["string"])
    assert (received["status"], received["paymentReference"]) == ("received", order.record_id)
    if adyen_cassette.simulator is not None:  # recording: nothing was ever authorised
        assert adyen_cassette.simulator.admin.payments(reference=order.record_id) == []


def _hold_key(cassette: AdyenCassette, order: PaymentOrder, key: str) -> threading.Thread:
    """Recording only: start the first confirm (slowed by a latency fault) outside the
    cassette, and return once the simulator reports it executing."""
    assert cassette.simulator is not None
    simulator = cassette.simulator
    body = payment_request(order, merchant_account=ADYEN_MERCHANT_ACCOUNT)

    def first_confirm() -> None:
        with httpx.Client(base_url=simulator.url, timeout=10) as http:
            http.post(
                "/v71/payments",
                json=body,
                headers={
                    "X-API-Key": ADYEN_API_KEY,
                    "Idempotency-Key": key,
                    UNRECORDED_HEADER: "1",
                },
            )

    holder = threading.Thread(target=first_confirm)
    holder.start()
    deadline = time.monotonic() + 5
    while not any(
        r.get("idempotency_key") == key and r.get("status") is None
        for r in simulator.admin.requests()
    ):
        assert time.monotonic() < deadline, "the first confirm never started"
        time.sleep(0.02)
    return holder


def test_a_confirm_while_its_first_attempt_is_in_flight_is_retryable_704(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"))
    key = keys.confirm_key(order.record_id, 1)
    holder = None
    if adyen_cassette.recording:  # set-up of the race; the cassette holds its outcome
        adyen_cassette.arm("payments:latency:seconds=1.0:times=1")
        holder = _hold_key(adyen_cassette, order, key)

    with pytest.raises(Retryable) as in_progress:
        _confirm(adyen_cassette, order)
    if holder is not None:
        holder.join()
    settled = adyen_cassette.provider.retrieve_payment(
        REFERENCE_PREFIX + order.record_id, order=order, confirm_attempt=1
    )

    assert (in_progress.value.code, in_progress.value.http_status) == ("704", 422)
    assert adyen_cassette.response_headers(0).get("transient-error") == "true"
    assert settled.status == "succeeded"  # the first attempt's saved answer, replayed


# -- errors ---------------------------------------------------------------------------


def test_an_invalid_api_key_is_permanent_authentication_failed(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"))
    stranger = AdyenProvider(
        api_key="AQE_invalid_payorch_cassette",
        merchant_account=ADYEN_MERCHANT_ACCOUNT,
        api_base=adyen_cassette.api_base,
        connect_timeout=5,
        read_timeout=20,
    )
    try:
        with pytest.raises(Permanent) as caught:
            stranger.confirm_payment(
                REFERENCE_PREFIX + order.record_id,
                record_id=order.record_id,
                attempt=1,
                order=order,
            )
    finally:
        stranger.close()

    assert (caught.value.code, caught.value.http_status) == ("authentication_failed", 401)


def test_an_invalid_card_number_is_a_permanent_validation_error(
    adyen_cassette: AdyenCassette,
) -> None:
    order = _order(adyen_cassette.record_id("order"), method=_card("4111111111111112"))

    with pytest.raises(Permanent) as caught:
        _confirm(adyen_cassette, order)

    assert not isinstance(caught.value, Declined)
    assert (caught.value.code, caught.value.http_status) == ("101", 422)


# -- replay itself --------------------------------------------------------------------


def test_an_adyen_cassette_miss_fails_loudly_and_is_never_an_unknown_outcome(
    socket_guard: list[str],
) -> None:
    borrowed = "an_authorisation_with_automatic_capture_succeeds_under_our_reference_and_key.yaml"
    assert (ADYEN_CASSETTE_DIR / borrowed).exists()
    provider = AdyenProvider(
        api_key=ADYEN_API_KEY,
        merchant_account=ADYEN_MERCHANT_ACCOUNT,
        api_base=UNROUTABLE_API_BASE,
        connect_timeout=1,
        read_timeout=1,
    )
    order = _order("never-recorded")
    try:
        with (
            adyen_recorder().use_cassette(borrowed, record_mode="none"),
            pytest.raises(CannotOverwriteExistingCassetteException) as miss,
        ):
            provider.confirm_payment(
                REFERENCE_PREFIX + order.record_id,
                record_id=order.record_id,
                attempt=1,
                order=order,
            )
    finally:
        provider.close()

    assert not isinstance(miss.value, ProviderError)
    assert socket_guard == []


# -- modifications: received now, the outcome by notification (decision 0072) ---------


def _authorised(cassette: AdyenCassette, capture_method: str) -> tuple[PaymentOrder, str]:
    """An authorised payment, recorded by payorch as it would be (for the modification's
    currency)."""
    order = _order(cassette.record_id("order"), capture_method=capture_method)
    paid = _confirm(cassette, order)
    cassette.events.recorded[paid.id] = RecordedPayment(
        record_id=order.record_id,
        amount=order.amount,
        currency=order.currency,
        capture_method=capture_method,
    )
    return order, paid.id


def test_a_partial_capture_is_received_and_a_read_before_its_notification_replays_it(
    adyen_cassette: AdyenCassette,
) -> None:
    order, psp = _authorised(adyen_cassette, "manual")
    operation = adyen_cassette.record_id("cap")

    answered = adyen_cassette.provider.capture_payment(
        psp, operation_id=operation, attempt=1, amount_to_capture=1000
    )
    read = adyen_cassette.provider.retrieve_payment(
        psp,
        pending=PendingCall(
            step="capture",
            operation_id=operation,
            attempt=1,
            amount=1000,
            provider_payment_id=psp,
        ),
    )

    assert answered.status == read.status == "processing"
    assert answered.metadata[keys.RECORD_ID_METADATA_KEY] == order.record_id
    key, body = _sent(adyen_cassette, 1)
    assert key == keys.capture_key(operation, 1)
    assert body == {
        "merchantAccount": ADYEN_MERCHANT_ACCOUNT,
        "reference": operation,
        "amount": {"currency": "EUR", "value": 1000},
    }
    assert _sent(adyen_cassette, 2) == (key, body)  # the replay: the same key and body
    first, again = (
        json.loads(adyen_cassette.recorded.responses[i]["body"]["string"]) for i in (1, 2)
    )
    assert first["status"] == "received"
    assert again["pspReference"] == first["pspReference"]  # Adyen's stored answer


def test_a_cancel_is_received_under_the_operations_key_and_reference(
    adyen_cassette: AdyenCassette,
) -> None:
    _, psp = _authorised(adyen_cassette, "manual")
    operation = adyen_cassette.record_id("cnl")

    answered = adyen_cassette.provider.cancel_payment(
        psp, operation_id=operation, attempt=1, reason=None
    )

    assert answered.status == "processing"
    key, body = _sent(adyen_cassette, 1)
    assert key == keys.cancel_key(operation, 1)
    assert body == {"merchantAccount": ADYEN_MERCHANT_ACCOUNT, "reference": operation}


def test_a_refund_is_pending_under_its_fixed_key_and_a_read_replays_it(
    adyen_cassette: AdyenCassette,
) -> None:
    _, psp = _authorised(adyen_cassette, "automatic")
    operation = adyen_cassette.record_id("rfd")

    refund = adyen_cassette.provider.create_refund(
        provider_payment_id=psp,
        operation_id=operation,
        attempt=1,
        amount=500,
        reason=None,
        metadata={keys.REFUND_ID_METADATA_KEY: operation},
    )
    read = adyen_cassette.provider.retrieve_refund(
        refund.id,
        pending=PendingCall(
            step="refund",
            operation_id=operation,
            attempt=1,
            amount=500,
            provider_payment_id=psp,
        ),
    )

    assert (refund.status, refund.amount, refund.provider_payment_id) == ("pending", 500, psp)
    assert refund.metadata == {keys.REFUND_ID_METADATA_KEY: operation}
    assert (read.id, read.status) == (refund.id, "pending")
    key, body = _sent(adyen_cassette, 1)
    assert key == keys.refund_key(operation, 1)
    assert body["reference"] == operation and body["amount"] == {"currency": "EUR", "value": 500}
    assert _sent(adyen_cassette, 2) == (key, body)
