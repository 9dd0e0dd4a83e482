"""Confirm: query first, then confirm the provider payment, and act on what the provider says.

Read top to bottom, ``drive_payment`` is one round at ``intent_created``::

    1. query first   when a confirm may have been sent, or this run has not read it:
                     retrieve it and act on it; only a payment proven unconfirmed goes on
    2. number        renew and take confirm n, committed before the call (the key)
    3. confirm       key payorch-{id}-confirm-{n}
    4. act on it     ``engine.kinds.payment_reading`` reads the provider's answer: settle, wait
                     for the provider (no lease), wait for the customer (``authentication``), or
                     confirm again (the next round)

Hazards:

* an unknown outcome (timeout, connection error, 5xx) is never answered with a blind
  resend: the next confirm happens only after a retrieve proved the provider payment unconfirmed,
  and under n+1, since the provider replays a saved 500 for as long as it keeps a key;
* every provider payment read is compared with the record (``ChargeRun.check_ours``) before it is
  confirmed or settled: one that asks for another amount, currency, customer, capture or
  payment method is never confirmed, and the payment parks.
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.domain.states import Outcome, WaitingFor
from orchestrator.engine.kinds.charge.authentication import action_expired, await_customer
from orchestrator.engine.kinds.charge.context import ChargeRun, answered_action_result
from orchestrator.engine.kinds.charge.finish import settle, settle_declined, settle_refused
from orchestrator.engine.kinds.payment_reading import (
    AUTHENTICATION_TIMEOUT,
    Next,
    UnexpectedPaymentStatus,
    read_payment,
)
from orchestrator.engine.lease import Parked, Waiting, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    UNEXPECTED_STATE,
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderPayment,
    Retryable,
    optional,
)

log = get_logger(__name__)


def drive_payment(run: ChargeRun) -> None:
    """Query first (when a confirm may have been sent), then confirm."""
    provider_payment_id = run.record.provider_payment_id
    assert provider_payment_id is not None, "intent_created without a provider id"
    lease = run.lease
    # 1. query first
    if (
        run.must_query_first(provider_payment_id)
        and query_first(run, provider_payment_id) is not Next.CONFIRM
    ):
        return
    # 2. the confirm's number, durable before it is sent
    run.take_confirm_number()
    # 3. confirm
    record = run.record  # as the number left it
    try:
        # The forwarded key: payorch-{id}-confirm-{n} (``providers.keys.confirm_key``), n
        # the number just taken; a new n only after a retrieve proved the last one did not
        # confirm.
        provider_payment = run.provider.confirm_payment(
            provider_payment_id,
            record_id=record.id,
            attempt=record.confirm_attempts,
            **optional(
                off_session=(record.request.off_session, None),
                return_url=(record.request.return_url, None),
                order=(run.order, None),
            ),
        )
    except Declined as error:
        settle_declined(run, error, provider_payment_id=provider_payment_id)
        return
    except Retryable as error:
        # 429: nothing happened.  409 key in use: our earlier request with this key is
        # still executing at the provider; either way the next round queries first.
        lease.wait(error.retry_after, describe_error(error))
        return
    except OutcomeUnknown as error:
        # The provider may have charged.  The next round retrieves before any confirm; a
        # saved 500 would replay forever under this key, so a later confirm takes n+1.
        run.note_unknown(error)
        lease.wait(None, describe_error(error))
        return
    except Permanent as error:
        if error.code == UNEXPECTED_STATE:
            # Already confirmed (by us, earlier): the next round's retrieve tells how.
            log.info("confirm_unexpected_state", payment_id=run.record.id)
            return
        settle_refused(run, error, provider_payment_id=provider_payment_id)
        return
    # 4. act on what it says
    act_on(run, provider_payment)


def query_first(run: ChargeRun, provider_payment_id: str) -> Next | None:
    """Retrieve the provider payment and act on what it says (None: the read failed, waited)."""
    lease = run.lease
    lease.renew()
    try:
        # A provider with no read API replays the last confirm's key (``PaymentOrder``), or
        # the last forward of the customer's result (``ActionResult``), and past a number of
        # unknown outcomes of its own choosing resolves them another way.
        record = run.record
        provider_payment = run.provider.retrieve_payment(
            provider_payment_id,
            **optional(
                order=(run.order, None),
                confirm_attempt=(record.confirm_attempts, 0),
                unknown_outcomes=(record.unknown_outcomes, 0),
                # Once a customer's result was answered, its forward is the newer answer.
                action_result=(answered_action_result(record), None),
            ),
        )
    except Retryable as error:
        lease.wait(error.retry_after, describe_error(error))
        return None
    except OutcomeUnknown as error:
        run.note_unknown(error)
        lease.wait(None, describe_error(error))
        return None
    except Permanent as error:
        raise Parked(
            f"cannot read provider payment {provider_payment_id}: {describe_error(error)}"
        ) from error
    return act_on(run, provider_payment)


def act_on(run: ChargeRun, provider_payment: ProviderPayment) -> Next:
    """The provider's truth about our provider payment, read (``engine.kinds.payment_reading``)."""
    run.check_ours(provider_payment)
    try:
        reading = read_payment(provider_payment)
    except UnexpectedPaymentStatus as error:
        raise Parked(str(error)) from error
    if reading.next is Next.SETTLE:
        if reading.outcome is Outcome.CANCELED and action_expired(run):
            # Canceled by our own timeout (the cancel's answer was lost, then read).
            reading = replace(reading, failure=AUTHENTICATION_TIMEOUT)
        settle(run, reading, provider_payment.id, provider_payment)
    elif reading.next is Next.WAIT:
        # An asynchronous method: nothing to do until the provider settles it.  No lease
        # held meanwhile, not parked; an event or the slow re-check resumes.
        why = f": {provider_payment.awaiting}" if provider_payment.awaiting else ""
        raise Waiting(
            run.lease.settings.processing_recheck_seconds,
            f"provider still processing {provider_payment.id}{why}",
            WaitingFor.PROVIDER,
        )
    elif reading.next is Next.AWAIT_CUSTOMER:
        await_customer(run, provider_payment)
    return reading.next
