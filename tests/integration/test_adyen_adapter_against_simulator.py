"""The Adyen adapter over real HTTP against the Adyen simulator, every request it sends and
every answer it reads checked against Adyen's Checkout v71 schemas (``AdyenWatch``).

The property under test is the one that matters at Adyen, where references are not unique:
an authorisation whose outcome is unknown is resolved by replaying the same key, and the
shopper's card is authorised exactly once whatever the network did."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator, start_in_thread
from orchestrator.providers.adyen_adapter import AdyenProvider
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    PaymentOrder,
    PendingCall,
    RecordedPayment,
)
from tests.integration.adyen_simulator_helpers import API_KEY, MERCHANT, card, new_reference
from tests.replay.adyen_schema import AdyenWatch


@dataclass
class Adyen:
    simulator: RunningAdyenSimulator
    provider: AdyenProvider
    watch: AdyenWatch

    def authorisations(self, reference: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.simulator.admin.payments(reference=reference)
            if p.get("status") != "refused"
        ]


@pytest.fixture
def adyen() -> Iterator[Adyen]:
    watch = AdyenWatch()
    # A stalled answer outlasts the adapter's read timeout: the "timeout after the effect".
    with start_in_thread(AdyenSimulatorConfig(answer_observer=watch, stall_seconds=3.0)) as sim:
        provider = AdyenProvider(
            api_key=API_KEY,
            merchant_account=MERCHANT,
            api_base=sim.url,
            connect_timeout=2.0,
            read_timeout=1.0,
        )
        try:
            yield Adyen(sim, provider, watch)
        finally:
            provider.close()
    watch.assert_clean()


def order(reference: str, **overrides: Any) -> PaymentOrder:
    values: dict[str, Any] = {
        "record_id": reference,
        "amount": 1250,
        "currency": "eur",
        "payment_method": card(),
        "return_url": "https://shop.example/return",
    }
    values.update(overrides)
    return PaymentOrder(**values)


def test_an_authorisation_carries_our_reference_and_key_and_succeeds(adyen: Adyen) -> None:
    reference = new_reference()

    payment = adyen.provider.confirm_payment(
        "x", record_id=reference, attempt=1, order=order(reference)
    )

    assert payment.status == "succeeded"
    [authorised] = adyen.authorisations(reference)
    assert authorised["pspReference"] == payment.id
    [sent] = [r for r in adyen.simulator.admin.requests() if r["path"].endswith("/payments")]
    assert sent["idempotency_key"] == f"payorch-{reference}-confirm-1"


def test_an_answer_lost_after_the_effect_is_found_by_replaying_the_key_with_one_authorisation(
    adyen: Adyen,
) -> None:
    reference = new_reference()
    adyen.simulator.admin.add_fault("payments:timeout_after_effect:times=1")

    with pytest.raises(OutcomeUnknown):
        adyen.provider.confirm_payment("x", record_id=reference, attempt=1, order=order(reference))
    found = adyen.provider.retrieve_payment("x", order=order(reference), confirm_attempt=1)

    assert found.status == "succeeded"
    [authorised] = adyen.authorisations(reference)
    assert authorised["pspReference"] == found.id


@pytest.mark.parametrize("mode", ["error_500_before", "error_500_after"])
def test_a_5xx_is_unknown_and_the_replay_of_the_same_key_authorises_once(
    adyen: Adyen, mode: str
) -> None:
    reference = new_reference()
    adyen.simulator.admin.add_fault(f"payments:{mode}:times=1:status=503")

    with pytest.raises(OutcomeUnknown):
        adyen.provider.confirm_payment("x", record_id=reference, attempt=1, order=order(reference))
    found = adyen.provider.retrieve_payment("x", order=order(reference), confirm_attempt=1)
    again = adyen.provider.retrieve_payment("x", order=order(reference), confirm_attempt=1)

    assert found.status == again.status == "succeeded"
    assert found.id == again.id
    assert len(adyen.authorisations(reference)) == 1


def test_a_refusal_is_a_card_decline_with_adyens_code(adyen: Adyen) -> None:
    reference = new_reference()

    with pytest.raises(Declined) as declined:
        adyen.provider.confirm_payment(
            "x",
            record_id=reference,
            attempt=1,
            order=order(reference, payment_method=card(holder="NOT_ENOUGH_BALANCE")),
        )

    assert (declined.value.code, declined.value.decline_code, declined.value.kind) == (
        "not_enough_balance",
        "12",
        "card",
    )
    assert adyen.authorisations(reference) == []


def test_a_manual_capture_payment_stops_authorised_and_uncaptured(adyen: Adyen) -> None:
    reference = new_reference()

    payment = adyen.provider.confirm_payment(
        "x", record_id=reference, attempt=1, order=order(reference, capture_method="manual")
    )

    assert payment.status == "requires_capture"
    assert payment.amount_capturable == 1250


def test_a_3ds2_card_asks_for_the_shoppers_challenge(adyen: Adyen) -> None:
    reference = new_reference()

    payment = adyen.provider.confirm_payment(
        "x",
        record_id=reference,
        attempt=1,
        order=order(reference, payment_method=card("5454545454545454")),
    )

    assert payment.status == "requires_action"
    assert payment.next_action is not None
    assert payment.next_action["adyen_action"]["type"] == "threeDS2"


def test_a_refusal_lost_after_the_effect_reads_back_as_declined_with_no_authorisation(
    adyen: Adyen,
) -> None:
    reference = new_reference()
    refused = order(reference, payment_method=card(holder="NOT_ENOUGH_BALANCE"))
    adyen.simulator.admin.add_fault("payments:timeout_after_effect:times=1")

    with pytest.raises(OutcomeUnknown):
        adyen.provider.confirm_payment("x", record_id=reference, attempt=1, order=refused)
    found = adyen.provider.retrieve_payment("x", order=refused, confirm_attempt=1)

    assert found.status == "requires_payment_method"
    assert found.last_payment_error is not None
    assert found.last_payment_error.code == "not_enough_balance"
    assert adyen.authorisations(reference) == []


@dataclass
class SimulatorNotifications:
    """``ProviderEventLog`` over the simulator's own notification items (what payorch would
    store once verified), for one payment payorch recorded."""

    simulator: RunningAdyenSimulator
    recorded: RecordedPayment
    psp: str

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            item
            for item in self.simulator.admin.notification_items()
            if provider_payment_id in (item.get("originalReference"), item.get("pspReference"))
        ]

    def recorded_payment(self, provider_payment_id: str) -> RecordedPayment | None:
        return self.recorded if provider_payment_id == self.psp else None


@pytest.mark.parametrize(
    ("holder", "status", "refused"),
    [(None, "succeeded", None), ("capture failed", "requires_capture", "capture_failed")],
)
def test_a_partial_capture_reads_its_outcome_from_adyens_notifications(
    adyen: Adyen, holder: str | None, status: str, refused: str | None
) -> None:
    reference = new_reference()
    authorised = adyen.provider.confirm_payment(
        "x",
        record_id=reference,
        attempt=1,
        order=order(reference, capture_method="manual", payment_method=card(holder=holder)),
    )
    log = SimulatorNotifications(
        adyen.simulator, RecordedPayment(reference, 1250, "eur", "manual"), authorised.id
    )
    provider = AdyenProvider(
        api_key=API_KEY,
        merchant_account=MERCHANT,
        api_base=adyen.simulator.url,
        connect_timeout=2.0,
        read_timeout=1.0,
        events=log,
    )
    pending = PendingCall("capture", "cap_sim1", 1, 1000, authorised.id)
    try:
        answered = provider.capture_payment(
            authorised.id, operation_id="cap_sim1", attempt=1, amount_to_capture=1000
        )
        read = provider.retrieve_payment(authorised.id, pending=pending)
    finally:
        provider.close()

    assert answered.status == "processing"
    assert read.status == status
    assert read.amount_received == (1000 if refused is None else None)
    assert (read.refused_call.code if read.refused_call else None) == refused
    captures = adyen.simulator.admin.movements()["captures"]["items"]
    # One capture sent, of the partial amount (undone at the scheme when it failed).
    assert [(c["amount"]["value"], c["failed"]) for c in captures] == [(1000, refused is not None)]
