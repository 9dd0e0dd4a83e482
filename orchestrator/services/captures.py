"""Accepting a capture or a cancel: the first transaction of the operation.

One short transaction, in this order (as for refunds, ``services.refunds``):

1. lock the client's payment row (``FOR NO KEY UPDATE``): every capture, cancel and refund accept
   of one payment queues here and sees what those before it committed;
2. a key already taken is answered from its operation (a replay, or 422 for another
   request), whatever the payment says now;
3. the payment's status must allow it (409): a capture only from ``requires_capture``; a
   cancel from ``requires_capture``, ``requires_action``, or ``processing`` before any
   confirm was sent (its charge is then held: ``AuthorizationRepository.hold_charge``);
4. no other capture or cancel of the payment may be unfinished (409
   ``operation-in-progress``): checked under the lock, and the partial unique index on the
   operations refuses a second one anyway;
5. a capture's ``amount`` defaults to all that is capturable; more is 400;
6. insert the operation (``INSERT … ON CONFLICT DO NOTHING`` on the key).

A refusal raises inside the transaction, so nothing is stored.  The key's protocol (replay,
422, the publish after the commit; a failed publish still answers 202) is
``services.operation_accept``'s, shared with refunds.  The 202 body is the payment's
representation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.domain.operations import (
    OperationKindName,
    OperationRecord,
    new_operation_id,
)
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import PaymentStatus, WaitingFor
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.logging import get_logger
from orchestrator.services.operation_accept import (
    accept_operation,
    dispatch_lease,
    new_operation_values,
)
from orchestrator.services.refunds import PaymentNotFound
from orchestrator.settings import Settings

log = get_logger(__name__)

CAPTURE = OperationKindName.CAPTURE
CANCEL = OperationKindName.CANCEL

__all__ = [
    "AcceptedOperation",
    "CaptureExceedsCapturable",
    "OperationInProgress",
    "PaymentNotFound",
    "PaymentStatusConflict",
    "accept_cancel",
    "accept_capture",
    "get_operation",
]


class PaymentStatusConflict(Exception):
    """The payment's status does not allow the operation (409)."""

    def __init__(self, payment: PaymentRecord, shown_status: str) -> None:
        super().__init__(f"payment {payment.id} is {shown_status}")
        self.payment = payment
        self.shown_status = shown_status


class OperationInProgress(Exception):
    def __init__(self, operation_id: str) -> None:
        super().__init__(f"operation {operation_id} is not finished")
        self.operation_id = operation_id


class CaptureExceedsCapturable(Exception):
    def __init__(self, requested: int, capturable: int) -> None:
        super().__init__(f"capture of {requested} exceeds the {capturable} capturable")
        self.requested = requested
        self.capturable = capturable


# The kind's own checks in the accept's transaction, on the locked payment: the amount the
# operation takes (a capture) or releases (a cancel), or a refusal raised.
Admit = Callable[[UnitOfWork, PaymentRecord, datetime], int | None]
# More to write in the accept's transaction once the operation row is in (an operator's
# audit row): committed with it, or not at all.
Also = Callable[[UnitOfWork, OperationRecord, datetime], None]


@dataclass(frozen=True)
class AcceptedOperation:
    record: OperationRecord
    # The payment as the operation's answer shows it (the accept's, or the finish's).
    body: bytes
    replayed: bool


def accept_capture(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    client: ApiClient,
    payment_id: str,
    idempotency_key: str,
    amount: int | None,
    fingerprint: str,
    *,
    also: Also | None = None,
) -> AcceptedOperation:
    """Raises PaymentNotFound, PaymentStatusConflict, OperationInProgress,
    CaptureExceedsCapturable (nothing stored) or IdempotencyKeyReused."""
    return _accept(
        uow,
        publisher,
        settings,
        client.id,
        payment_id,
        idempotency_key,
        fingerprint,
        kind=CAPTURE,
        reason=None,
        admit=_admit_capture(amount),
        also=also,
    )


def accept_cancel(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    client: ApiClient,
    payment_id: str,
    idempotency_key: str,
    reason: str | None,
    fingerprint: str,
    *,
    also: Also | None = None,
) -> AcceptedOperation:
    """Raises PaymentNotFound, PaymentStatusConflict, OperationInProgress (nothing stored)
    or IdempotencyKeyReused."""
    return _accept(
        uow,
        publisher,
        settings,
        client.id,
        payment_id,
        idempotency_key,
        fingerprint,
        kind=CANCEL,
        reason=reason,
        admit=_admit_cancel,
        also=also,
    )


def _admit_capture(amount: int | None) -> Admit:
    def admit(unit: UnitOfWork, payment: PaymentRecord, now: datetime) -> int:
        if payment.status is not PaymentStatus.REQUIRES_CAPTURE:
            raise PaymentStatusConflict(payment, _shown(payment))
        capture = payment.amount_capturable if amount is None else amount
        if capture > payment.amount_capturable:
            raise CaptureExceedsCapturable(capture, payment.amount_capturable)
        return capture

    return admit


def _admit_cancel(unit: UnitOfWork, payment: PaymentRecord, now: datetime) -> int | None:
    if not cancelable(payment):
        raise PaymentStatusConflict(payment, _shown(payment))
    return payment.amount_capturable or None


def cancelable(payment: PaymentRecord) -> bool:
    """requires_capture; requires_action (the customer has not authenticated); processing
    before any confirm was sent.  Once a confirm may have moved money (an asynchronous
    method processing, a confirm whose answer is not in yet), a cancel could race the
    charge at the provider: refused."""
    if payment.status is PaymentStatus.REQUIRES_CAPTURE:
        return True
    if payment.status is not PaymentStatus.PROCESSING:
        return False
    if payment.waiting_for is WaitingFor.CUSTOMER:
        return True
    # Waiting out its account's circuit (decision 0082) is no wait for anyone's answer.
    return payment.confirm_attempts == 0 and payment.waiting_for in (None, WaitingFor.CIRCUIT)


def _shown(payment: PaymentRecord) -> str:
    return "requires_action" if payment.requires_action else payment.status.value


def _accept(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    client_id: str,
    payment_id: str,
    idempotency_key: str,
    fingerprint: str,
    *,
    kind: OperationKindName,
    reason: str | None,
    admit: Admit,
    also: Also | None,
) -> AcceptedOperation:
    def insert(unit: UnitOfWork, now: datetime, wake: bool) -> OperationRecord | None:
        payment = unit.money.lock_payment(client_id, payment_id)
        if payment is None:
            raise PaymentNotFound(payment_id)
        if unit.operations.find_by_key(client_id, kind, idempotency_key) is not None:
            return None  # answered from the operation that holds the key
        amount = admit(unit, payment, now)
        unfinished = unit.authorizations.unfinished_operation(payment.id)
        if unfinished is not None:
            raise OperationInProgress(unfinished)
        operation_id = new_operation_id(kind)
        if payment.status is PaymentStatus.PROCESSING:
            held = unit.authorizations.hold_charge(payment, operation_id=operation_id, now=now)
            if held is None:  # the row lock makes this unreachable; the guard keeps it so
                raise PaymentStatusConflict(payment, _shown(payment))
        shown = unit.payments.get(payment.id) or payment  # with its latest event sequence
        values = new_operation_values(
            operation_id,
            kind,
            payment,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
            amount=amount,
            reason=reason,
        )
        values.update(dispatch_lease(settings, now))
        # The 202 body, encoded once and stored with the claim (replays serve these bytes).
        values["accepted_response"] = encode_representation(payment_representation(shown)).decode(
            "utf-8"
        )
        record = unit.operations.insert_if_absent(values, wake=wake)
        if record is not None and also is not None:
            also(unit, record, now)
        return record

    claimed = accept_operation(
        uow,
        publisher,
        settings,
        client_id=client_id,
        kind=kind,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
        insert=insert,
    )
    record = claimed.record
    return AcceptedOperation(record, operation_answer(record), replayed=claimed.replayed)


def get_operation(
    uow: Callable[..., UnitOfWork], client: ApiClient, operation_id: str, kind: OperationKindName
) -> OperationRecord | None:
    """The client's capture or cancel (None: not the client's, or another kind)."""
    with uow(read_only=True) as unit:
        record = unit.operations.get_for_client(client.id, operation_id)
    return record if record is not None and record.kind is kind else None


def operation_answer(record: OperationRecord) -> bytes:
    """What a capture or cancel answers: the payment as its finish left it (a finished
    operation), else as its accept saw it (both stored, byte for byte)."""
    if record.status.is_final and record.final_response is not None:
        return record.final_response
    assert record.accepted_response is not None
    return record.accepted_response


def request_authorization_check(
    unit: UnitOfWork, payment_id: str, *, now: datetime
) -> OperationRecord | None:
    """A provider event says a payment was canceled at the provider (the provider cancels an
    authorisation left uncaptured): for a ``requires_capture`` payment with no
    capture or cancel in flight, queue a cancel operation of origin ``provider``, due now
    (the sweeper dispatches it).  It reads the provider payment first and never sends a cancel: only
    a provider payment that is canceled at the provider ends the payment ``canceled``; any other
    answer (the event was stale) fails the check and changes nothing.  Runs in the event's
    transaction; None: nothing to check."""
    found = unit.payments.get(payment_id)
    if found is None:
        return None
    payment = unit.money.lock_payment(found.client_id, payment_id)
    if payment is None or payment.status is not PaymentStatus.REQUIRES_CAPTURE:
        return None
    if unit.authorizations.unfinished_operation(payment_id) is not None:
        return None  # that capture or cancel reads the provider payment itself
    values = new_operation_values(
        new_operation_id(CANCEL),
        CANCEL,
        payment,
        idempotency_key=None,
        fingerprint=None,
        amount=payment.amount_capturable or None,
        reason=None,
    )
    values.update(
        origin="provider",
        lookup_pending=True,  # read the provider payment before anything else
        lease_owner=None,
        locked_until=now,
        next_attempt_at=now,
        created_at=now,
        updated_at=now,
    )
    record = unit.operations.insert_if_absent(values)
    if record is not None:
        log.info("authorization_check_queued", operation_id=record.id, payment_id=payment_id)
    return record
