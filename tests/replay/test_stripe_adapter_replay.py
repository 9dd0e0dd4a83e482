"""Every adapter path, replayed from HTTP the real ``stripe`` SDK exchanged with a provider.

One test, one cassette (``cassettes/stripe_adapter/<test name without test_>.yaml``).  The
assertions are about shape and meaning -- statuses, codes, which of our exceptions -- never
about ids or timestamps, so the same tests hold for a cassette recorded against the simulator
and one recorded against Stripe's test mode (see cassettes/README.md).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import replace

import httpx
import pytest
from vcr.errors import CannotOverwriteExistingCassetteException

from orchestrator.engine.kinds.payment_match import ExpectedPayment, payment_mismatches
from orchestrator.providers import keys
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderError,
    ProviderPayment,
    Retryable,
)
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.stripe_version import PINNED_API_VERSION
from tests.replay.cassette_support import (
    CASSETTE_DIR,
    UNRECORDED_HEADER,
    UNROUTABLE_API_BASE,
    Cassette,
    SocketDuringReplay,
    recorder,
)


def _create(
    cassette: Cassette,
    record: str,
    *,
    amount: int = 2000,
    payment_method: str = "pm_card_visa",
    capture_method: str = "automatic",
) -> ProviderPayment:
    return cassette.provider.create_payment(
        record_id=record,
        amount=amount,
        currency="usd",
        payment_method=payment_method,
        description="payorch replay test",
        metadata={"order": "o-1"},
        capture_method=capture_method,
    )


def _authorised(cassette: Cassette, record: str, *, amount: int = 2000) -> ProviderPayment:
    intent = _create(cassette, record, amount=amount, capture_method="manual")
    return cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)


def _paid(cassette: Cassette, record: str, *, amount: int = 2000) -> ProviderPayment:
    intent = _create(cassette, record, amount=amount)
    return cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)


# -- create / confirm / retrieve -------------------------------------------------------


def test_create_returns_an_unconfirmed_intent_carrying_our_record_id(cassette: Cassette) -> None:
    record = cassette.record_id("order")

    intent = _create(cassette, record)

    assert intent.id.startswith("pi_")
    assert intent.status == "requires_confirmation"
    assert (intent.amount, intent.currency) == (2000, "usd")
    assert intent.metadata == {"order": "o-1", keys.RECORD_ID_METADATA_KEY: record}
    assert intent.latest_charge is None
    assert intent.created is not None


def test_confirm_with_a_success_card_succeeds_and_a_second_confirm_is_unexpected_state(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    intent = _create(cassette, record)

    confirmed = cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)
    with pytest.raises(Permanent) as again:
        cassette.provider.confirm_payment(intent.id, record_id=record, attempt=2)

    assert confirmed.status == "succeeded"
    assert confirmed.id == intent.id
    assert confirmed.latest_charge is not None
    assert confirmed.raw["amount_received"] == 2000
    assert again.value.code == "payment_intent_unexpected_state"
    assert again.value.http_status == 400


def test_confirm_with_a_declining_card_is_a_decline_and_the_intent_shows_why(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    intent = _create(cassette, record, payment_method="pm_card_chargeDeclinedInsufficientFunds")

    with pytest.raises(Declined) as declined:
        cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)
    after = cassette.provider.retrieve_payment(intent.id)

    assert declined.value.code == "card_declined"
    assert declined.value.decline_code == "insufficient_funds"
    assert declined.value.provider_payment_id == intent.id
    assert after.status == "requires_payment_method"
    assert after.last_payment_error is not None
    assert after.last_payment_error.decline_code == "insufficient_funds"


def test_retrieve_reads_an_intent_and_a_missing_one_is_permanent_resource_missing(
    cassette: Cassette,
) -> None:
    intent = _create(cassette, cassette.record_id("order"))

    read = cassette.provider.retrieve_payment(intent.id)
    with pytest.raises(Permanent) as missing:
        cassette.provider.retrieve_payment("pi_payorchDoesNotExist0001")

    assert read == intent  # same id, status, amount, metadata
    assert (missing.value.code, missing.value.http_status) == ("resource_missing", 404)


def test_an_unknown_payment_method_is_permanent_resource_missing(cassette: Cassette) -> None:
    with pytest.raises(Permanent) as caught:
        _create(cassette, cassette.record_id("order"), payment_method="pm_payorch_no_such_card")

    assert caught.value.code == "resource_missing"


def test_an_invalid_api_key_is_permanent(cassette: Cassette) -> None:
    with (
        StripeProvider(
            api_key="sk_invalid_payorch_cassette",
            api_base=cassette.api_base,
            connect_timeout=5,
            read_timeout=20,
        ) as stranger,
        pytest.raises(Permanent) as caught,
    ):
        stranger.retrieve_payment("pi_payorchDoesNotExist0001")

    assert caught.value.http_status == 401


# -- idempotency -----------------------------------------------------------------------


def test_resending_a_create_with_its_key_replays_the_same_intent(cassette: Cassette) -> None:
    record = cassette.record_id("order")

    first = _create(cassette, record)
    second = _create(cassette, record)

    assert second.id == first.id
    assert cassette.response_headers(1).get("idempotent-replayed") == "true"


def test_reusing_a_create_key_with_other_params_is_a_permanent_idempotency_error(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    _create(cassette, record, amount=2000)

    with pytest.raises(Permanent) as caught:
        _create(cassette, record, amount=2100)

    assert caught.value.code == "idempotency_error"
    assert caught.value.http_status == 400


def _hold_confirm_key(cassette: Cassette, provider_payment_id: str, key: str) -> threading.Thread:
    """Recording only: start the first confirm (slowed by a latency fault) outside the
    cassette, and return once the simulator reports it executing."""
    assert cassette.simulator is not None
    simulator = cassette.simulator

    def first_confirm() -> None:
        with httpx.Client(base_url=simulator.url, timeout=10) as http:
            http.post(
                f"/v1/payment_intents/{provider_payment_id}/confirm",
                headers={
                    "Authorization": "Bearer sk_test_payorch_cassettes",
                    "Idempotency-Key": key,
                    # The simulator refuses any other version (or none) before the latency
                    # fault could hold the key: the race would never start.
                    "Stripe-Version": PINNED_API_VERSION,
                    UNRECORDED_HEADER: "1",
                },
            )

    holder = threading.Thread(target=first_confirm)
    holder.start()
    deadline = time.monotonic() + 5
    while not any(
        r["idempotency_key"] == key and r["status"] is None for r in simulator.admin.requests()
    ):
        assert time.monotonic() < deadline, "the first confirm never started"
        time.sleep(0.01)
    return holder


def test_a_confirm_while_its_twin_is_in_flight_is_retryable_key_in_use(
    fault_cassette: Cassette,
) -> None:
    record = fault_cassette.record_id("order")
    intent = _create(fault_cassette, record)
    holder = None
    if fault_cassette.recording:  # set-up of the race; the cassette holds its outcome
        fault_cassette.arm("confirm:latency:seconds=1.0:times=1")
        holder = _hold_confirm_key(fault_cassette, intent.id, keys.confirm_key(record, 1))

    with pytest.raises(Retryable) as conflict:
        fault_cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)
    if holder is not None:
        holder.join()
    settled = fault_cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert (conflict.value.code, conflict.value.http_status) == ("idempotency_key_in_use", 409)
    assert settled.status == "succeeded"  # the twin's saved answer, replayed


def test_a_rate_limited_create_is_retryable_after_the_servers_delay(
    fault_cassette: Cassette,
) -> None:
    record = fault_cassette.record_id("order")
    fault_cassette.arm("create:rate_limit:retry_after=3:times=1")

    with pytest.raises(Retryable) as limited:
        _create(fault_cassette, record)
    created = _create(fault_cassette, record)

    assert limited.value.retry_after == 3.0
    assert limited.value.http_status == 429
    assert created.status == "requires_confirmation"


def test_a_500_after_the_effect_is_an_unknown_outcome_and_retrieve_tells_the_truth(
    fault_cassette: Cassette,
) -> None:
    record = fault_cassette.record_id("order")
    intent = _create(fault_cassette, record)
    fault_cassette.arm("confirm:error_500_after:times=1")

    for _ in range(2):  # the saved 500 replays under the same key
        with pytest.raises(OutcomeUnknown) as unknown:
            fault_cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1)
        assert unknown.value.http_status == 500
    queried = fault_cassette.provider.retrieve_payment(intent.id)

    assert queried.status == "succeeded"
    assert fault_cassette.response_headers(2).get("idempotent-replayed") == "true"


# -- lookup ----------------------------------------------------------------------------


def test_the_lookup_lists_a_bounded_creation_window_and_our_intent_matches_the_record(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    intent = _create(cassette, record)
    assert intent.created is not None
    # From the recorded intent, so the list query is the same on every replay.
    page = cassette.provider.list_payments(
        created_gte=intent.created - 120,
        created_lte=intent.created + 120,
        starting_after=None,
        limit=100,
    )

    listed_payments = page.provider_payments
    named = [i for i in listed_payments if i.metadata.get(keys.RECORD_ID_METADATA_KEY) == record]
    assert [i.id for i in named] == [intent.id]
    expected = ExpectedPayment(
        record_id=record, amount=2000, currency="usd", payment_method="pm_card_visa"
    )
    assert payment_mismatches(named[0], expected) == ()
    assert payment_mismatches(named[0], replace(expected, amount=2001)) != ()
    stranger = cassette.record_id("never-created")
    assert all(i.metadata.get(keys.RECORD_ID_METADATA_KEY) != stranger for i in listed_payments)
    [listed] = [r for r in cassette.recorded.requests if r.method == "GET"]
    assert "created%5Blte%5D" in listed.uri or "created[lte]" in listed.uri
    assert all("/search" not in r.path for r in cassette.recorded.requests)


def test_the_balance_lists_a_windows_movements_with_our_references_from_their_sources(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    paid = _paid(cassette, record)
    refund = cassette.provider.create_refund(
        provider_payment_id=paid.id,
        operation_id=cassette.record_id("refund"),
        attempt=1,
        amount=300,
        reason=None,
        metadata={},
    )
    assert paid.created is not None
    # From the recorded intent, so the list query is the same on every replay.
    window = {"created_gte": paid.created - 120, "created_lte": paid.created + 120}

    first = cassette.provider.list_balance_movements(**window, starting_after=None, limit=1)
    (movement,) = first.movements
    rest = cassette.provider.list_balance_movements(**window, starting_after=movement.id, limit=100)

    assert first.has_more is True
    ours = [m for m in (movement, *rest.movements) if m.source in (paid.latest_charge, refund.id)]
    by_kind = {m.kind: m for m in ours}
    assert set(by_kind) == {"payment", "refund"}
    assert (by_kind["payment"].amount, by_kind["payment"].reference) == (2000, record)
    refunded = by_kind["refund"]
    assert (refunded.amount, refunded.refunded_charge) == (-300, paid.latest_charge)
    assert refunded.reference == cassette.record_id("refund")
    listed = [r for r in cassette.recorded.requests if r.path.endswith("/balance_transactions")]
    assert listed and all("expand" in r.uri for r in listed)


# -- capture / cancel ------------------------------------------------------------------


def test_a_manual_intent_is_captured_in_part_and_a_second_capture_is_unexpected_state(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    authorised = _authorised(cassette, record)

    captured = cassette.provider.capture_payment(
        authorised.id, operation_id=cassette.record_id("capture"), attempt=1, amount_to_capture=1500
    )
    with pytest.raises(Permanent) as again:
        cassette.provider.capture_payment(
            authorised.id,
            operation_id=cassette.record_id("capture"),
            attempt=2,
            amount_to_capture=None,
        )

    assert (authorised.status, authorised.amount_capturable) == ("requires_capture", 2000)
    assert authorised.capture_method == "manual"
    assert captured.status == "succeeded"
    assert (captured.amount_received, captured.amount_capturable) == (1500, 0)
    assert again.value.code == "payment_intent_unexpected_state"
    captures = [r for r in cassette.recorded.requests if r.path.endswith("/capture")]
    assert [r.headers["Idempotency-Key"] for r in captures] == [
        keys.capture_key(cassette.record_id("capture"), 1),
        keys.capture_key(cassette.record_id("capture"), 2),
    ]


def test_an_authorisation_is_canceled_with_a_reason_and_a_paid_intent_cannot_be(
    cassette: Cassette,
) -> None:
    authorised = _authorised(cassette, cassette.record_id("held"))
    paid = _paid(cassette, cassette.record_id("paid"))

    canceled = cassette.provider.cancel_payment(
        authorised.id,
        operation_id=cassette.record_id("cancel-held"),
        attempt=1,
        reason="requested_by_customer",
    )
    with pytest.raises(Permanent) as refused:
        cassette.provider.cancel_payment(
            paid.id, operation_id=cassette.record_id("cancel-paid"), attempt=1, reason=None
        )

    assert (canceled.status, canceled.cancellation_reason) == ("canceled", "requested_by_customer")
    assert canceled.amount_capturable == 0
    assert refused.value.code == "payment_intent_unexpected_state"
    assert cassette.provider.retrieve_payment(paid.id).status == "succeeded"


def test_a_capture_answered_500_after_the_effect_is_unknown_and_retrieve_shows_it_captured(
    fault_cassette: Cassette,
) -> None:
    authorised = _authorised(fault_cassette, fault_cassette.record_id("order"))
    ours = fault_cassette.record_id("capture")
    fault_cassette.arm("capture:error_500_after:times=1")

    with pytest.raises(OutcomeUnknown) as unknown:
        fault_cassette.provider.capture_payment(
            authorised.id, operation_id=ours, attempt=1, amount_to_capture=1200
        )
    queried = fault_cassette.provider.retrieve_payment(authorised.id)

    # What the capture kind reads after an unknown outcome: captured already, never again.
    assert unknown.value.http_status == 500
    assert (queried.status, queried.amount_received, queried.amount_capturable) == (
        "succeeded",
        1200,
        0,
    )


def test_a_cancel_answered_500_after_the_effect_is_unknown_and_retrieve_shows_it_canceled(
    fault_cassette: Cassette,
) -> None:
    authorised = _authorised(fault_cassette, fault_cassette.record_id("held"))
    fault_cassette.arm("cancel:error_500_after:times=1")

    with pytest.raises(OutcomeUnknown) as unknown:
        fault_cassette.provider.cancel_payment(
            authorised.id, operation_id=fault_cassette.record_id("cancel"), attempt=1, reason=None
        )
    queried = fault_cassette.provider.retrieve_payment(authorised.id)

    assert unknown.value.http_status == 500
    assert (queried.status, queried.amount_capturable) == ("canceled", 0)


# -- refunds ---------------------------------------------------------------------------


def test_a_partial_refund_carries_our_refund_id_and_an_over_refund_is_amount_too_large(
    cassette: Cassette,
) -> None:
    paid = _paid(cassette, cassette.record_id("order"))
    ours = cassette.record_id("refund-1")

    refund = cassette.provider.create_refund(
        provider_payment_id=paid.id,
        operation_id=ours,
        attempt=1,
        amount=500,
        reason="requested_by_customer",
        metadata={"ticket": "T-1"},
    )
    with pytest.raises(Permanent) as over:
        cassette.provider.create_refund(
            provider_payment_id=paid.id,
            operation_id=cassette.record_id("refund-2"),
            attempt=1,
            amount=1600,
            reason=None,
            metadata={},
        )
    read = cassette.provider.retrieve_refund(refund.id)

    assert refund.id.startswith("re_")
    assert (refund.provider_payment_id, refund.amount, refund.currency) == (paid.id, 500, "usd")
    assert refund.status == "succeeded"
    assert refund.reason == "requested_by_customer"
    assert refund.metadata == {"ticket": "T-1", keys.REFUND_ID_METADATA_KEY: ours}
    assert (over.value.code, over.value.http_status) == ("amount_too_large", 400)
    assert read == refund


def test_the_refund_lookup_lists_the_intents_refunds_and_ours_is_found_by_metadata(
    cassette: Cassette,
) -> None:
    paid = _paid(cassette, cassette.record_id("order"))
    ours = cassette.record_id("refund-ours")
    made = [
        cassette.provider.create_refund(
            provider_payment_id=paid.id,
            operation_id=cassette.record_id(f"refund-{n}") if n else ours,
            attempt=1,
            amount=100,
            reason=None,
            metadata={},
        )
        for n in range(3)
    ]

    first = cassette.provider.list_refunds(paid.id, starting_after=None, limit=2)
    rest = cassette.provider.list_refunds(paid.id, starting_after=first.refunds[-1].id, limit=2)

    listed = [*first.refunds, *rest.refunds]
    assert first.has_more is True and rest.has_more is False
    assert [r.id for r in listed] == [m.id for m in reversed(made)]  # newest first
    [found] = [r for r in listed if r.metadata.get(keys.REFUND_ID_METADATA_KEY) == ours]
    assert found.id == made[0].id


def test_resending_a_refund_with_its_key_replays_the_same_refund(cassette: Cassette) -> None:
    paid = _paid(cassette, cassette.record_id("order"))
    ours = cassette.record_id("refund")

    first, second = (
        cassette.provider.create_refund(
            provider_payment_id=paid.id,
            operation_id=ours,
            attempt=1,
            amount=700,
            reason=None,
            metadata={},
        )
        for _ in range(2)
    )

    assert second == first
    refund_posts = [i for i, r in enumerate(cassette.recorded.requests) if r.path == "/v1/refunds"]
    assert cassette.response_headers(refund_posts[1]).get("idempotent-replayed") == "true"
    assert cassette.recorded.requests[refund_posts[0]].headers["Idempotency-Key"] == (
        keys.refund_key(ours, 1)
    )


def test_a_refund_answered_500_after_the_effect_is_unknown_and_the_lookup_finds_it(
    fault_cassette: Cassette,
) -> None:
    paid = _paid(fault_cassette, fault_cassette.record_id("order"))
    ours = fault_cassette.record_id("refund")
    fault_cassette.arm("refund:error_500_after:times=1")

    with pytest.raises(OutcomeUnknown) as unknown:
        fault_cassette.provider.create_refund(
            provider_payment_id=paid.id,
            operation_id=ours,
            attempt=1,
            amount=900,
            reason=None,
            metadata={},
        )
    page = fault_cassette.provider.list_refunds(paid.id, starting_after=None, limit=10)

    assert unknown.value.http_status == 500
    [found] = [r for r in page.refunds if r.metadata.get(keys.REFUND_ID_METADATA_KEY) == ours]
    assert (found.amount, found.status) == (900, "succeeded")


# -- authentication, off-session, customers --------------------------------------------


def test_a_3ds_card_confirmed_with_a_return_url_requires_action_with_a_redirect(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    intent = _create(cassette, record, payment_method="pm_card_threeDSecure2Required")

    waiting = cassette.provider.confirm_payment(
        intent.id, record_id=record, attempt=1, return_url="https://shop.example/return"
    )
    read = cassette.provider.retrieve_payment(intent.id)

    assert waiting.status == "requires_action"
    assert waiting.next_action is not None
    assert waiting.next_action["type"] == "redirect_to_url"
    assert waiting.next_action["redirect_to_url"]["return_url"] == "https://shop.example/return"
    assert waiting.client_token is not None
    assert waiting.amount_received in (0, None)
    assert read.status == "requires_action"
    [confirm] = [r for r in cassette.recorded.requests if r.path.endswith("/confirm")]
    assert "return_url" in (confirm.body or b"").decode()


def test_off_session_a_card_that_needs_authentication_is_declined_authentication_required(
    cassette: Cassette,
) -> None:
    record = cassette.record_id("order")
    intent = _create(cassette, record, payment_method="pm_card_authenticationRequired")

    with pytest.raises(Declined) as declined:
        cassette.provider.confirm_payment(intent.id, record_id=record, attempt=1, off_session=True)
    after = cassette.provider.retrieve_payment(intent.id)

    assert declined.value.code == "authentication_required"
    assert declined.value.provider_payment_id == intent.id
    assert after.status == "requires_payment_method"
    assert after.last_payment_error is not None
    assert after.last_payment_error.code == "authentication_required"


def test_an_intent_created_for_a_customer_carries_the_customer(fault_cassette: Cassette) -> None:
    # Simulator only: on Stripe the customer must exist in the test account.
    record = fault_cassette.record_id("order")

    intent = fault_cassette.provider.create_payment(
        record_id=record,
        amount=2000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
        customer="cus_payorchReplay",
    )

    assert intent.customer == "cus_payorchReplay"
    [create] = fault_cassette.recorded.requests
    assert "customer=cus_payorchReplay" in (create.body or b"").decode()


# -- replay safety ---------------------------------------------------------------------


def test_a_cassette_miss_fails_loudly_and_is_never_an_unknown_outcome(
    socket_guard: list[str],
) -> None:
    replaying = recorder("replay")
    borrowed = "create_returns_an_unconfirmed_intent_carrying_our_record_id.yaml"
    assert (CASSETTE_DIR / borrowed).exists()
    with (
        replaying.use_cassette(borrowed, record_mode="none"),
        StripeProvider(
            api_key="sk_test_replay",
            api_base=UNROUTABLE_API_BASE,
            connect_timeout=1,
            read_timeout=1,
        ) as provider,
        pytest.raises(CannotOverwriteExistingCassetteException) as miss,
    ):
        provider.retrieve_payment("pi_never_recorded")

    assert not isinstance(miss.value, ProviderError)
    assert socket_guard == []


def test_a_replay_cannot_open_a_socket(socket_guard: list[str]) -> None:
    with socket.socket() as sock, pytest.raises(SocketDuringReplay):
        sock.connect(("127.0.0.1", 9))
    with pytest.raises(SocketDuringReplay):
        socket.getaddrinfo("api.stripe.com", 443)

    assert len(socket_guard) == 2
