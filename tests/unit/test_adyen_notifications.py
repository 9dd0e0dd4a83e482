"""Adyen's notifications as events: every item verified with Adyen's HMAC scheme, each one
an event identified as Adyen's duplicates are.  Bodies from Adyen's own examples
(``tests/fixtures/adyen/fixtures.json``), signed here with the fixture key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.providers.adyen_hmac import signed_item
from orchestrator.providers.adyen_notifications import parse_notifications
from orchestrator.providers.base import WebhookSignatureInvalid

FIXTURES = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "adyen" / "fixtures.json").read_text()
)
KEY = FIXTURES["_about"]["fixture_hmac_key_hex"]
OTHER_KEY = "00" * 32


def notification(name: str, *, key: str = KEY, **changes: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(FIXTURES["notifications"][name]["body"]))
    for wrapper in body["notificationItems"]:
        item = {**wrapper["NotificationRequestItem"], **changes}
        wrapper["NotificationRequestItem"] = signed_item(item, key)
    return body


def parse(body: dict[str, Any], keys: Any = KEY) -> list[Any]:
    return parse_notifications(json.dumps(body).encode(), keys)


@pytest.mark.parametrize("name", sorted(FIXTURES["notifications"]))
def test_every_adyen_example_notification_parses_once_signed(name: str) -> None:
    events = parse(notification(name))

    assert len(events) == len(notification(name)["notificationItems"])
    assert all(event.id.startswith("adyen:") for event in events)


def test_an_authorisation_names_our_record_and_its_psp_reference() -> None:
    [event] = parse(notification("authorisation_success", merchantReference="pay_01adyen"))

    assert event.type == "payment_intent.succeeded"
    assert event.provider_payment_id == "QFQTPCQ8HXSKGK82"
    assert event.record_id == "pay_01adyen"


def test_a_refused_authorisation_is_a_failed_payment_event() -> None:
    [event] = parse(notification("authorisation_refused"))

    assert event.type == "payment_intent.payment_failed"


def test_a_cancellation_points_at_the_payment_it_cancelled() -> None:
    [event] = parse(notification("technical_cancel_success"))

    assert event.type == "adyen.technical_cancel"  # stored, wakes the payment
    assert event.provider_payment_id == event.raw["originalReference"]
    # Adyen's example carries the cancelled payment's own reference (our record id): how a
    # technical cancel finds a payment whose pspReference payorch never learnt.
    assert event.record_id == "YOUR_ORIGINAL_REFERENCE"


def test_a_chargeback_is_a_dispute_with_its_amount_and_reason() -> None:
    [event] = parse(notification("chargeback"))

    assert event.object_type == "dispute"
    assert event.dispute is not None
    assert event.dispute.amount == event.raw["amount"]["value"]
    assert event.dispute.currency == event.raw["amount"]["currency"].lower()
    assert event.provider_payment_id == event.raw["originalReference"]


def test_a_duplicate_with_another_event_date_is_the_same_event() -> None:
    [first] = parse(notification("capture_success"))
    [again] = parse(notification("capture_success", eventDate="2021-01-02T09:00:00+01:00"))

    assert first.id == again.id


def test_success_true_and_false_of_one_psp_reference_are_different_events() -> None:
    [ok] = parse(notification("authorisation_success"))
    [refused] = parse(notification("authorisation_success", success="false"))

    assert ok.id != refused.id


def test_a_wrong_key_refuses_the_request() -> None:
    with pytest.raises(WebhookSignatureInvalid):
        parse(notification("capture_success", key=OTHER_KEY))


def test_a_tampered_amount_breaks_the_signature() -> None:
    body = notification("capture_success")
    body["notificationItems"][0]["NotificationRequestItem"]["amount"]["value"] = 1

    with pytest.raises(WebhookSignatureInvalid):
        parse(body)


def test_one_unsigned_item_refuses_the_whole_request() -> None:
    body = notification("capture_success")
    unsigned = json.loads(json.dumps(FIXTURES["notifications"]["refund_failed"]["body"]))
    unsigned["notificationItems"][0]["NotificationRequestItem"]["additionalData"].pop(
        "hmacSignature"
    )
    body["notificationItems"] += unsigned["notificationItems"]

    with pytest.raises(WebhookSignatureInvalid):
        parse(body)


def test_the_old_key_still_verifies_during_a_rotation() -> None:
    events = parse(notification("capture_success", key=KEY), keys=[OTHER_KEY, KEY])

    assert len(events) == 1


def test_an_unknown_field_is_no_reason_to_refuse() -> None:
    [event] = parse(notification("capture_success", brandNewField={"x": 1}))

    assert event.type == "adyen.capture"


@pytest.mark.parametrize("payload", [b"not json", b"{}", b'{"notificationItems": []}'])
def test_a_body_that_is_not_a_notification_is_refused(payload: bytes) -> None:
    with pytest.raises(WebhookSignatureInvalid):
        parse_notifications(payload, KEY)
