"""What a stored event may still show of its payment: the client secret only while the
payment waits for its customer with it, the raw idempotency key only until it is purged;
``shown_now`` reads each payment once, and only for events that carry such a value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.event_visibility import visible_payload
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.states import PaymentStatus, WaitingFor
from orchestrator.events.event_reads import shown_now
from tests.unit.records import a_record

SECRET = "pi_1_secret_abc"
WAITING = a_record(waiting_for=WaitingFor.CUSTOMER, client_secret=SECRET)
PAYLOAD = {
    "id": WAITING.id,
    "client_secret": SECRET,
    "next_action": {"type": "use_stripe_sdk"},
    "idempotency_key": "order-1",
}


def test_the_secret_is_shown_while_the_payment_waits_with_it() -> None:
    assert visible_payload(PAYLOAD, WAITING) is PAYLOAD


def test_the_secret_and_next_action_are_hidden_once_the_wait_ended() -> None:
    ended = a_record(status=PaymentStatus.SUCCEEDED)
    shown = visible_payload(PAYLOAD, ended)
    assert shown["client_secret"] is None and shown["next_action"] is None
    assert shown["idempotency_key"] == "order-1"
    assert PAYLOAD["client_secret"] == SECRET  # the stored payload is not changed


def test_a_new_wait_with_another_secret_does_not_reveal_the_old_one() -> None:
    again = a_record(waiting_for=WaitingFor.CUSTOMER, client_secret="pi_1_secret_new")
    assert visible_payload(PAYLOAD, again)["client_secret"] is None


def test_the_key_is_hidden_once_purged_and_everything_when_the_payment_is_gone() -> None:
    purged = a_record(waiting_for=WaitingFor.CUSTOMER, client_secret=SECRET, idempotency_key=None)
    assert visible_payload(PAYLOAD, purged)["idempotency_key"] is None
    assert visible_payload(PAYLOAD, purged)["client_secret"] == SECRET
    gone = visible_payload(PAYLOAD, None)
    assert (gone["client_secret"], gone["idempotency_key"]) == (None, None)


@dataclass(frozen=True)
class _Event:
    payment_id: str
    payload: dict[str, Any]


@dataclass
class _Payments:
    records: dict[str, PaymentRecord]
    reads: list[str] = field(default_factory=list)

    def get(self, payment_id: str) -> PaymentRecord | None:
        self.reads.append(payment_id)
        return self.records.get(payment_id)


def test_shown_now_reads_each_payment_once_and_skips_events_without_such_values() -> None:
    ended = a_record(status=PaymentStatus.SUCCEEDED)
    payments = _Payments({ended.id: ended})
    plain = _Event("pay_other", {"id": "re_1", "amount": 5})
    events = [_Event(ended.id, PAYLOAD), plain, _Event(ended.id, PAYLOAD)]

    shown = shown_now(payments, events)

    assert payments.reads == [ended.id]
    assert [e.payload.get("client_secret") for e in shown] == [None, None, None]
    assert shown[1] is plain


def test_without_keys_only_events_with_a_secret_cost_a_read() -> None:
    payments = _Payments({})
    keyed = _Event("pay_k", {"idempotency_key": "order-9"})
    assert shown_now(payments, [keyed], keys=False) == [keyed]
    assert payments.reads == []
