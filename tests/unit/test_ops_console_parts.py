"""Pure parts of the ops read side and the console: list cursors, lease states, the payment
timeline, the signed session's expiry and the sign-in form token."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from orchestrator.api.console.guard import safe_next
from orchestrator.api.console.session import (
    issue_session,
    issue_sign_in_token,
    read_session,
    sign_in_token_matches,
)
from orchestrator.api.console.timeline import build_timeline
from orchestrator.domain.history import LeaseEvent, OutboxEvent, ProviderCall
from orchestrator.domain.model import AuditEntry, PaymentRecord, PaymentRequest
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.ops.errors import InvalidCursor
from orchestrator.ops.lease_documents import lease_state
from orchestrator.ops.payment_reads import PaymentDetail, decode_cursor, encode_cursor
from orchestrator.settings import Settings

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SETTINGS = Settings(
    env="test", secret_key="unit-test-secret-0123456789abcdef0123456789", console_session_minutes=30
)


def _record(**changes) -> PaymentRecord:
    record = PaymentRecord(
        id="pay_" + "b" * 32,
        client_id="cli_shop",
        idempotency_key="k",
        request_fingerprint="f",
        request=PaymentRequest(amount=1000, currency="usd", payment_method="pm_card_visa"),
        status=PaymentStatus.PROCESSING,
        recovery_point=RecoveryPoint.ACCEPTED,
        lease_token=1,
        lease_owner="worker:1",
        locked_until=T0 + timedelta(seconds=60),
        next_attempt_at=None,
        attempts=1,
        unknown_outcomes=0,
        confirm_attempts=0,
        provider="stripe",
        provider_payment_id=None,
        provider_charge_id=None,
        provider_outcome=None,
        failure=None,
        last_error=None,
        response_body=None,
        created_at=T0,
        updated_at=T0,
        completed_at=None,
    )
    return replace(record, **changes)


def test_a_cursor_round_trips_and_anything_else_is_refused() -> None:
    cursor = encode_cursor(T0, "pay_x")
    assert decode_cursor(cursor) == (T0, "pay_x")
    for bad in ("", "!!!", encode_cursor(T0, "pay_x")[:-3], "WyJ4IiwxXQ", "bnVsbA"):
        with pytest.raises(InvalidCursor):
            decode_cursor(bad)


@pytest.mark.parametrize(
    ("changes", "state"),
    [
        ({}, "active"),
        ({"locked_until": T0 - timedelta(seconds=1)}, "expired"),
        ({"lease_owner": None, "next_attempt_at": T0 + timedelta(minutes=1)}, "deferred"),
        ({"lease_owner": None, "next_attempt_at": T0 - timedelta(minutes=1)}, "retry_due"),
        ({"status": PaymentStatus.NEEDS_ATTENTION, "locked_until": None}, "none"),
        ({"status": PaymentStatus.SUCCEEDED, "locked_until": None}, "finished"),
    ],
)
def test_the_lease_state_says_what_the_lease_means(changes, state) -> None:
    assert lease_state(_record(**changes), T0) == state


def test_the_timeline_orders_everything_and_places_a_late_call_where_it_started() -> None:
    record = _record()
    claim = LeaseEvent(1, record.id, "claim", "worker:1", 2, None, "processing", "accepted", T0)
    takeover = LeaseEvent(
        2,
        record.id,
        "takeover",
        "dispatch:operator",
        3,
        None,
        "processing",
        "accepted",
        T0 + timedelta(seconds=30),
    )
    # Sent one second after the claim, answered after the takeover (a frozen worker).
    late_call = ProviderCall(
        1,
        record.id,
        "confirm",
        "POST",
        "/v1/payment_intents/pi_1/confirm",
        "k",
        "ok",
        200,
        "pi_1",
        "succeeded",
        None,
        39_000,
        T0 + timedelta(seconds=40),
    )
    audit = AuditEntry(
        7, "cli_ops", "alice", "takeover", record.id, "frozen", 2, 3, T0 + timedelta(seconds=30)
    )
    event = OutboxEvent(1, record.id, "payment.succeeded", {}, T0 + timedelta(seconds=50), None)
    detail = PaymentDetail(record, T0, [audit], [late_call], [claim, takeover], [event], [])

    titles = [e.title for e in build_timeline(detail)]

    assert titles == [
        "Accepted",
        "Worker claimed the lease",
        "POST /v1/payment_intents/pi_1/confirm",
        "Lease taken over",
        "Operator takeover by alice",
        "Event payment.succeeded",
    ]


def test_a_session_expires_and_a_changed_byte_is_refused() -> None:
    with freeze_time(T0):
        value, session = issue_session(SETTINGS, "cli_ops")
        assert read_session(SETTINGS, value) == session
        # Change a character inside the signature, not its last one: the last base64
        # character carries padding bits, so some changes there decode to the same bytes
        # (this test flaked that way).  Every bit of an inner character is significant.
        inner = len(value) - 5
        changed = "A" if value[inner] != "A" else "B"
        assert read_session(SETTINGS, value[:inner] + changed + value[inner + 1 :]) is None
        # And a changed payload with its old signature.
        payload_at = 0
        flipped = "A" if value[payload_at] != "A" else "B"
        assert read_session(SETTINGS, flipped + value[1:]) is None
    with freeze_time(T0 + timedelta(minutes=29)):
        assert read_session(SETTINGS, value) == session
    with freeze_time(T0 + timedelta(minutes=31)):
        assert read_session(SETTINGS, value) is None
    other = Settings(env="test", secret_key="another-secret-0123456789abcdef0123456789")
    assert read_session(other, value) is None


def test_a_session_signed_before_a_rotation_holds_while_its_key_is_a_previous_one() -> None:
    old = "the-old-secret-key-0123456789abcdef0123456789"
    new = "the-new-secret-key-0123456789abcdef0123456789"
    before = Settings(env="test", secret_key=old)
    value, session = issue_session(before, "cli_ops")
    during = Settings(env="test", secret_key=new, previous_secret_keys=[old])
    after = Settings(env="test", secret_key=new)

    assert read_session(during, value) == session
    assert read_session(after, value) is None
    fresh, fresh_session = issue_session(during, "cli_ops")
    assert read_session(after, fresh) == fresh_session  # signed with the new key
    assert read_session(before, fresh) is None


def test_the_sign_in_token_must_match_its_signed_cookie() -> None:
    cookie, token = issue_sign_in_token(SETTINGS)
    assert sign_in_token_matches(SETTINGS, cookie, token)
    _other_cookie, other_token = issue_sign_in_token(SETTINGS)
    assert not sign_in_token_matches(SETTINGS, cookie, other_token)
    assert not sign_in_token_matches(SETTINGS, None, token)
    assert not sign_in_token_matches(SETTINGS, token, token)  # an unsigned value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/ops/queues", "/ops/queues"),
        ("/ops/payments?q=x", "/ops/payments?q=x"),
        ("https://evil.example/ops/", "/ops/"),
        ("//evil.example/ops/", "/ops/"),
        ("/ops/\\evil", "/ops/"),
        ("/v1/payments", "/ops/"),
        (None, "/ops/"),
    ],
)
def test_sign_in_sends_people_only_inside_the_console(value, expected) -> None:
    assert safe_next(value) == expected
