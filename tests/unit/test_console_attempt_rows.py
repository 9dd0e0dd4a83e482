"""The console payment page's attempts table (``api.console.attempts``): one row per account
tried, the ended ones from their proof rows, the current one from the payment row."""

from __future__ import annotations

from datetime import timedelta

from orchestrator.api.console.attempts import attempt_rows
from orchestrator.domain.attempts import EndedAttempt
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.states import PaymentStatus
from orchestrator.ops.payment_reads import PaymentDetail
from tests.unit.records import CREATED, a_record

A, B = "ca_a", "ca_b"


def detail_of(record: PaymentRecord, attempts: list[EndedAttempt] | None = None) -> PaymentDetail:
    return PaymentDetail(
        record=record,
        now=CREATED,
        audit=[],
        provider_calls=[],
        lease_events=[],
        events=[],
        ledger=[],
        attempts=attempts or [],
    )


def test_a_payment_that_never_failed_over_has_one_row_in_progress() -> None:
    record = a_record(route=(A,), connector_account_id=A, provider_payment_id="pi_1")
    [row] = attempt_rows(detail_of(record), "processing")
    assert (row.number, row.connector_account, row.provider_payment_id, row.status) == (
        1,
        A,
        "pi_1",
        "processing",
    )
    assert row.started_at == CREATED and row.ended_at is None
    assert (row.failure, row.reason, row.proof) == (None, None, None)


def test_a_failed_over_payment_shows_the_proof_row_then_the_current_attempt() -> None:
    moved_at = CREATED + timedelta(seconds=2)
    finished_at = moved_at + timedelta(seconds=1)
    ended = EndedAttempt(
        payment_id="pay_1",
        number=1,
        connector_account=A,
        provider="stripe",
        provider_payment_id="pi_1",
        status="failed",
        failure={
            "code": "card_declined",
            "decline_code": "try_again_later",
            "message": "Try again.",
            "kind": "provider",
        },
        reason="provider_decline",
        proof="ca_a declined with card_declined (class provider)",
        next_connector_account=B,
        started_at=CREATED,
        ended_at=moved_at,
    )
    record = a_record(
        route=(A, B),
        connector_account_id=B,
        provider="adyen",
        failovers=1,
        status=PaymentStatus.FAILED,
        failure=Failure(code="refused", message="Refused", decline_code="2"),
        completed_at=finished_at,
    )
    first, second = attempt_rows(detail_of(record, [ended]), "failed")
    assert first.failure == "card_declined / try_again_later: Try again."
    assert (first.kind, first.reason, first.next_connector_account) == (
        "provider",
        "provider_decline",
        B,
    )
    assert first.proof == ended.proof
    assert (second.number, second.connector_account, second.provider) == (2, B, "adyen")
    assert second.failure == "refused / 2: Refused"
    assert second.kind is None  # the payment row does not keep a decline's class
    assert (second.started_at, second.ended_at) == (moved_at, finished_at)
