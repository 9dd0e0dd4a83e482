"""Accepting a refund: the first transaction of the refund operation.

One short transaction, in this order:

1. lock the client's payment row (``FOR NO KEY UPDATE``): concurrent refunds of one payment queue
   here, and each sees the committed reservations of those before it;
2. a key already taken is answered from its refund (a replay, or 422 for another request),
   whatever the payment's money says now;
3. only a ``succeeded`` payment is refundable (409 ``payment-not-refundable``);
4. ``amount`` defaults to what is left; more than is left is 409 ``refund-exceeds-captured``;
5. insert the refund (``INSERT … ON CONFLICT DO NOTHING``) and raise the payment's
   ``amount_refund_reserved`` with a conditional UPDATE (``… + :amount <= amount_captured``)
   — the database, not this code, has the last word: an UPDATE that matches nothing rolls
   the refund back.

A refusal raises inside the transaction, so nothing is stored.  The key's protocol (replay,
422, the publish after the commit) is ``services.operation_accept``'s, shared with captures
and cancels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.domain.operations import (
    OperationKindName,
    OperationRecord,
    OperationStatus,
    new_operation_id,
)
from orchestrator.domain.refund_representation import refund_representation
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.logging import get_logger
from orchestrator.services.operation_accept import (
    accept_operation,
    dispatch_lease,
    new_operation_values,
)
from orchestrator.settings import Settings

log = get_logger(__name__)

REFUND = OperationKindName.REFUND


@dataclass(frozen=True)
class RefundRequest:
    amount: int | None
    reason: str | None
    metadata: dict[str, str]


class PaymentNotFound(Exception):
    pass


class PaymentNotRefundable(Exception):
    def __init__(self, payment: PaymentRecord) -> None:
        super().__init__(f"payment {payment.id} is {payment.status.value}")
        self.payment = payment


class RefundExceedsCaptured(Exception):
    """The payment's money at the refusal: ``captured``, of which ``refunded`` went back
    in succeeded refunds and ``pending`` is held by refunds still in flight."""

    def __init__(self, requested: int | None, payment: PaymentRecord) -> None:
        self.requested = requested
        self.captured = payment.amount_captured
        self.refunded = payment.amount_refunded
        # The reservation counts every refund that has not failed, succeeded ones included.
        self.pending = max(0, payment.amount_refund_reserved - payment.amount_refunded)
        self.left = payment.amount_captured - payment.amount_refund_reserved
        super().__init__(f"refund of {requested} exceeds the {self.left} left")


@dataclass(frozen=True)
class AcceptedRefund:
    record: OperationRecord
    replayed: bool


def accept_refund(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    client: ApiClient,
    payment_id: str,
    idempotency_key: str,
    request: RefundRequest,
    fingerprint: str,
) -> AcceptedRefund:
    """Raises PaymentNotFound, PaymentNotRefundable, RefundExceedsCaptured (nothing stored)
    or IdempotencyKeyReused."""

    def insert(unit: UnitOfWork, now: datetime, wake: bool) -> OperationRecord | None:
        payment = unit.money.lock_payment(client.id, payment_id)
        if payment is None:
            raise PaymentNotFound(payment_id)
        if unit.operations.find_by_key(client.id, REFUND, idempotency_key) is not None:
            return None  # answered from the refund that holds the key
        if payment.status is not PaymentStatus.SUCCEEDED:
            raise PaymentNotRefundable(payment)
        left = payment.amount_captured - payment.amount_refund_reserved
        amount = left if request.amount is None else request.amount
        if amount <= 0 or amount > left:
            raise RefundExceedsCaptured(request.amount, payment)
        values = new_operation_values(
            new_operation_id(REFUND),
            REFUND,
            payment,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            amount=amount,
            reason=request.reason,
            metadata=request.metadata,
        )
        values.update(dispatch_lease(settings, now))
        # The 202 body, encoded once and stored with the claim (replays serve these bytes).
        values["accepted_response"] = encode_representation(
            refund_representation(_accepted_record(values))
        ).decode("utf-8")
        # A refusal below rolls the NOTIFY back with the row: it is sent on commit only.
        record = unit.operations.insert_if_absent(values, wake=wake)
        if record is None:
            return None
        if unit.money.reserve_refund(payment.id, amount) is None:
            # The lock makes this unreachable; the conditional UPDATE keeps it so.
            raise RefundExceedsCaptured(request.amount, payment)
        return record

    claimed = accept_operation(
        uow,
        publisher,
        settings,
        client_id=client.id,
        kind=REFUND,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        insert=insert,
    )
    return AcceptedRefund(claimed.record, replayed=claimed.replayed)


def _accepted_record(values: dict[str, Any]) -> OperationRecord:
    """The row ``values`` will insert, as the record its representation is made from."""
    return OperationRecord(
        id=values["id"],
        kind=REFUND,
        payment_id=values["payment_id"],
        client_id=values["client_id"],
        status=OperationStatus.PROCESSING,
        recovery_point=RecoveryPoint.ACCEPTED,
        lease_token=values["lease_token"],
        lease_owner=values["lease_owner"],
        locked_until=values["locked_until"],
        next_attempt_at=None,
        attempts=0,
        unknown_outcomes=0,
        step_attempts=0,
        lookup_pending=False,
        last_error=None,
        amount=values["amount"],
        currency=values["currency"],
        reason=values["reason"],
        metadata=values["metadata"],
        origin=values["origin"],
        provider_object_id=None,
        provider_outcome=None,
        failure_code=None,
        failure_message=None,
        created_at=values["created_at"],
        updated_at=values["updated_at"],
        completed_at=None,
    )


def get_refund(
    uow: Callable[..., UnitOfWork], client: ApiClient, refund_id: str
) -> OperationRecord | None:
    with uow(read_only=True) as unit:
        record = unit.operations.get_for_client(client.id, refund_id)
    return record if record is not None and record.kind is REFUND else None


def list_refunds(
    uow: Callable[..., UnitOfWork], client: ApiClient, payment_id: str
) -> list[OperationRecord] | None:
    """Oldest first; None when the payment is not the client's."""
    with uow(read_only=True) as unit:
        if unit.payments.get_for_client(client.id, payment_id) is None:
            return None
        return unit.operations.list_for_payment(payment_id, REFUND)
