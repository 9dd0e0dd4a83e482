"""A refund's effect on the books, written in its finishing transaction: the payment's
refund money, the ledger lines and the merchant event, and the refund's stored answer.
Shared by the refund kind (a refund asked through payorch) and the refund sync (a refund
made at the provider by someone else), so both move money, and answer, the same way."""

from __future__ import annotations

from datetime import datetime

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.ledger import booked_account, refund_lines
from orchestrator.domain.operations import OperationRecord, OperationStatus
from orchestrator.domain.refund_representation import refund_representation


def book_refund_outcome(
    uow: UnitOfWork,
    refund: OperationRecord,
    *,
    connector_account_id: str | None,
    now: datetime,
    reserved: bool,
) -> None:
    """``refund`` as finished (succeeded or failed).  A succeeded refund stays reserved and
    counts as refunded, with two balanced ledger lines; a failed one releases what it held
    (``reserved``: it held anything).  Then ``refund.{status}`` for the merchant.  The
    caller holds the payment's row lock (money updates and the event's sequence)."""
    assert refund.amount is not None
    if refund.status is OperationStatus.SUCCEEDED:
        uow.money.book_refund(refund.payment_id, refund.amount)
        uow.outcomes.add_ledger_lines(
            refund.payment_id,
            refund_lines(
                amount=refund.amount,
                currency=refund.currency,
                account=booked_account(connector_account_id),
                client_id=refund.client_id,
            ),
            now=now,
        )
    elif reserved:
        uow.money.release_refund(refund.payment_id, refund.amount)
    uow.outcomes.add_outbox_event(
        refund.payment_id,
        f"refund.{refund.status.value}",
        refund_representation(refund),
        now=now,
    )


def final_refund_response(refund: OperationRecord) -> str:
    """The finished refund's answer of record (``final_response``): what
    ``GET /v1/refunds/{id}`` serves, byte for byte, once the refund is final."""
    return encode_representation(refund_representation(refund)).decode("utf-8")
