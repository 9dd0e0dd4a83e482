"""A plain payment record for unit tests of pure functions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from orchestrator.domain.model import PaymentRecord, PaymentRequest
from orchestrator.domain.states import PaymentStatus, RecoveryPoint

CREATED = datetime(2026, 12, 1, 8, 0, 0, 123456, tzinfo=UTC)


def a_record(**changes: Any) -> PaymentRecord:
    record = PaymentRecord(
        id="pay_" + "1" * 32,
        client_id="cli_1",
        idempotency_key="order-1",
        request_fingerprint="f" * 64,
        request=PaymentRequest(
            amount=1999,
            currency="usd",
            payment_method="pm_card_visa",
            metadata={"zeta": "1", "alpha": "2", "mid": "3"},
        ),
        status=PaymentStatus.PROCESSING,
        recovery_point=RecoveryPoint.ACCEPTED,
        lease_token=1,
        lease_owner="dispatch",
        locked_until=CREATED,
        next_attempt_at=None,
        attempts=0,
        unknown_outcomes=0,
        confirm_attempts=0,
        provider="stripe",
        provider_payment_id=None,
        provider_charge_id=None,
        provider_outcome=None,
        failure=None,
        last_error=None,
        response_body=None,
        created_at=CREATED,
        updated_at=CREATED,
        completed_at=None,
    )
    return replace(record, **changes)
