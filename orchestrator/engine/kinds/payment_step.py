"""One provider call on the payment at the provider, query first: what capture and cancel share.

Both kinds are one call on a provider payment that exists (a capture or a cancel of it),
naturally guarded by the provider: a provider payment is captured once and canceled
once, and either call on a provider payment that already moved on answers
``UNEXPECTED_STATE`` (``providers.base``).  So, like the charge's confirm, a call whose outcome is
unknown is followed by a retrieve (strongly consistent), and only a provider payment proven still
waiting for the call gets it again, under the next key ``payorch-{id}-{step}-{n+1}`` (a
saved 500 would replay forever under the old one)::

    [accepted] ── a call may have been sent (step_attempts > 0)? ── yes ──► retrieve
        │                                                                  │
        │ no                                         verdict(provider payment): SETTLE ──► settle
        ▼                                                        SEND ──┐  WAIT ──► wait
    take step n (renew + count, durable before sent) ◄──────────────────┘
        │
    call ── answer ──► verdict(answer) (SEND again only after a retrieve)
         ── unknown (timeout, 5xx) ──► count it, back off; the next round retrieves
         ── 429 / 409 key in use ──► back off; the next round retrieves
         ── unexpected_state ──► the next round retrieves (it moved on: how?)
         ── other 4xx ──► retrieve: still owed → the operation failed (the provider's
                          code and message); moved on → the verdict, as after a timeout
    [provider_settled] finish (the kind's one fenced transaction)

Every retrieve after a call names that call (``PendingCall``: step, operation, attempt,
amount): a provider whose calls finish asynchronously (Adyen answers ``received``, the outcome
comes by notification) reads ``processing`` while the call may still be in flight, so the
verdict waits instead of sending call n+1; and a call the provider refused after accepting
it comes back as ``refused_call``, which fails the operation with the provider's reason
(``refused_verdict``, before the kind's verdict) without sending anything again.

The kind supplies ``verdict`` (how it reads a provider payment), ``send`` (its call) and its books
for ``finish_payment_operation`` (one fenced transaction under the payment's row lock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationRecord, OperationStatus
from orchestrator.domain.states import RecoveryPoint, WaitingFor
from orchestrator.engine.lease import Lease, Parked, Waiting, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    UNEXPECTED_STATE,
    OutcomeUnknown,
    PaymentProvider,
    PendingCall,
    Permanent,
    ProviderPayment,
    Retryable,
    optional,
)
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY

log = get_logger(__name__)

_OPERATOR_ERRORS = frozenset({"idempotency_error"})
_OPERATOR_HTTP_STATUSES = frozenset({401, 403})
# Answers in one run that contradict the retrieve after them (unexpected_state, or an
# provider payment still owing the call) before an operator must look: the provider disagrees with
# its own reads, and sending again and again would not settle it.
MAX_UNEXPECTED_STATES = 3


class Next(StrEnum):
    SETTLE = "settle"  # the provider decided: record ``outcome``
    SEND = "send"  # proven not done yet: the call is owed
    WAIT = "wait"  # the provider is still working on it


@dataclass(frozen=True)
class Verdict:
    next: Next
    outcome: OperationStatus | None = None
    failure_code: str | None = None
    failure_message: str | None = None


class PaymentStep(Protocol):
    """What a kind of provider payment operation supplies."""

    def verdict(self, record: OperationRecord, provider_payment: ProviderPayment) -> Verdict:
        """What the provider payment's state means for this operation (query first)."""
        ...

    def send(
        self,
        provider: PaymentProvider,
        record: OperationRecord,
        provider_payment_id: str,
        attempt: int,
    ) -> ProviderPayment:
        """The call, with the key ``payorch-{record.id}-{step}-{attempt}``."""
        ...


@dataclass
class PaymentOperation:
    """One run of a provider payment operation's steps for one claimed operation row."""

    lease: Lease[OperationRecord]
    provider: PaymentProvider
    step: PaymentStep
    payment_id: str
    provider_payment_id: str
    unexpected_states: int = 0

    @property
    def record(self) -> OperationRecord:
        return self.lease.record

    def drive(self) -> None:
        """Until the record is settled (``provider_settled``) or the run must stop."""
        while self.record.recovery_point is RecoveryPoint.ACCEPTED:
            if self.record.step_attempts > 0 or self.record.lookup_pending:
                provider_payment = self.retrieve()
                if provider_payment is None:
                    continue
                if self.act_on(provider_payment) is not Next.SEND:
                    continue
            self.call()

    def pending_call(self) -> PendingCall | None:
        """The call this run's read resolves: the last one taken (``step_attempts``), whose
        outcome the read must account for (a provider whose calls finish asynchronously
        answers ``processing`` until it knows it, so no call n+1 follows a call n still in
        flight); None before any call was taken."""
        record = self.record
        if record.step_attempts < 1:
            return None
        return PendingCall(
            step=record.kind.value,
            operation_id=record.id,
            attempt=record.step_attempts,
            amount=record.amount,
            provider_payment_id=self.provider_payment_id,
        )

    def retrieve(self) -> ProviderPayment | None:
        self.lease.renew()
        pending = self.pending_call()
        try:
            provider_payment = self.provider.retrieve_payment(
                self.provider_payment_id, **optional(pending=(pending, None))
            )
        except Retryable as error:
            self.lease.wait(error.retry_after, describe_error(error))
            return None
        except OutcomeUnknown as error:
            self.note_unknown(error)
            self.lease.wait(None, describe_error(error))
            return None
        except Permanent as error:
            raise Parked(
                f"cannot read provider payment {self.provider_payment_id}: {describe_error(error)}"
            ) from error
        return provider_payment

    def call(self) -> None:
        lease = self.lease
        lease.check_budget()
        # Renew and take the next step number: the key is durable before it is sent.
        lease.write(
            lambda uow, now: uow.operations.take_step(
                lease.id, token=lease.token, now=now, lease_until=lease.until(now)
            )
        )
        try:
            answer = self.step.send(
                self.provider, self.record, self.provider_payment_id, self.record.step_attempts
            )
        except Retryable as error:
            # 429: nothing happened; 409 key in use: our request is still executing.  The
            # next round retrieves before anything is sent again.
            lease.wait(error.retry_after, describe_error(error))
            return
        except OutcomeUnknown as error:
            self.note_unknown(error)
            lease.wait(None, describe_error(error))
            return
        except Permanent as error:
            if error.code == UNEXPECTED_STATE:
                # It moved on (done by an earlier request of ours, or by someone else): the
                # next round's retrieve tells how.
                self.unexpected_states += 1
                if self.unexpected_states >= MAX_UNEXPECTED_STATES:
                    raise Parked(
                        f"{self.unexpected_states} unexpected_state answers while the provider "
                        f"payment reads as still owing the call: {describe_error(error)}"
                    ) from error
                return
            if error.code in _OPERATOR_ERRORS or error.http_status in _OPERATOR_HTTP_STATUSES:
                raise Parked(f"provider refused our request: {describe_error(error)}") from error
            self.refused(error)
            return
        if self.act_on(answer) is Next.SEND:
            # Our call answered with a provider payment that still owes it: the next round reads it
            # again before anything is sent; not forever.
            self.unexpected_states += 1
            if self.unexpected_states >= MAX_UNEXPECTED_STATES:
                raise Parked(f"the {self.record.kind.value} call keeps answering {answer.status}")

    def refused(self, error: Permanent) -> None:
        """Our call was refused (an ordinary 4xx: nothing happened).  The refusal alone does
        not say what the provider payment is now, so it is read: a provider payment that still owes
        the call fails the operation with the provider's code and message (the payment stands as it
        was); one that moved on (canceled, captured) is recorded as the verdict says."""
        provider_payment = self.retrieve()
        if provider_payment is None:
            return  # not read: the next round reads it, and sends only if still owed
        if self.act_on(provider_payment) is Next.SEND:
            self.settle(
                Verdict(
                    Next.SETTLE,
                    OperationStatus.FAILED,
                    failure_code=error.code or "invalid_request",
                    failure_message=error.message,
                )
            )

    def act_on(self, provider_payment: ProviderPayment) -> Next:
        named = provider_payment.metadata.get(RECORD_ID_METADATA_KEY)
        if provider_payment.id != self.provider_payment_id or named != self.payment_id:
            raise Parked(
                f"provider payment {provider_payment.id} (metadata {named!r}) is not payment "
                f"{self.payment_id}'s {self.provider_payment_id}"
            )
        verdict = refused_verdict(self.record, provider_payment) or self.step.verdict(
            self.record, provider_payment
        )
        if verdict.next is Next.SETTLE:
            self.settle(verdict)
        elif verdict.next is Next.WAIT:
            # Nothing to do until the provider settles it: no lease held meanwhile.
            raise Waiting(
                self.lease.settings.processing_recheck_seconds,
                f"provider payment {provider_payment.id} is {provider_payment.status}",
                WaitingFor.PROVIDER,
            )
        return verdict.next

    def note_unknown(self, error: Exception) -> None:
        why = describe_error(error)
        self.lease.write(
            lambda uow, now: uow.operations.record_unknown_outcome(
                self.lease.id, token=self.lease.token, error=why, now=now
            )
        )
        self.lease.park_if_out_of_attempts(why)

    def settle(self, verdict: Verdict) -> None:
        """What the provider settled (``provider_settled``): a worker that dies before the
        finish leaves a record that needs no further provider call."""
        outcome = verdict.outcome
        assert outcome is not None
        self.lease.write(
            lambda uow, now: uow.operations.record_settlement(
                self.lease.id,
                token=self.lease.token,
                outcome=outcome,
                provider_object_id=self.provider_payment_id,
                failure_code=verdict.failure_code,
                failure_message=verdict.failure_message,
                now=now,
            )
        )


def refused_verdict(record: OperationRecord, provider_payment: ProviderPayment) -> Verdict | None:
    """The provider refused this operation's call after accepting it (an asynchronous
    failure, ``refused_call``): the operation failed with the provider's reason, and the
    payment stands as the read says.  Never a reason to send again under a new key."""
    refused = provider_payment.refused_call
    if refused is None or refused.operation_id != record.id:
        return None
    return Verdict(
        Next.SETTLE,
        OperationStatus.FAILED,
        failure_code=refused.code,
        failure_message=refused.message,
    )


# The kind's part of the finish: on the locked payment (with its latest event sequence),
# the payment's money and status, ledger lines and outbox events; returns the operation's
# final answer (the payment as the finish leaves it).
WriteBooks = Callable[[UnitOfWork, PaymentRecord, datetime], bytes]


def finish_payment_operation(lease: Lease[OperationRecord], write_books: WriteBooks) -> None:
    """The operation's settled outcome and the kind's books: one fenced transaction."""
    record = lease.record
    assert record.provider_outcome is not None

    def write_finish(uow: UnitOfWork, now: datetime) -> OperationRecord | None:
        # The payment's row lock orders this finish with any other writer of the payment
        # (its outbox sequence is max + 1).
        uow.money.lock_payment(record.client_id, record.payment_id)
        payment = uow.payments.get(record.payment_id)  # with its latest event sequence
        assert payment is not None
        answer = write_books(uow, payment, now)
        # Fenced last: a stale holder's whole transaction rolls back here.
        return uow.operations.finish(
            record.id, token=lease.token, final_response=answer.decode("utf-8"), now=now
        )

    lease.finish(write_finish, report=_report_finished)


def _report_finished(finished: OperationRecord) -> None:
    kind = finished.kind.value
    metrics.OPERATIONS_FINISHED.labels(kind=kind, status=finished.provider_outcome).inc()
    log.info(
        f"{kind}_finished",
        operation_id=finished.id,
        payment_id=finished.payment_id,
        status=finished.provider_outcome,
        amount=finished.amount,
    )
