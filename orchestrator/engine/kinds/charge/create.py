"""Create: one unconfirmed provider payment for the payment, under a key derived from its id.

Read top to bottom, ``create_payment`` is one round at ``accepted`` (no lookup owed)::

    1. stamp     renew and stamp the attempt, committed before the call: the first and the
                 last create bound the window a lookup reads (the claim did it, T1, for
                 this run's first create)
    2. create    key payorch-{id}-create, ``confirm=false``
    3. answer    our payment    check it is ours, store it (``intent_created``) and take the
                                first confirm's number with it (T2)
                 unknown        count it; a lookup is owed, and the loop runs it next
                 429 / 409      back off; the same key again
                 declined       settle failed (with the provider's payment, if any)
                 other 4xx      settle failed, or park when it says our side is wrong

Hazards:

* an unconfirmed provider payment moves no money, and the key is the same for every create of the
  payment, so re-sending it is always safe: it replays our provider payment or joins the one in
  flight, and never makes a second;
* a create whose outcome is unknown is never simply re-sent: even a saved 500 replaying
  under the fixed key gets here every time, and each one owes a lookup (``lookup``) first;
* a provider payment the provider returns is compared with the record before it is stored
  (``ChargeRun.check_ours``): one that is not what we asked for parks the payment.
"""

from __future__ import annotations

from orchestrator.engine.kinds.charge.context import ChargeRun
from orchestrator.engine.kinds.charge.finish import settle_declined, settle_refused
from orchestrator.engine.lease import describe_error
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    Retryable,
    optional,
)


def create_payment(run: ChargeRun) -> None:
    """Create the payment's provider payment (unconfirmed) and store it, with the first confirm's
    number taken."""
    lease = run.lease
    record = run.record
    # 1. stamp the attempt
    lease.check_budget()
    run.stamp_create_attempt()
    # 2. create
    try:
        # The forwarded key: payorch-{id}-create (``providers.keys.create_key``), the same
        # for every create of this attempt (after a failover, payorch-{id}-a{k}-create).
        provider_payment = run.provider.create_payment(
            record_id=record.id,
            amount=record.request.amount,
            currency=record.request.currency,
            payment_method=record.token_method_for_account,
            description=record.request.description,
            metadata=record.request.metadata,
            **optional(
                customer=(record.request.customer, None),
                capture_method=(record.request.capture_method, "automatic"),
                route_attempt=(record.failovers + 1, 1),
            ),
        )
    # 3. what it answered
    except Retryable as error:
        lease.wait(error.retry_after, describe_error(error))
        return
    except OutcomeUnknown as error:
        # A lookup is owed before the next create (``lookup_pending``): the loop runs it
        # next, before this run sends anything else.
        run.note_unknown(error, owe_lookup=True)
        return
    except Declined as error:
        settle_declined(run, error, provider_payment_id=error.provider_payment_id)
        return
    except Permanent as error:
        settle_refused(run, error, provider_payment_id=None)
        return
    run.check_ours(provider_payment)
    run.store_created_payment(provider_payment)
