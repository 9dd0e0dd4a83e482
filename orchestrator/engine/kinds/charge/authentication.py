"""Authentication (3-D Secure): the provider payment waits for the customer, or is canceled.

Read top to bottom, ``await_customer`` is what a ``requires_action`` provider payment gets::

    off-session payment   nobody is present to authenticate: settle failed
                          (``authentication_required``)
    past the deadline     cancel the abandoned provider payment (``cancel_abandoned``), then settle
                          canceled (``authentication_timeout``)
    otherwise             show what the customer must do (``payment.requires_action``, once),
                          then wait without a lease (``Waiting``) until a provider event
                          or the re-check wakes the payment

Hazards:

* the deadline (ACTION_TIMEOUT_SECONDS) counts from the first ask (``waiting_since``,
  database clock), not from this run, so re-checks and takeovers never extend it;
* a cancel whose outcome is lost is never re-sent blindly: the next round retrieves the
  provider payment first (``confirm_attempts`` > 0) and acts on what it is -- the customer may have
  authenticated at the last moment.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import Outcome, WaitingFor
from orchestrator.engine.kinds.charge.context import ChargeRun
from orchestrator.engine.kinds.charge.finish import settle
from orchestrator.engine.kinds.payment_reading import (
    AUTHENTICATION_REQUIRED,
    AUTHENTICATION_TIMEOUT,
    Next,
    Reading,
)
from orchestrator.engine.lease import Parked, Waiting, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    UNEXPECTED_STATE,
    OutcomeUnknown,
    Permanent,
    ProviderPayment,
    Retryable,
    optional,
)

log = get_logger(__name__)


def await_customer(run: ChargeRun, provider_payment: ProviderPayment) -> None:
    """``requires_action``: show what the customer must do (``payment.requires_action``
    once), then wait without a lease until an event or the re-check; past
    ACTION_TIMEOUT_SECONDS, cancel the provider payment instead."""
    record = run.record
    if record.request.off_session:
        # Nobody is present to authenticate (the provider should have declined).
        settle(
            run,
            Reading(Next.SETTLE, Outcome.FAILED, failure=AUTHENTICATION_REQUIRED),
            provider_payment.id,
        )
        return
    now = run.lease.now()
    deadline = action_deadline(run, now)
    if now >= deadline:
        cancel_abandoned(run, provider_payment)
        return
    first_ask = record.waiting_for is not WaitingFor.CUSTOMER
    if (
        first_ask
        or record.next_action != provider_payment.next_action
        or record.client_secret != provider_payment.client_token
    ):
        show_action(run, provider_payment, emit=first_ask)
    recheck = min(run.lease.settings.action_recheck_seconds, (deadline - now).total_seconds())
    raise Waiting(
        max(recheck, 0.0), f"customer authenticating {provider_payment.id}", WaitingFor.CUSTOMER
    )


def action_deadline(run: ChargeRun, now: datetime) -> datetime:
    """When the customer's time to authenticate runs out (from the first ask)."""
    record = run.record
    started = record.waiting_since if record.waiting_for is WaitingFor.CUSTOMER else None
    return (started or now) + timedelta(seconds=run.lease.settings.action_timeout_seconds)


def action_expired(run: ChargeRun) -> bool:
    """Whether the payment waits for a customer whose time ran out."""
    if run.record.waiting_for is not WaitingFor.CUSTOMER:
        return False
    now = run.lease.now()
    return now >= action_deadline(run, now)


def show_action(run: ChargeRun, provider_payment: ProviderPayment, *, emit: bool) -> None:
    """Store what the customer must do (the payment shows ``requires_action``); ``emit``:
    the first ask, announced once in the outbox."""
    lease = run.lease

    def write(uow: UnitOfWork, now: datetime) -> PaymentRecord | None:
        shown = uow.leases.record_action_required(
            lease.id,
            token=lease.token,
            next_action=provider_payment.next_action,
            client_secret=provider_payment.client_token,
            now=now,
        )
        if shown is not None and emit:
            uow.outcomes.add_outbox_event(
                shown.id, "payment.requires_action", payment_representation(shown), now=now
            )
        return shown

    lease.write(write)
    log.info(
        "payment_requires_action", payment_id=run.record.id, provider_payment_id=provider_payment.id
    )


def cancel_abandoned(run: ChargeRun, provider_payment: ProviderPayment) -> None:
    """The customer never authenticated: cancel the provider payment, then settle ``canceled`` /
    ``authentication_timeout``."""
    lease = run.lease
    lease.renew()
    attempt = run.record.unknown_outcomes + 1
    try:
        # The forwarded key: payorch-{id}-cancel-{n} (``providers.keys.cancel_key``), n one
        # past the unknown outcomes so far, so a cancel whose outcome was lost is re-sent
        # under a new key only after a retrieve found the provider payment still open.
        canceled = run.provider.cancel_payment(
            provider_payment.id,
            operation_id=run.record.id,
            attempt=attempt,
            reason="abandoned",
            # A provider that never authorised the payment answers from the order.
            **optional(order=(run.order, None)),
        )
    except Retryable as error:
        lease.wait(error.retry_after, f"cancel: {describe_error(error)}")
        return
    except OutcomeUnknown as error:
        # The next round retrieves first (confirm_attempts > 0) and sees the truth.
        run.note_unknown(error)
        lease.wait(None, f"cancel: {describe_error(error)}")
        return
    except Permanent as error:
        if error.code == UNEXPECTED_STATE:
            # It moved on meanwhile (the customer authenticated at the last moment): the
            # next round's retrieve tells how.
            log.info("cancel_unexpected_state", payment_id=run.record.id)
            return
        raise Parked(
            f"cannot cancel provider payment {provider_payment.id}: {describe_error(error)}"
        ) from error
    run.check_ours(canceled)
    if canceled.status != "canceled":
        return  # the next round reads it again and acts on what it is
    settle(
        run,
        Reading(Next.SETTLE, Outcome.CANCELED, failure=AUTHENTICATION_TIMEOUT),
        canceled.id,
        canceled,
    )
    log.info(
        "payment_authentication_timeout",
        payment_id=run.record.id,
        provider_payment_id=provider_payment.id,
    )
