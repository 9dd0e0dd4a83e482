"""The cancel: release an authorisation, or stop a payment whose charge has not moved
money, once.

Its lease lives on its operation row (``cnl_…``); the call is ``cancel_payment`` with the key
``payorch-{id}-cancel-{n}``, query first (``kinds.payment_step``).  A cancel of an unfinished
charge (``requires_action``, or ``processing`` before any confirm) was accepted with the
charge held (``AuthorizationRepository.hold_charge``): the charge's worker is fenced out
and no confirm can be sent while the cancel runs.  What the provider payment's state means::

    canceled              settle succeeded (maybe by a call whose answer was lost)
    requires_capture,     the cancel is owed
    requires_action,
    requires_confirmation,
    requires_payment_method
    succeeded             money moved before the cancel could stop it: the cancel failed,
                          the held charge is released and finishes the payment
    processing            the provider is charging: wait (no lease), read again

A provider event saying the provider payment was canceled (the provider expires an authorisation
left uncaptured) queues a cancel of origin ``provider``
(``services.captures.request_authorization_check``): it reads the provider payment first and never
sends a cancel; only a canceled provider payment is recorded, anything else fails the check.

A payment whose charge never recorded a provider payment has nothing to cancel at the provider (an
provider payment created by a charge fenced out before it recorded it stays unconfirmed, and an
unconfirmed provider payment moves no money): the cancel settles without a call.

The finish, one fenced transaction: the operation's status; on success the payment
``canceled`` (``failure.code`` ``canceled``), an authorisation's ledger lines reversed and
``payment.canceled`` in the outbox; on failure (the provider refused the cancel while the
provider payment still awaited one, or money moved first) the payment stands,
``payment.cancel_failed`` (the cancel, with the code and message) goes to the merchant who asked
for it, and a held charge is made due, so the sweeper resumes it and its query-first read records
what the provider did.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.ledger import booked_account, release_lines
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.operation_representation import finished_representation
from orchestrator.domain.operations import OperationRecord, OperationStatus
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
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

PAYMENT_SUCCEEDED = "payment_already_succeeded"
NOT_CANCELED = "not_canceled_at_provider"
CANCEL_FAILED = "payment.cancel_failed"
# A cancel queued by a provider event (``services.captures.request_authorization_check``).
PROVIDER_ORIGIN = "provider"
_OWED = frozenset(
    {"requires_capture", "requires_action", "requires_confirmation", "requires_payment_method"}
)


class CancelKind(OperationRowKind):
    """The cancel's rows and steps, for ``engine.runner.run_operation``."""

    name = "cancel"

    def run(self, lease: Lease[OperationRecord], provider: PaymentProvider) -> None:
        if lease.record.recovery_point is RecoveryPoint.ACCEPTED:
            with lease.uow() as uow:
                payment = uow.payments.get(lease.record.payment_id)
            assert payment is not None
            if payment.provider_payment_id is None:
                _settle_without_a_call(lease)
            else:
                step = _CancelStep()
                PaymentOperation(
                    lease, provider, step, payment.id, payment.provider_payment_id
                ).drive()
        if lease.record.recovery_point is RecoveryPoint.PROVIDER_SETTLED:
            finish_cancel(lease)


class _CancelStep:
    """How a cancel reads a provider payment, and its call."""

    def verdict(self, record: OperationRecord, provider_payment: ProviderPayment) -> Verdict:
        if provider_payment.status == "canceled":
            return Verdict(Next.SETTLE, OperationStatus.SUCCEEDED)
        if provider_payment.status in _OWED and record.origin == PROVIDER_ORIGIN:
            # A check a provider event asked for: it records a cancel, never sends one.
            return Verdict(
                Next.SETTLE,
                OperationStatus.FAILED,
                failure_code=NOT_CANCELED,
                failure_message=f"The provider's payment {provider_payment.id} is "
                f"{provider_payment.status}, not canceled: nothing to record.",
            )
        if provider_payment.status in _OWED:
            return Verdict(Next.SEND)
        if provider_payment.status == "processing":
            return Verdict(Next.WAIT)
        if provider_payment.status == "succeeded":
            return Verdict(
                Next.SETTLE,
                OperationStatus.FAILED,
                failure_code=PAYMENT_SUCCEEDED,
                failure_message=f"The payment succeeded at the provider ({provider_payment.id}) "
                "before it could be canceled; refund it instead.",
            )
        raise Parked(
            f"provider payment {provider_payment.id} is {provider_payment.status!r}: cannot cancel"
        )

    def send(
        self,
        provider: PaymentProvider,
        record: OperationRecord,
        provider_payment_id: str,
        attempt: int,
    ) -> ProviderPayment:
        return provider.cancel_payment(
            provider_payment_id, operation_id=record.id, attempt=attempt, reason=record.reason
        )


def _settle_without_a_call(lease: Lease[OperationRecord]) -> None:
    lease.write(
        lambda uow, now: uow.operations.record_settlement(
            lease.id,
            token=lease.token,
            outcome=OperationStatus.SUCCEEDED,
            provider_object_id=None,
            failure_code=None,
            failure_message=None,
            now=now,
        )
    )


def cancel_failure(record: OperationRecord) -> Failure:
    if record.origin == PROVIDER_ORIGIN:
        return Failure(
            code="canceled",
            message="The provider canceled the authorisation before it was captured (an "
            "authorisation left uncaptured expires after 7 days).",
        )
    said = f" ({record.reason})" if record.reason else ""
    return Failure(code="canceled", message=f"The payment was canceled by the merchant{said}.")


def finish_cancel(lease: Lease[OperationRecord]) -> None:
    """The cancel's status, the payment's status, the ledger lines and the outbox event:
    one fenced transaction."""
    record = lease.record
    assert record.provider_outcome is not None
    status = OperationStatus(record.provider_outcome)

    def write_books(uow: UnitOfWork, payment: PaymentRecord, now: datetime) -> bytes:
        authorized = (
            payment.amount_capturable if payment.status is PaymentStatus.REQUIRES_CAPTURE else 0
        )
        if status is not OperationStatus.SUCCEEDED:
            # Refused, or money moved first: the payment stands as it was, and a held
            # charge (if any) is due now and finishes it (its query-first read records what
            # the provider did).  No ledger line: nothing was released.
            uow.authorizations.release_charge(payment.id, operation_id=record.id, now=now)
            sequence = payment.latest_event_sequence
            if record.origin != PROVIDER_ORIGIN:
                # The merchant asked for this cancel: it hears that it failed, and why.  (A
                # check a provider event queued was asked by no one: a stale event, silent.)
                sequence = uow.outcomes.add_outbox_event(
                    payment.id, CANCEL_FAILED, finished_representation(record, now), now=now
                )
            shown = replace(payment, latest_event_sequence=sequence)
            return encode_representation(payment_representation(shown))
        after = uow.authorizations.cancel(
            payment.id, operation_id=record.id, failure=cancel_failure(record), now=now
        )
        if after is None:
            raise Parked(f"payment {payment.id} is {payment.status.value}: not canceled")
        uow.outcomes.add_ledger_lines(
            payment.id,
            release_lines(
                authorized=authorized,
                currency=record.currency,
                account=booked_account(payment.connector_account_id),
                client_id=payment.client_id,
            ),
            now=now,
        )
        uow.outcomes.restate_outcome(after, "canceled", 0, now=now)
        sequence = uow.outcomes.add_outbox_event(
            payment.id, "payment.canceled", payment_representation(after), now=now
        )
        return uow.authorizations.store_answer(replace(after, latest_event_sequence=sequence))

    finish_payment_operation(lease, write_books)


CANCEL = CancelKind()
