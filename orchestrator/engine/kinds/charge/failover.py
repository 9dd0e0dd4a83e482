"""Failover: end this attempt and move the payment to the next account of its route.

The decision is ``domain.failover``'s; this is the write, and it carries the proof::

    attempt k at account A  ── a provider decline answered, an unknown outcome resolved as
                               "not charged", or A's circuit refused before sending ──┐
                                                                                       │
    one fenced transaction:  payment_attempts row k (A, what it said, the PROOF)       │
                             payments: account B, provider, failovers = k,  ◄─────────┘
                             recovery point accepted, A's provider state cleared
                                                                                       │
    the lease is handed back (due now); the next run claims it and calls B with the    │
    keys of attempt k + 1 (``providers.keys``: payorch-{id}-a{k+1}-…)  ◄────────────────┘

Hazards:

* a worker killed between "A proven not charged" and "B called" must resume at B, never
  decide again: the proof and the move commit together, and the resumed run reads the row
  (account B, ``failovers`` = k) and derives the same keys for B;
* a stale worker (fenced) must not move the payment: the UPDATE is guarded by the lease token
  and by ``failovers`` (the attempt it leaves), and the attempt row is written only after it;
* the run that decided ends here (``Deferred``): its provider is A's, and the next claim
  builds B's from the row, so nothing sent to B can carry A's credentials;
* an account disabled after the accept is never called: the decision reads which of the
  route's following accounts are enabled (``enabled_following``) and passes the disabled
  ones over (logged ``failover_account_skipped``, named in the proof and the row's reason);
  the write reads B again in its transaction, and B disabled in between rolls the move back
  (``Deferred``) exactly as a worker killed before this commit would: the next run reads
  A's truth again and decides again.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import NoReturn

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.attempts import (
    EndedAttempt,
    current_attempt_started,
    ended_attempt,
    failure_document,
)
from orchestrator.domain.failover import (
    FailoverReason,
    following_accounts,
    next_account,
    skipped_accounts,
)
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.routing import PLATFORM_ACCOUNT, account_id_of
from orchestrator.engine.kinds.charge.context import ChargeRun
from orchestrator.engine.lease import Deferred, Parked
from orchestrator.logging import get_logger
from orchestrator.providers.base import PLATFORM_PROVIDER

log = get_logger(__name__)


def fail_over(
    run: ChargeRun,
    *,
    reason: FailoverReason,
    proof: str,
    failure: Failure,
    enabled: frozenset[str],
    provider_payment_id: str | None = None,
) -> NoReturn:
    """Record the proof and move to the next enabled account in one fenced transaction,
    then hand the lease back so the next run calls that account.  ``enabled``: the route's
    following accounts that were enabled when the decision was taken."""
    lease = run.lease
    record = run.record
    target = next_account(record, enabled)
    assert target is not None, "fail_over without an enabled next account"
    skipped = skipped_accounts(record, enabled)
    leaving = record.connector_account_id or PLATFORM_ACCOUNT
    shown = replace(record, provider_payment_id=provider_payment_id or record.provider_payment_id)
    passed_over = f" (skipped, disabled: {', '.join(skipped)})" if skipped else ""
    if skipped:
        proof = f"{proof}; {', '.join(skipped)} skipped: disabled after the accept"

    def write(uow: UnitOfWork, now: datetime) -> PaymentRecord | None:
        provider = _provider_of(uow, target)
        started = current_attempt_started(record)
        ended = ended_attempt(shown, failure=failure, started_at=started, ended_at=now)
        moved = uow.leases.fail_over(
            record.id,
            token=lease.token,
            failovers=record.failovers,
            connector_account_id=account_id_of(target),
            provider=provider,
            route_attempts=[*record.route_attempts, ended],
            reason=f"failed over to {target}{passed_over}: {reason.value}",
            now=now,
        )
        if moved is None:
            return None
        uow.attempts.add(
            EndedAttempt(
                payment_id=record.id,
                number=record.failovers + 1,
                connector_account=leaving,
                provider=record.provider,
                provider_payment_id=shown.provider_payment_id,
                status="failed",
                # With its class (``kind``): the payment row does not keep it, the proof does.
                failure={**(failure_document(failure) or {}), "kind": failure.kind},
                reason=reason.value,
                proof=proof,
                next_connector_account=target,
                started_at=started,
                ended_at=now,
            )
        )
        return moved

    lease.write(write)
    log_skipped(record, skipped, moved_to=target)
    metrics.ROUTE_ATTEMPTS.labels(connector_account=leaving, outcome="failed_over").inc()
    metrics.FAILOVERS.labels(connector_account=leaving, reason=reason.value).inc()
    log.info(
        "payment_failed_over",
        payment_id=record.id,
        connector_account=leaving,
        next_connector_account=target,
        reason=reason.value,
        proof=proof,
    )
    # Handed back due now: the next claim runs at the next account with its own provider.
    raise Deferred(0.0, f"failed over from {leaving} to {target}: {reason.value}")


def enabled_following(run: ChargeRun) -> frozenset[str]:
    """The route's accounts after the current one that are enabled now (the platform's
    always is), read in a short transaction of its own; no read when none follows."""
    following = following_accounts(run.record)
    if not following:
        return frozenset()
    with run.lease.uow() as uow:
        return frozenset(entry for entry in following if _is_enabled(uow, entry))


def log_skipped(record: PaymentRecord, skipped: tuple[str, ...], *, moved_to: str | None) -> None:
    """One line per disabled account a failover passed over (``moved_to`` None: none enabled
    remained, so the payment fails with its decline, or waits out an open circuit)."""
    for account in skipped:
        log.info(
            "failover_account_skipped",
            payment_id=record.id,
            connector_account=account,
            reason="disabled",
            next_connector_account=moved_to,
        )


def _is_enabled(uow: UnitOfWork, route_entry: str) -> bool:
    account_id = account_id_of(route_entry)
    if account_id is None:
        return True
    account = uow.connector_accounts.get(account_id)
    return account is not None and account.enabled


def _provider_of(uow: UnitOfWork, route_entry: str) -> str:
    """The provider of a route entry's account, read in the failover's transaction."""
    account_id = account_id_of(route_entry)
    if account_id is None:
        return PLATFORM_PROVIDER
    account = uow.connector_accounts.get(account_id)
    if account is None:
        # Routes are checked at PUT and at accept; an account cannot be deleted, only
        # disabled.  Never guess a provider for money: an operator looks.
        raise Parked(f"route account {route_entry} does not exist")
    if not account.enabled:
        # Disabled since the decision read it: roll the move back (nothing is written) and
        # decide again on the next run, as after a crash before this commit.
        raise Deferred(0.0, f"route account {route_entry} was disabled during the failover")
    return account.provider
