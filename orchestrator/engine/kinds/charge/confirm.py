"""Confirm: query first, then confirm the intent, and act on what the provider says.

Read top to bottom, ``drive_intent`` is one round at ``intent_created``::

    1. query first   when a confirm may have been sent, or this run has not read the intent:
                     retrieve it and act on it; only an intent proven unconfirmed goes on
    2. number        renew and take confirm n, committed before the call (the key)
    3. confirm       key payorch-{id}-confirm-{n}
    4. act on it     ``engine.kinds.intent_outcome`` reads the intent: settle, wait for the
                     provider (no lease), wait for the customer (``authentication``), or
                     confirm again (the next round)

Hazards:

* an unknown outcome (timeout, connection error, 5xx) is never answered with a blind
  resend: the next confirm happens only after a retrieve proved the intent unconfirmed,
  and under n+1, since the provider replays a saved 500 for as long as it keeps a key;
* every intent read is compared with the record (``ChargeRun.check_ours``) before it is
  confirmed or settled: one that asks for another amount, currency, customer, capture or
  payment method is never confirmed, and the payment parks.
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.domain.states import Outcome, WaitingFor
from orchestrator.engine.kinds.charge.authentication import action_expired, await_customer
from orchestrator.engine.kinds.charge.context import UNEXPECTED_STATE, ChargeRun
from orchestrator.engine.kinds.charge.finish import settle, settle_declined, settle_refused
from orchestrator.engine.kinds.intent_outcome import (
    AUTHENTICATION_TIMEOUT,
    Next,
    UnexpectedIntentStatus,
    read_intent,
)
from orchestrator.engine.lease import Parked, Waiting, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderIntent,
    Retryable,
    optional,
)

log = get_logger(__name__)


def drive_intent(run: ChargeRun) -> None:
    """Query first (when a confirm may have been sent), then confirm."""
    intent_id = run.record.provider_payment_id
    assert intent_id is not None, "intent_created without a provider id"
    lease = run.lease
    # 1. query first
    if run.must_query_first(intent_id) and query_first(run, intent_id) is not Next.CONFIRM:
        return
    # 2. the confirm's number, durable before it is sent
    run.take_confirm_number()
    # 3. confirm
    record = run.record  # as the number left it
    try:
        # The forwarded key: payorch-{id}-confirm-{n} (``providers.keys.confirm_key``), n
        # the number just taken; a new n only after a retrieve proved the last one did not
        # confirm.
        intent = run.provider.confirm_intent(
            intent_id,
            record_id=record.id,
            attempt=record.confirm_attempts,
            **optional(
                off_session=(record.request.off_session, None),
                return_url=(record.request.return_url, None),
            ),
        )
    except Declined as error:
        settle_declined(run, error, intent_id=intent_id)
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
        settle_refused(run, error, intent_id=intent_id)
        return
    # 4. act on what it says
    act_on(run, intent)


def query_first(run: ChargeRun, intent_id: str) -> Next | None:
    """Retrieve the intent and act on what it says (None: the read failed, waited)."""
    lease = run.lease
    lease.renew()
    try:
        intent = run.provider.retrieve_intent(intent_id)
    except Retryable as error:
        lease.wait(error.retry_after, describe_error(error))
        return None
    except OutcomeUnknown as error:
        run.note_unknown(error)
        lease.wait(None, describe_error(error))
        return None
    except Permanent as error:
        raise Parked(f"cannot read intent {intent_id}: {describe_error(error)}") from error
    return act_on(run, intent)


def act_on(run: ChargeRun, intent: ProviderIntent) -> Next:
    """The provider's truth about our intent, read (``engine.kinds.intent_outcome``)."""
    run.check_ours(intent)
    try:
        reading = read_intent(intent)
    except UnexpectedIntentStatus as error:
        raise Parked(str(error)) from error
    if reading.next is Next.SETTLE:
        if reading.outcome is Outcome.CANCELED and action_expired(run):
            # Canceled by our own timeout (the cancel's answer was lost, then read).
            reading = replace(reading, failure=AUTHENTICATION_TIMEOUT)
        settle(run, reading, intent.id, intent)
    elif reading.next is Next.WAIT:
        # An asynchronous method: nothing to do until the provider settles it.  No lease
        # held meanwhile, not parked; an event or the slow re-check resumes.
        raise Waiting(
            run.lease.settings.processing_recheck_seconds,
            f"provider still processing {intent.id}",
            WaitingFor.PROVIDER,
        )
    elif reading.next is Next.AWAIT_CUSTOMER:
        await_customer(run, intent)
    return reading.next
