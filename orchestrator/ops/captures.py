"""An operator captures or cancels a payment (``POST /v1/ops/payments/{id}/capture`` and
``/cancel``, the console's forms): the merchant's own accept (``services.captures``), with
the operator's reason written to the audit trail in the accept's transaction, so there is
never an operation without its audit row, nor an audit row for a refused request.

The operation is the payment's merchant's (its key namespace, its events); its key is made
up here (``operator-…``, fresh per request), so an operator's request never replays a
merchant's and a double submit meets ``operation-in-progress`` (409), not a second capture.
Refusals are the merchant API's (``PaymentNotFound``, ``PaymentStatusConflict``,
``OperationInProgress``, ``CaptureExceedsCapturable``), plus ``InvalidReason``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.model import ApiClient, AuditEntry
from orchestrator.domain.operations import OperationRecord
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.engine.takeover import Actor, ActorKind
from orchestrator.logging import get_logger
from orchestrator.ops.errors import clean_reason
from orchestrator.services.captures import (
    AcceptedOperation,
    Also,
    PaymentNotFound,
    accept_cancel,
    accept_capture,
)
from orchestrator.settings import Settings

log = get_logger(__name__)


@dataclass(frozen=True)
class OperatorOperation:
    accepted: AcceptedOperation
    audit: AuditEntry


def operator_capture(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    operator: Actor,
    payment_id: str,
    *,
    amount: int | None,
    reason: str,
) -> OperatorOperation:
    """Capture ``amount`` (default: all that is capturable) of the payment."""

    def accept(merchant: ApiClient, key: str, fingerprint: str, also: Also) -> AcceptedOperation:
        return accept_capture(
            uow, publisher, settings, merchant, payment_id, key, amount, fingerprint, also=also
        )

    return _as_operator(uow, operator, payment_id, "capture", reason, {"amount": amount}, accept)


def operator_cancel(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    operator: Actor,
    payment_id: str,
    *,
    cancellation_reason: str | None,
    reason: str,
) -> OperatorOperation:
    """Cancel the payment; ``cancellation_reason`` is the provider's (Stripe's)."""

    def accept(merchant: ApiClient, key: str, fingerprint: str, also: Also) -> AcceptedOperation:
        return accept_cancel(
            uow,
            publisher,
            settings,
            merchant,
            payment_id,
            key,
            cancellation_reason,
            fingerprint,
            also=also,
        )

    asked = {"cancellation_reason": cancellation_reason}
    return _as_operator(uow, operator, payment_id, "cancel", reason, asked, accept)


# The merchant's accept of one kind, given the merchant, the key, the fingerprint and what to
# write in its transaction.
Accept = Callable[[ApiClient, str, str, Also], AcceptedOperation]


def _as_operator(
    uow: UnitOfWorkFactory,
    operator: Actor,
    payment_id: str,
    action: str,
    reason: str,
    asked: dict[str, Any],
    accept: Accept,
) -> OperatorOperation:
    """The merchant's accept in the merchant's name, with a fresh key, audited with it."""
    if operator.kind is not ActorKind.OPERATOR:
        raise ValueError("operator commands need an operator actor")
    reason = clean_reason(reason)
    merchant = _merchant_of(uow, payment_id)
    fingerprint = request_fingerprint(
        "POST", f"/v1/ops/payments/{payment_id}/{action}", {**asked, "reason": reason}
    )
    audited: list[AuditEntry] = []

    def audit(unit: UnitOfWork, record: OperationRecord, now: datetime) -> None:
        audited.append(
            unit.audit.add(
                actor_client_id=operator.client_id,
                actor_name=operator.name,
                action=action,
                payment_id=record.payment_id,
                operation_id=record.id,
                reason=reason,
                old_token=None,
                new_token=None,
                now=now,
            )
        )

    accepted = accept(merchant, f"operator-{uuid.uuid4().hex}", fingerprint, audit)
    # A fresh key is never a replay: the accept inserted the operation, and the audit row.
    assert not accepted.replayed and len(audited) == 1
    record = accepted.record
    log.warning(
        f"operator_{action}",
        payment_id=record.payment_id,
        operation_id=record.id,
        operator=operator.name,
    )
    return OperatorOperation(accepted, audited[0])


def _merchant_of(uow: UnitOfWorkFactory, payment_id: str) -> ApiClient:
    """The payment's merchant, in whose name the operation runs."""
    with uow() as unit:
        payment = unit.payments.get(payment_id)
        merchant = unit.clients.get(payment.client_id) if payment is not None else None
    if merchant is None:
        raise PaymentNotFound(payment_id)
    return merchant
