"""Settle and finish: what the provider settled, and the payment's final status.

Read top to bottom::

    settle   (any step) what the provider decided -- outcome, provider payment, charge, failure, the
             amount it moved -- is held on the run (``ChargeRun.settlement``), not written;
             the loop goes straight to the finish
    finish   one fenced transaction (T3): the settlement (``provider_settled``), the final
             status (COMPLETED), the outcome row, the ledger lines, the outbox event and the
             stored answer.  The final status is written here and only here.

Hazards:

* a worker that dies between the last provider call and this commit leaves the record as
  it was before the call (``confirm_attempts`` > 0, or at ``accepted`` a create to re-send
  under its key), so its successor reads the provider's truth again: no money moves twice;
* never finish a success at an amount the provider did not move (``_finish_problem``): the
  payment parks instead, and a finish that must park commits the settlement alone first, so
  the parked record keeps what the provider said;
* the stored answer must be the bytes a GET serves afterwards, so it carries the number of
  the event this finish writes, taken under the row lock (``_event_number``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.failover import (
    PROVIDER,
    Decision,
    FailoverReason,
    after_decline,
    skipped_accounts,
)
from orchestrator.domain.ledger import booked_account, lines_for
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.routing import PLATFORM_ACCOUNT
from orchestrator.domain.states import Outcome, PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.charge.context import ChargeRun
from orchestrator.engine.kinds.charge.failover import enabled_following, fail_over, log_skipped
from orchestrator.engine.kinds.payment_reading import Next, Reading
from orchestrator.engine.lease import Parked, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import Declined, Permanent, ProviderPayment

log = get_logger(__name__)

# Permanent errors that say *our* side is wrong (credentials, a key reused with other
# parameters): failing the merchant's payment for them would be wrong, so an operator
# looks instead.
_OPERATOR_ERRORS = frozenset({"idempotency_error"})
_OPERATOR_HTTP_STATUSES = frozenset({401, 403})


# -- settle ---------------------------------------------------------------------------------


def settle(
    run: ChargeRun,
    reading: Reading,
    provider_payment_id: str | None,
    provider_payment: ProviderPayment | None = None,
    *,
    proven_by: str | None = None,
) -> None:
    """What the provider settled (``provider_settled``), for the finish to write with the
    final status in one transaction (T3).  Nothing runs between this and the finish (the
    loop, ``charge.run_steps``).

    A failure of class ``provider`` with an enabled next account in the route is not settled: the
    payment fails over instead (``failover``; decision 0086), the failure as its proof.
    ``proven_by``: how the failure was learnt (default: a read of the provider payment)."""
    assert reading.outcome is not None
    outcome = reading.outcome
    failure = reading.failure
    if outcome is Outcome.FAILED and failure is not None and failure.kind == PROVIDER:
        _fail_over_if_an_account_remains(run, failure, provider_payment_id, proven_by)
    settled_amount: int | None = None
    settled_currency: str | None = None
    if provider_payment is not None and outcome is Outcome.SUCCEEDED:
        # What the provider says it moved, not what we asked for: the ledger books this.
        settled_amount = (
            provider_payment.amount_received
            if provider_payment.amount_received is not None
            else provider_payment.amount
        )
        settled_currency = provider_payment.currency.lower()
    elif provider_payment is not None and outcome is Outcome.REQUIRES_CAPTURE:
        # Manual capture: what the provider authorised (and a capture may take).
        settled_amount = provider_payment.amount_capturable
        settled_currency = provider_payment.currency.lower()
    run.settlement = {
        "outcome": outcome,
        "provider_payment_id": provider_payment_id,
        "provider_charge_id": reading.charge_id,
        "failure": reading.failure,
        "settled_amount": settled_amount,
        "settled_currency": settled_currency,
    }


def _fail_over_if_an_account_remains(
    run: ChargeRun, failure: Failure, provider_payment_id: str | None, proven_by: str | None
) -> None:
    """A ``provider`` decline: fail over to the next enabled account of the route, or, none
    remaining (the last account, or every one after it disabled since the accept), return
    so the decline is settled as the payment's failure."""
    enabled = enabled_following(run)
    if after_decline(run.record, failure.kind, enabled) is not Decision.FAIL_OVER:
        log_skipped(run.record, skipped_accounts(run.record, enabled), moved_to=None)
        return
    account = run.record.connector_account_id or PLATFORM_ACCOUNT
    how = proven_by or f"a read of provider payment {provider_payment_id} (unpaid)"
    fail_over(
        run,
        reason=FailoverReason.PROVIDER_DECLINE,
        proof=(
            f"{account} declined with {failure.code} (class provider), learnt from {how}: "
            "the provider answered, so no call of this attempt is pending, and a "
            "declined payment moved no money"
        ),
        failure=failure,
        enabled=enabled,
        provider_payment_id=provider_payment_id,
    )


def settle_declined(run: ChargeRun, error: Declined, *, provider_payment_id: str | None) -> None:
    """A decline: the payment failed, with the provider's codes."""
    failure = Failure(
        code=error.code, decline_code=error.decline_code, message=error.message, kind=error.kind
    )
    answered = error.provider_payment_id or provider_payment_id
    settle(
        run,
        Reading(Next.SETTLE, Outcome.FAILED, failure=failure),
        provider_payment_id,
        proven_by=f"its answer to our call (provider payment {answered})",
    )


def settle_refused(run: ChargeRun, error: Permanent, *, provider_payment_id: str | None) -> None:
    """A permanent refusal: the payment failed, unless it says our side is wrong (parked)."""
    if error.code in _OPERATOR_ERRORS or error.http_status in _OPERATOR_HTTP_STATUSES:
        raise Parked(f"provider refused our request: {describe_error(error)}")
    failure = Failure(code=error.code or "invalid_request", message=error.message)
    settle(run, Reading(Next.SETTLE, Outcome.FAILED, failure=failure), provider_payment_id)


# -- finish ---------------------------------------------------------------------------------


def finish(run: ChargeRun) -> None:
    """The payment's final status, in one fenced transaction with the settlement (when this
    run read it), the outcome row, the ledger lines and the outbox event."""
    lease = run.lease
    settlement, run.settlement = run.settlement, None
    # 1. settled by an earlier run (stored): check it before anything is written
    if settlement is None:
        problem = _finish_problem(run.record)
        if problem is not None:
            raise Parked(problem)
    parked: list[str] = []

    def write(uow: UnitOfWork, now: datetime) -> PaymentRecord | None:
        record = run.record
        # 2. settled by this run: store it, and check what it says
        if settlement is not None:
            settled = uow.leases.record_settlement(
                record.id, token=lease.token, now=now, **settlement
            )
            if settled is None:
                return None
            record = settled
            problem = _finish_problem(record)
            if problem is not None:
                parked.append(problem)
                return record  # the settlement commits; the park follows
        # 3. the final status and its books
        return _write_finish(uow, now, run, record, row_locked=settlement is not None)

    lease.finish(write, report=_report_finished)
    if parked:
        raise Parked(parked[0])


def _write_finish(
    uow: UnitOfWork, now: datetime, run: ChargeRun, record: PaymentRecord, *, row_locked: bool
) -> PaymentRecord | None:
    """COMPLETED with the final status and the stored answer, then the books: the outcome
    row, the ledger lines and the outbox event.  None: fenced out (the unit rolls back)."""
    outcome = record.provider_outcome
    assert outcome is not None
    status = PaymentStatus(outcome.value)
    amount, currency = _finish_amount(record)
    captured = amount if outcome is Outcome.SUCCEEDED else 0
    capturable = amount if outcome is Outcome.REQUIRES_CAPTURE else 0
    # The stored answer reflects the event this finish writes (same lock, same number): a
    # GET of the unchanged payment is these very bytes.
    sequence = _event_number(uow, record, row_locked=row_locked)
    final = replace(
        record,
        latest_event_sequence=sequence,
        status=status,
        recovery_point=RecoveryPoint.COMPLETED,
        lease_owner=None,
        locked_until=None,
        next_attempt_at=None,
        completed_at=None if outcome is Outcome.REQUIRES_CAPTURE else now,
        updated_at=now,
        amount_captured=captured,
        amount_capturable=capturable,
    )
    response = payment_representation(final)
    finished = uow.leases.finish(
        record.id,
        token=run.lease.token,
        status=status,
        response_body=response,
        now=now,
        amount_captured=captured,
        amount_capturable=capturable,
        event_sequence=sequence,
    )
    if finished is None:
        return None
    # The rest only writes (and the provider-call rows after it, ``Lease.write``): the
    # session sends them with the COMMIT (``orchestrator.db.postgres_session``).
    uow.outcomes.add_outcome(finished, now=now)
    uow.outcomes.add_ledger_lines(
        record.id,
        lines_for(
            outcome,
            amount=amount,
            currency=currency,
            account=booked_account(record.connector_account_id),
            client_id=record.client_id,
        ),
        now=now,
    )
    uow.outcomes.add_outbox_event(
        record.id, f"payment.{status.value}", response, now=now, sequence=sequence
    )
    return finished


def _event_number(uow: UnitOfWork, record: PaymentRecord, *, row_locked: bool) -> int:
    """The number of the event this finish writes, taken under the payment's row lock.

    ``row_locked``: the settlement's UPDATE in this transaction holds the row lock, and its
    row (``record``) carries the newest event number committed before the lock was granted;
    the finish's UPDATE raises it.  Without that UPDATE, the number is taken (and the lock
    with it) by a statement of its own."""
    if row_locked:
        return record.latest_event_sequence + 1
    return uow.outcomes.next_event_sequence(record.id)


def _finish_amount(record: PaymentRecord) -> tuple[int, str]:
    """What the finish books: what the provider moved, if it says."""
    amount, currency = record.request.amount, record.request.currency
    moved = record.provider_outcome in (Outcome.SUCCEEDED, Outcome.REQUIRES_CAPTURE)
    if moved and record.settled_amount is not None:
        amount, currency = record.settled_amount, record.settled_currency or currency
    return amount, currency


def _finish_problem(record: PaymentRecord) -> str | None:
    """Never finish a success at an amount the provider did not move: the checks before
    confirm make this unreachable, and this keeps it so."""
    amount, currency = _finish_amount(record)
    if (amount, currency) != (record.request.amount, record.request.currency):
        return (
            f"provider moved {amount} {currency}, the payment asked for "
            f"{record.request.amount} {record.request.currency}"
        )
    return None


def _report_finished(finished: PaymentRecord) -> None:
    metrics.PAYMENTS_FINISHED.labels(status=finished.status.value).inc()
    metrics.ROUTE_ATTEMPTS.labels(
        connector_account=finished.connector_account_id or PLATFORM_ACCOUNT,
        outcome=finished.status.value,
    ).inc()
    log.info("payment_finished", payment_id=finished.id, status=finished.status.value)
