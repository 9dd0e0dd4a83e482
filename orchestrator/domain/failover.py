"""Failover: when a payment may move to the next account of its route (decision 0086).

Pure decisions, read by the charge (``engine.kinds.charge.failover``) at the three places an
attempt can end without money moving::

    what the attempt said                           next account?   decision
    ----------------------------------------------  -------------   -----------------------
    a decline of class ``card`` (or unclassified)   any             FAIL (the same card
                                                                    would be declined again)
    a decline of class ``provider``                 yes             FAIL_OVER
                                                    no              FAIL
    its circuit open, no call that could have       yes             FAIL_OVER
      moved money was ever sent at this account     no              WAIT (decision 0082)
    its circuit open, such a call was sent          any             WAIT (the call is
                                                                    unresolved: never a guess)
    an unknown outcome (timeout, 5xx)               any             not here: the attempt
                                                                    resolves it first (query,
                                                                    replay, technical cancel);
                                                                    a resolution that proves
                                                                    "not charged" reads as a
                                                                    ``provider`` decline

"Next account" is the next *enabled* one after the account the payment runs on: the route
was resolved at accept, and an account disabled since (``DELETE /v1/connector_accounts/{id}``,
the ops or CLI disable) is passed over (``skipped_accounts``), never called.  None enabled
remains: the same as no next account.  Which accounts are enabled is passed in (the engine
reads it), so these stay pure.

Hazard: every FAIL_OVER is a second provider asked to move the same money.  It is only ever
decided on a *proof* that the current account did not move it: a refusal the provider answered
(it answered, so nothing is pending), a call the circuit refused before sending, or an unknown
outcome its adapter resolved.  The proof is written with the move (``payment_attempts``).
"""

from __future__ import annotations

from collections.abc import Set
from enum import StrEnum

from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.routing import PLATFORM_ACCOUNT

# ``Declined.kind`` / ``PaymentError.kind``: whose problem a decline is (decision 0087).
CARD = "card"
PROVIDER = "provider"


class Decision(StrEnum):
    FAIL = "fail"
    FAIL_OVER = "fail_over"
    WAIT = "wait"


class FailoverReason(StrEnum):
    """Why an attempt ended in a failover (a metric label and the attempt row's ``reason``)."""

    PROVIDER_DECLINE = "provider_decline"
    CIRCUIT_OPEN = "circuit_open"


def following_accounts(record: PaymentRecord) -> tuple[str, ...]:
    """The route's entries after the one the payment runs on, in failover order (empty: it
    is the last, or the payment has a one-account route, stored or implicit).

    The position is the current account's place in the route (a route names each account
    once), not the number of failovers: a skipped account moves it on without an attempt."""
    current = record.connector_account_id or PLATFORM_ACCOUNT
    if current not in record.route:
        return record.route[record.failovers + 1 :]
    return record.route[record.route.index(current) + 1 :]


def next_account(record: PaymentRecord, enabled: Set[str]) -> str | None:
    """The first ``enabled`` route entry after the one the payment runs on (None: none
    remains)."""
    return next((entry for entry in following_accounts(record) if entry in enabled), None)


def skipped_accounts(record: PaymentRecord, enabled: Set[str]) -> tuple[str, ...]:
    """The disabled route entries a failover passes over: those before ``next_account``, or
    every one left when none enabled remains."""
    skipped: list[str] = []
    for entry in following_accounts(record):
        if entry in enabled:
            break
        skipped.append(entry)
    return tuple(skipped)


def after_decline(record: PaymentRecord, kind: str | None, enabled: Set[str]) -> Decision:
    """A refusal the provider answered.  Only a ``provider`` decline may fail over: a card
    decline, or a decline the adapter did not classify, fails the payment; so does a
    ``provider`` decline with no enabled account left on the route."""
    if kind == PROVIDER and next_account(record, enabled) is not None:
        return Decision.FAIL_OVER
    return Decision.FAIL


def has_unresolved_call(record: PaymentRecord) -> bool:
    """Whether a call that could have moved money may have been sent at this account: a
    confirm number was taken (it is durable before the confirm is sent, so it may have gone),
    a customer's result waits to be forwarded, or an outcome is still unknown."""
    return (
        record.confirm_attempts > 0
        or record.action_result_pending
        or record.unknown_outcomes > 0
        or record.lookup_pending
    )


def after_circuit_open(record: PaymentRecord, enabled: Set[str]) -> Decision:
    """The account's circuit refused a call (nothing was sent): fail over only when nothing
    that could have moved money was sent here before and an enabled account remains, else
    wait the outage out."""
    if next_account(record, enabled) is not None and not has_unresolved_call(record):
        return Decision.FAIL_OVER
    return Decision.WAIT
