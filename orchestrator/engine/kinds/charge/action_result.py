"""The customer's authentication result, forwarded to a provider that takes it.

A provider whose customer authenticates through the merchant's page (Adyen: the 3-D Secure
component, then ``/payments/details``) needs the result sent on.  The merchant sends it to
``POST /v1/payments/{id}/details``; that request's transaction stores it on the payment as
*pending* with its forward's number n (``action_result_attempts``) and wakes the payment.
Read top to bottom, ``forward_action_result`` is the round that follows, at
``intent_created`` while the payment waits for the customer::

    1. renew       the lease, before the call (the number n is durable already: the
                   merchant's request committed it)
    2. forward     key payorch-{id}-details-{n} (``ActionResult``)
    3. answered    no longer pending (guarded by n), then act on the answer as on a
                   confirm's: settled, declined, or ``requires_action`` again (the
                   authentication wait, ``authentication.await_customer``, with the new
                   action and the same deadline)

Hazards:

* an unknown outcome (timeout, connection error, 5xx) leaves the result pending: the next
  round sends the same body under the same key, which the provider answers with its stored
  result (or acts once).  Never a new number on a guess: n+1 exists only when the merchant
  sends another result after this one was answered;
* once answered, a read (``confirm.query_first``) replays forward n, not the confirm: its
  answer is the newer one (the confirm's only said "authenticate");
* a provider that refuses the forward as malformed (``Permanent``) moved no money: the
  payment fails with its code, as a refused confirm does.
"""

from __future__ import annotations

from orchestrator.engine.kinds.charge.confirm import act_on
from orchestrator.engine.kinds.charge.context import ChargeRun, pending_action_result
from orchestrator.engine.kinds.charge.finish import settle_declined, settle_refused
from orchestrator.engine.lease import describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    Retryable,
)

log = get_logger(__name__)


def forward_action_result(run: ChargeRun) -> None:
    """Send the pending result (or replay it under its key), then act on the answer."""
    record = run.record
    provider_payment_id = record.provider_payment_id
    assert provider_payment_id is not None, "intent_created without a provider id"
    result = pending_action_result(record)
    assert result is not None, "forward_action_result without a pending result"
    lease = run.lease
    # 1. renew
    lease.renew()
    # 2. forward
    try:
        provider_payment = run.provider.submit_action_result(
            provider_payment_id, record_id=record.id, action_result=result, order=run.order
        )
    except Declined as error:
        settle_declined(run, error, provider_payment_id=error.provider_payment_id)
        return
    except Retryable as error:
        # 429, or the key in use (our earlier forward still runs at the provider): the
        # next round sends the same body under the same key.
        lease.wait(error.retry_after, f"details: {describe_error(error)}")
        return
    except OutcomeUnknown as error:
        # The provider may have acted: the next round replays this forward (same key).
        run.note_unknown(error)
        lease.wait(None, f"details: {describe_error(error)}")
        return
    except Permanent as error:
        settle_refused(run, error, provider_payment_id=provider_payment_id)
        return
    # 3. answered, then act on it
    lease.write(
        lambda uow, now: uow.leases.record_action_result_answered(
            lease.id, token=lease.token, attempt=result.attempt, now=now
        )
    )
    log.info(
        "action_result_forwarded",
        payment_id=record.id,
        attempt=result.attempt,
        provider_status=provider_payment.status,
    )
    act_on(run, provider_payment)
