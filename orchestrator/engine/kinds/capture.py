"""The capture: take an authorised payment's money (manual capture), once.

Its lease lives on its operation row (``cap_…``); the call is ``capture_payment`` with the key
``payorch-{id}-capture-{n}``, query first (``kinds.payment_step``).  What the provider payment's
state means for a capture::

    succeeded          captured (by this capture, maybe by a call whose answer was lost):
                       settle succeeded; never a second capture
    requires_capture   not captured yet: the capture is owed
    processing         the provider is still capturing: wait (no lease), read again
    canceled           the authorisation is gone (canceled, or expired after 7 days):
                       the capture failed, and the payment is canceled
    anything else      an operator looks

The finish, one fenced transaction: the operation's status; on success the payment
``succeeded`` with ``amount_captured`` (the rest of the authorisation released), the
authorisation's ledger lines reversed and the capture booked, ``payment.captured`` and
``payment.succeeded`` in the outbox.  On failure ``payment.capture_failed`` (the capture,
with the provider's code and message) and, if the authorisation was gone, the payment
``canceled`` (its lines released, ``payment.canceled``); a capture the provider refused
while the provider payment still awaits one leaves the payment ``requires_capture``, with no ledger
line.  A provider that captured another amount than we asked is never booked: the capture
parks for an operator.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.ledger import LedgerLine, booked_account, capture_lines, release_lines
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.operation_representation import finished_representation
from orchestrator.domain.operations import OperationRecord, OperationStatus
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import RecoveryPoint
from orchestrator.engine.kinds.operation_row import OperationRowKind
from orchestrator.engine.kinds.payment_step import (
    Next,
    PaymentOperation,
    Verdict,
    finish_payment_operation,
)
from orchestrator.engine.lease import Lease, Parked
from orchestrator.logging import get_logger
from orchestrator.providers.base import PaymentProvider, ProviderPayment

log = get_logger(__name__)

AUTHORIZATION_CANCELED = "authorization_canceled"
CAPTURE_FAILED = "payment.capture_failed"


class CaptureKind(OperationRowKind):
    """The capture's rows and steps, for ``engine.runner.run_operation``."""

    name = "capture"

    def run(self, lease: Lease[OperationRecord], provider: PaymentProvider) -> None:
        payment = payment_of(lease)
        if lease.record.recovery_point is RecoveryPoint.ACCEPTED:
            assert payment.provider_payment_id is not None
            step = _CaptureStep()
            PaymentOperation(lease, provider, step, payment.id, payment.provider_payment_id).drive()
        if lease.record.recovery_point is RecoveryPoint.PROVIDER_SETTLED:
            finish_capture(lease)


class _CaptureStep:
    """How a capture reads a provider payment, and its call."""

    def verdict(self, record: OperationRecord, provider_payment: ProviderPayment) -> Verdict:
        if provider_payment.status == "succeeded":
            captured = provider_payment.amount_received
            if captured != record.amount:
                raise Parked(
                    f"provider payment {provider_payment.id} captured {captured}, "
                    f"this capture asked for {record.amount}"
                )
            return Verdict(Next.SETTLE, OperationStatus.SUCCEEDED)
        if provider_payment.status == "requires_capture":
            return Verdict(Next.SEND)
        if provider_payment.status == "processing":
            return Verdict(Next.WAIT)
        if provider_payment.status == "canceled":
            return Verdict(
                Next.SETTLE,
                OperationStatus.FAILED,
                failure_code=AUTHORIZATION_CANCELED,
                failure_message=(
                    f"The authorisation was canceled at the provider "
                    f"({provider_payment.cancellation_reason or 'no reason given'}) before it was "
                    "captured; the payment is canceled."
                ),
            )
        raise Parked(
            f"provider payment {provider_payment.id} is {provider_payment.status!r}: "
            "nothing to capture"
        )

    def send(
        self,
        provider: PaymentProvider,
        record: OperationRecord,
        provider_payment_id: str,
        attempt: int,
    ) -> ProviderPayment:
        return provider.capture_payment(
            provider_payment_id,
            operation_id=record.id,
            attempt=attempt,
            amount_to_capture=record.amount,
        )


def payment_of(lease: Lease[OperationRecord]) -> PaymentRecord:
    with lease.uow() as uow:
        payment = uow.payments.get(lease.record.payment_id)
    if payment is None or payment.provider_payment_id is None:
        raise Parked("the payment has no provider payment")
    return payment


def finish_capture(lease: Lease[OperationRecord]) -> None:
    """The capture's status, the payment's money and status, the ledger lines and the
    outbox events: one fenced transaction."""
    record = lease.record
    assert record.provider_outcome is not None and record.amount is not None
    status = OperationStatus(record.provider_outcome)
    captured = record.amount

    def write_books(uow: UnitOfWork, payment: PaymentRecord, now: datetime) -> bytes:
        authorized = payment.amount_capturable
        after: PaymentRecord | None = None
        lines: list[LedgerLine] = []
        if status is OperationStatus.SUCCEEDED:
            after = uow.authorizations.book_capture(payment.id, captured=captured, now=now)
            if after is None:
                raise Parked(f"payment {payment.id} is {payment.status.value}, not capturable")
            lines = capture_lines(
                authorized=authorized,
                captured=captured,
                currency=record.currency,
                account=booked_account(payment.connector_account_id),
                client_id=payment.client_id,
            )
            uow.outcomes.restate_outcome(after, "succeeded", captured, now=now)
        elif record.failure_code == AUTHORIZATION_CANCELED:
            failure = Failure(code="canceled", message=record.failure_message or "")
            after = uow.authorizations.cancel(
                payment.id, operation_id=record.id, failure=failure, now=now
            )
            if after is None:
                raise Parked(f"payment {payment.id} is {payment.status.value}, not capturable")
            lines = release_lines(
                authorized=authorized,
                currency=record.currency,
                account=booked_account(payment.connector_account_id),
                client_id=payment.client_id,
            )
            uow.outcomes.restate_outcome(after, "canceled", 0, now=now)
        # else: our request was refused (say, an amount the provider would not capture) and
        # the provider payment, read after the refusal, still awaits a capture: the authorisation
        # stands, no line is booked, and the merchant may capture again with a new key.
        shown = after or payment
        uow.outcomes.add_ledger_lines(payment.id, lines, now=now)
        sequence = payment.latest_event_sequence
        if status is OperationStatus.FAILED:
            # The merchant asked for this capture: it hears that it failed, and why.
            sequence = uow.outcomes.add_outbox_event(
                payment.id, CAPTURE_FAILED, finished_representation(record, now), now=now
            )
        for event in _payment_events(status, after):
            sequence = uow.outcomes.add_outbox_event(
                payment.id, event, payment_representation(shown), now=now
            )
        shown = replace(shown, latest_event_sequence=sequence)
        if after is not None:
            return uow.authorizations.store_answer(shown)
        return encode_representation(payment_representation(shown))

    finish_payment_operation(lease, write_books)


def _payment_events(status: OperationStatus, after: PaymentRecord | None) -> list[str]:
    """The payment's own events after the finish: captured and succeeded; canceled (the
    authorisation was gone); none when it stands as it was."""
    if after is None:
        return []
    if status is OperationStatus.SUCCEEDED:
        return ["payment.captured", "payment.succeeded"]
    return ["payment.canceled"]


CAPTURE = CaptureKind()
