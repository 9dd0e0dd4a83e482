"""Webhook signatures verify with the standardwebhooks library; secrets are sealed at rest."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from orchestrator.domain.event_types import EVENT_TYPES, subscribes_to, unknown_event_types
from orchestrator.domain.webhooks import Event
from orchestrator.events.event_documents import event_body
from orchestrator.events.secret_box import SecretBox, UnreadableSecret, new_signing_secret
from orchestrator.events.signing import signature_headers

EVENT = Event(
    id=1,
    public_id="evt_" + "a" * 32,
    payment_id="pay_" + "b" * 32,
    client_id="cli_x",
    event_type="payment.succeeded",
    sequence=2,
    payload={"id": "pay_" + "b" * 32, "status": "succeeded", "description": "café <b>"},
    created_at=datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
)


def test_a_signed_body_verifies_with_the_receivers_library() -> None:
    secret = new_signing_secret()
    body = event_body(EVENT)
    headers = signature_headers(EVENT.public_id, body, [secret], timestamp=datetime.now(UTC))

    parsed = Webhook(secret).verify(body.encode(), headers)

    assert parsed["id"] == EVENT.public_id
    assert parsed["sequence"] == 2 and parsed["type"] == "payment.succeeded"
    assert parsed["data"]["object"]["description"] == "café <b>"
    assert headers["webhook-id"] == EVENT.public_id
    assert headers["webhook-signature"].startswith("v1,")


def test_a_changed_body_or_another_secret_does_not_verify() -> None:
    secret = new_signing_secret()
    body = event_body(EVENT)
    headers = signature_headers(EVENT.public_id, body, [secret], timestamp=datetime.now(UTC))
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("succeeded", "failed"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_signing_secret()).verify(body, headers)


def test_during_a_rotation_both_secrets_verify() -> None:
    old, new = new_signing_secret(), new_signing_secret()
    body = event_body(EVENT)
    headers = signature_headers(EVENT.public_id, body, [new, old], timestamp=datetime.now(UTC))
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(body, headers)
    Webhook(old).verify(body, headers)


def test_the_body_is_the_same_text_on_every_attempt() -> None:
    assert event_body(EVENT) == event_body(EVENT)


def test_a_sealed_secret_opens_only_with_the_same_secret_key() -> None:
    secret = new_signing_secret()
    box = SecretBox("k" * 48)
    sealed = box.seal(secret)
    assert secret not in sealed
    assert box.open(sealed) == secret
    with pytest.raises(UnreadableSecret, match="PAYORCH_SECRET_KEY"):
        SecretBox("j" * 48).open(sealed)


def test_a_ring_seals_with_its_first_key_opens_with_any_and_reseals_to_the_first() -> None:
    old, new = "o" * 48, "n" * 48
    secret = new_signing_secret()
    sealed_before = SecretBox(old).seal(secret)
    ring = SecretBox([new, old])

    assert ring.open(sealed_before) == secret
    assert not ring.is_current(sealed_before)
    sealed_now = ring.seal(secret)
    assert ring.is_current(sealed_now)
    with pytest.raises(UnreadableSecret):
        SecretBox(old).open(sealed_now)  # new secrets are sealed under the first key only

    resealed = ring.reseal(sealed_before)
    assert SecretBox(new).open(resealed) == secret
    assert ring.is_current(resealed)


def test_a_secret_sealed_under_a_key_dropped_from_the_ring_is_unreadable_and_not_resealed() -> None:
    sealed = SecretBox("d" * 48).seal(new_signing_secret())
    ring = SecretBox(["n" * 48, "o" * 48])
    with pytest.raises(UnreadableSecret, match="PAYORCH_PREVIOUS_SECRET_KEYS"):
        ring.open(sealed)
    with pytest.raises(UnreadableSecret):
        ring.reseal(sealed)


def test_each_purpose_has_its_own_key_from_the_same_ring() -> None:
    ring = ["n" * 48, "o" * 48]
    sealed = SecretBox(ring).seal("x")
    with pytest.raises(UnreadableSecret):
        SecretBox(ring, purpose=b"another purpose").open(sealed)


def test_secrets_are_standard_webhooks_secrets_with_256_random_bits() -> None:
    secrets = {new_signing_secret() for _ in range(20)}
    assert len(secrets) == 20
    assert all(s.startswith("whsec_") for s in secrets)
    Webhook(next(iter(secrets)))  # the library reads the format


def test_subscriptions_match_their_types_or_everything_and_unknown_types_are_named() -> None:
    assert subscribes_to(["*"], "refund.succeeded")
    assert subscribes_to(["payment.failed", "payment.succeeded"], "payment.succeeded")
    assert not subscribes_to(["payment.failed"], "payment.succeeded")
    assert unknown_event_types(["payment.succeeded", "payment.suceeded", "*"]) == [
        "payment.suceeded"
    ]
    assert "payment.succeeded" in EVENT_TYPES and "payment.failed" in EVENT_TYPES
