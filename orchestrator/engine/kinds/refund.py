"""The refund: return money of a succeeded payment, once.

Its lease lives on its operation row (``db.repositories.operations``); the refund's id
(``rfd_…``) is the operation id its provider key derives from.  The steps::

    [accepted] ──► provider refund known? ── yes ──► retrieve it ─┐
        │                                                         │
        │ lookup owed (an earlier create's outcome is unknown)?   │
        │      yes: list the provider payment's refunds, match ours by       │
        │           metadata payorch_refund_id and amount ────────┤
        │           (none: the same create is re-sent)             │
        ▼                                                          ▼
    create refund (key payorch-{id}-refund-1) ───────────► succeeded / failed: settle
                                                           pending: wait (no lease), re-read
    [provider_settled] finish: status, payment's money, ledger, outbox (one transaction)

Hazards, and what guards them:

* A create whose outcome is unknown (timeout, 5xx) may have refunded.  Nothing is re-sent
  until a lookup (listing is strongly consistent) proved no refund of ours exists.
* The key stays ``payorch-{id}-refund-1`` for every re-send.  A refund has no natural guard
  like a provider payment's single confirmation: a second key sent while the first request may still
  be executing at the provider could refund twice, so it is never used.  A key that keeps
  replaying a saved 500 therefore ends in needs_attention after MAX_ATTEMPTS unknown
  outcomes, with what the lookups found in ``last_error``.
* The amount was reserved on the payment in the accept's transaction (``db.repositories.
  money``); a failed refund releases it in its finish, a succeeded one books it.
* A refund at the provider that names our id but another amount or provider payment is never
  adopted: the refund parks for an operator.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.operations import ORIGIN_PROVIDER, OperationRecord, OperationStatus
from orchestrator.domain.states import RecoveryPoint, WaitingFor
from orchestrator.engine.kinds.operation_row import OperationRowKind, OperationSteps
from orchestrator.engine.kinds.refund_books import book_refund_outcome, final_refund_response
from orchestrator.engine.kinds.refund_reads import judge_refund, refund_pages
from orchestrator.engine.lease import Lease, Parked, Waiting, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    OutcomeUnknown,
    PaymentProvider,
    PendingCall,
    Permanent,
    ProviderRefund,
    Retryable,
    optional,
)
from orchestrator.providers.keys import REFUND_ID_METADATA_KEY

log = get_logger(__name__)

# The n of payorch-{id}-refund-{n}: fixed, see the module docstring.
REFUND_KEY_ATTEMPT = 1
_OPERATOR_ERRORS = frozenset({"idempotency_error"})
_OPERATOR_HTTP_STATUSES = frozenset({401, 403})
_ABSENT = "absent"
_FAILED_PAGE = "failed_page"


class RefundKind(OperationRowKind):
    """The refund's steps, for ``engine.runner.run_operation``."""

    name = "refund"

    def run(self, lease: Lease[OperationRecord], provider: PaymentProvider) -> None:
        _Refund(lease, provider).run()


REFUND = RefundKind()


class _Refund(OperationSteps):
    def run(self) -> None:
        provider_payment_id = self._provider_payment_id()
        while True:
            point = self.record.recovery_point
            if point is RecoveryPoint.ACCEPTED:
                self.drive(provider_payment_id)
            elif point is RecoveryPoint.PROVIDER_SETTLED:
                self.finish()
                return
            else:
                return  # completed by someone else; the fence would refuse us anyway

    def _provider_payment_id(self) -> str:
        with self.lease.uow() as uow:
            payment = uow.payments.get(self.record.payment_id)
        if payment is None or payment.provider_payment_id is None:
            raise Parked("the refunded payment has no provider payment")
        return payment.provider_payment_id

    # -- the provider's truth first, then the create ------------------------------------

    def drive(self, provider_payment_id: str) -> None:
        record = self.record
        if record.provider_object_id is not None:
            self.lease.renew()
            try:
                refund = self.provider.retrieve_refund(
                    record.provider_object_id,
                    **optional(pending=(self.pending_create(provider_payment_id), None)),
                )
            except Retryable as error:
                self.lease.wait(error.retry_after, describe_error(error))
                return
            except OutcomeUnknown as error:
                self.note_unknown(error)
                self.lease.wait(None, describe_error(error))
                return
            except Permanent as error:
                raise Parked(f"cannot read refund: {describe_error(error)}") from error
            self.act_on(refund, provider_payment_id)
            return
        if record.lookup_pending:
            found = self.look_up(provider_payment_id)
            if found is _FAILED_PAGE:
                return  # waited; the lookup stays owed
            if isinstance(found, ProviderRefund):
                self.act_on(found, provider_payment_id)
                return
        self.create(provider_payment_id)

    def pending_create(self, provider_payment_id: str) -> PendingCall | None:
        """Our create this read resolves (its fixed key, amount and provider payment), for a
        provider that learns a refund's outcome by notification; None for a refund made
        outside payorch (recorded by the sync: no create of ours to speak of)."""
        record = self.record
        if record.origin == ORIGIN_PROVIDER:
            return None
        return PendingCall(
            step="refund",
            operation_id=record.id,
            attempt=REFUND_KEY_ATTEMPT,
            amount=record.amount,
            provider_payment_id=provider_payment_id,
        )

    def look_up(self, provider_payment_id: str) -> ProviderRefund | str:
        """Our refund among the provider payment's refunds (matched by our id in its metadata), or
        ``_ABSENT`` when the whole list was read and it is not there, ``_FAILED_PAGE`` when
        a page failed (an unknown outcome, never "absent")."""
        pages = refund_pages(
            self.lease,
            self.provider,
            provider_payment_id,
            label="lookup",
            on_unknown=self.note_unknown,
        )
        for page in pages:
            if page is None:
                return _FAILED_PAGE  # a failed page proves nothing: the lookup stays owed
            for refund in page.refunds:
                if refund.metadata.get(REFUND_ID_METADATA_KEY) == self.record.id:
                    return refund
        self.lease.write(
            lambda uow, now: uow.operations.end_lookup(
                self.lease.id, token=self.lease.token, now=now
            )
        )
        self.lease.park_if_out_of_attempts(
            "refund creates with an unknown outcome; the lookup found no refund of ours"
        )
        return _ABSENT

    def create(self, provider_payment_id: str) -> None:
        record = self.record
        lease = self.lease
        lease.check_budget()
        # Renew and count the send: durable before the request leaves.
        lease.write(
            lambda uow, now: uow.operations.take_step(
                lease.id, token=lease.token, now=now, lease_until=lease.until(now)
            )
        )
        assert record.amount is not None
        try:
            refund = self.provider.create_refund(
                provider_payment_id=provider_payment_id,
                operation_id=record.id,
                attempt=REFUND_KEY_ATTEMPT,
                amount=record.amount,
                reason=record.reason,
                metadata={**record.metadata, REFUND_ID_METADATA_KEY: record.id},
            )
        except Retryable as error:
            # 429: nothing happened; 409 key in use: our request is still executing.  The
            # same key either way.
            lease.wait(error.retry_after, describe_error(error))
            return
        except OutcomeUnknown as error:
            self.note_unknown(error)
            lease.wait(None, describe_error(error))
            return
        except Permanent as error:
            if error.code in _OPERATOR_ERRORS or error.http_status in _OPERATOR_HTTP_STATUSES:
                raise Parked(f"provider refused our request: {describe_error(error)}") from error
            self.settle(
                OperationStatus.FAILED,
                None,
                failure_code=error.code or "invalid_request",
                failure_message=error.message,
            )
            return
        self.act_on(refund, provider_payment_id)

    def act_on(self, refund: ProviderRefund, provider_payment_id: str) -> None:
        self.check_ours(refund, provider_payment_id)
        verdict = judge_refund(refund)
        if verdict.outcome is not None:
            self.settle(
                verdict.outcome,
                refund.id,
                failure_code=verdict.failure_code,
                failure_message=verdict.failure_message,
            )
            return
        if self.record.provider_object_id != refund.id:
            self.lease.write(
                lambda uow, now: uow.operations.record_provider_object(
                    self.lease.id, token=self.lease.token, provider_object_id=refund.id, now=now
                )
            )
        # Nothing to do until the provider settles it: no lease held meanwhile, and not a
        # failed attempt; the re-check (or an event) reads it again by id.
        raise Waiting(
            self.lease.settings.processing_recheck_seconds,
            f"provider refund {refund.id} is {refund.status}",
            WaitingFor.PROVIDER,
        )

    def check_ours(self, refund: ProviderRefund, provider_payment_id: str) -> None:
        problems = []
        if self.record.origin == ORIGIN_PROVIDER:
            # Made outside payorch (recorded by the refund sync): no metadata of ours; the
            # row is bound to the provider's refund id instead, and only ever retrieves it.
            if refund.id != self.record.provider_object_id:
                problems.append(f"id {refund.id} != {self.record.provider_object_id}")
        elif refund.metadata.get(REFUND_ID_METADATA_KEY) != self.record.id:
            problems.append("metadata names another refund")
        if refund.amount != self.record.amount:
            problems.append(f"amount {refund.amount} != {self.record.amount}")
        if refund.provider_payment_id != provider_payment_id:
            problems.append(
                f"provider payment {refund.provider_payment_id} != {provider_payment_id}"
            )
        if problems:
            raise Parked(f"provider refund {refund.id} is not this refund's: {'; '.join(problems)}")

    # -- what the provider said, stored ---------------------------------------------------

    def note_unknown(self, error: Exception) -> None:
        why = describe_error(error)
        self.lease.write(
            lambda uow, now: uow.operations.record_unknown_outcome(
                self.lease.id, token=self.lease.token, error=why, now=now
            )
        )
        self.lease.park_if_out_of_attempts(why)

    def settle(
        self,
        outcome: OperationStatus,
        refund_id: str | None,
        *,
        failure_code: str | None = None,
        failure_message: str | None = None,
    ) -> None:
        self.lease.write(
            lambda uow, now: uow.operations.record_settlement(
                self.lease.id,
                token=self.lease.token,
                outcome=outcome,
                provider_object_id=refund_id,
                failure_code=failure_code,
                failure_message=failure_message,
                now=now,
            )
        )

    # -- the finish -------------------------------------------------------------------------

    def finish(self) -> None:
        """The refund's final status, the payment's money, the ledger lines and the outbox
        event: one fenced transaction."""
        record = self.record
        assert record.provider_outcome is not None and record.amount is not None
        status = OperationStatus(record.provider_outcome)

        def write_finish(uow: UnitOfWork, now: datetime) -> OperationRecord | None:
            # Refunds of one payment may finish at once: the payment's row lock orders their
            # money updates and their outbox events (whose per-payment sequence is max + 1).
            payment = uow.money.lock_payment(record.client_id, record.payment_id)
            assert payment is not None
            final = replace(
                record,
                status=status,
                recovery_point=RecoveryPoint.COMPLETED,
                lease_owner=None,
                locked_until=None,
                next_attempt_at=None,
                completed_at=now,
                updated_at=now,
            )
            finished = uow.operations.finish(
                record.id,
                token=self.lease.token,
                final_response=final_refund_response(final),
                now=now,
            )
            if finished is None:
                return None
            book_refund_outcome(
                uow,
                final,
                connector_account_id=payment.connector_account_id,
                now=now,
                reserved=True,
            )
            return finished

        self.lease.finish(write_finish, report=_report_finished)


def _report_finished(finished: OperationRecord) -> None:
    status = finished.status.value
    metrics.OPERATIONS_FINISHED.labels(kind="refund", status=status).inc()
    log.info(
        "refund_finished",
        operation_id=finished.id,
        payment_id=finished.payment_id,
        status=status,
    )
