"""The charge: create and confirm one provider payment, once.

Its lease lives on the payment row (``db.repositories.leases``).  Read top to bottom,
``run_steps`` is the recovery-point loop: which step for which point, until the payment is
finished or the run stops (``engine.lease``: Deferred, Waiting, Parked, Fenced)::

    [accepted] ── lookup owed? ── yes ──► lookup: scan the create's window ─┐
        │                                   found ──► [intent_created]      │
        │ no                                absent ──► the create again ◄───┘
        ▼
      create (key payorch-{id}-create) ── unknown ──► lookup owed
        │
        ▼
    [intent_created] ── query first? ──► retrieve, act on it
        │
        ▼
      confirm (key payorch-{id}-confirm-{n}) ── unknown ──► the next round queries first
        │
        ├── requires_action ──► authentication: wait for the customer (no lease), or
        │                       past the deadline cancel (key payorch-{id}-cancel-{n});
        │                       a customer's result sent to us (pending) is forwarded
        │                       first (key payorch-{id}-details-{n}) and its answer acted on
        ├── processing ──► wait for the provider (no lease)
        ▼
      settle (held on the run) ──► [provider_settled] finish (status, outcome, ledger,
                                   outbox, COMPLETED)

One module per step, each with its hazards in its docstring::

    create.py          create the provider payment, store it (``intent_created``)
    lookup.py          resolve a create whose outcome is unknown: scan, verdict, resend
    confirm.py         query first, take confirm n, confirm, act on the provider payment
    authentication.py  3-D Secure: show the action, wait, cancel an abandoned provider payment
    action_result.py   3-D Secure through us: forward the customer's result, act on the answer
    finish.py          settle, and the one transaction that writes the final status
    context.py         ``ChargeRun``: what the steps share, and the writes they share

The protocol, whatever the step:

* the lease is renewed before every provider call, and each key is durable before it is
  sent (the confirm number is taken in the renewal's transaction);
* an unknown outcome (timeout, connection error, 5xx) is never answered with a blind
  resend: a lost create is looked up, a lost confirm or cancel is followed by a retrieve;
* every provider payment we read is compared with the record
  (``engine.kinds.payment_match``) before it is adopted, confirmed or settled; one that is
  not ours is kept on the record (``rejected_intents``) and the payment goes to needs_attention;
* the final status is written in one place: ``finish.finish``.

The transactions of the happy path (a create, a confirm that succeeds), and why none can
be merged further::

    T1  the claim (``runner``): lease, fencing token, attempt, and, at ``accepted``, the
        create attempt's stamp (``LeaseRepository._claim_values``)
            must commit before the create: it is the lease we call under and the stamp
            that bounds the lookup of a create whose outcome is lost
        -- create (key payorch-{id}-create) --
    T2  the create's provider-call row, the provider payment id (``intent_created``), the lease
        renewed and the confirm number n taken (``ChargeRun.store_created_payment``)
            must commit before the confirm: n is the confirm's key, and a crash after the
            confirm must find the provider payment id to query first
        -- confirm (key payorch-{id}-confirm-{n}) --
    T3  the confirm's provider-call row, the settlement and the finish (status, outcome,
        ledger, outbox, COMPLETED) (``finish.finish``)
            the only write after the last call

On PostgreSQL that is 6 round trips: T1 is one statement in autocommit (its lease event
row written by the same statement); T2 is one statement in autocommit too, its ``UPDATE``
inserting the call row in a CTE (``Lease.write(one_statement=True)``,
``db.repositories.carried_calls``); T3 is BEGIN, the settlement (its ``UPDATE`` takes the
row lock and returns the payment's event number, ``latest_event_sequence``), the finish's
``UPDATE`` with its lease event, then the rows that need no answer (outcome, ledger,
outbox, the call row) with the COMMIT, in one round trip (the session sends the writes
left after a unit's last read with its COMMIT, ``db.postgres_session``;
tests/integration/test_provider_call_rows.py counts them).

The settlement is not committed before the finish on the happy path: a worker that dies
between the confirm and T3 leaves ``intent_created`` with ``confirm_attempts`` > 0, and
its successor queries first (one retrieve more, no money moved).  A finish that must park
writes the settlement first.
"""

from __future__ import annotations

from typing import Any

from orchestrator.db.repositories.leases import LeaseRepository
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.failover import (
    Decision,
    FailoverReason,
    after_circuit_open,
    has_unresolved_call,
    skipped_accounts,
)
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.routing import PLATFORM_ACCOUNT
from orchestrator.domain.states import RecoveryPoint
from orchestrator.engine.kinds.charge.action_result import forward_action_result
from orchestrator.engine.kinds.charge.confirm import drive_payment
from orchestrator.engine.kinds.charge.context import ChargeRun
from orchestrator.engine.kinds.charge.create import create_payment
from orchestrator.engine.kinds.charge.failover import enabled_following, fail_over, log_skipped
from orchestrator.engine.kinds.charge.finish import finish
from orchestrator.engine.kinds.charge.lookup import resolve_lost_create
from orchestrator.engine.lease import Lease, ProcessResult
from orchestrator.engine.runner import Runner, run_operation
from orchestrator.providers.base import PaymentProvider
from orchestrator.providers.circuit import CircuitOpen

__all__ = ["CHARGE", "ChargeKind", "ChargeRun", "process_payment", "run_steps"]


class ChargeKind:
    """The charge's rows and steps, for ``engine.runner.run_operation``."""

    name = "charge"

    def leases(self, uow: UnitOfWork) -> LeaseRepository:
        return uow.leases

    def log_fields(self, record_id: str) -> dict[str, Any]:
        return {"payment_id": record_id}

    def run(self, lease: Lease[PaymentRecord], provider: PaymentProvider) -> None:
        charge = ChargeRun.after_claim(lease, provider)
        try:
            run_steps(charge)
        except CircuitOpen as refused:
            # Nothing was sent (decision 0082).  With a next account and no call that could
            # have moved money ever sent here, that is the proof failover needs (decision
            # 0086); otherwise the runner makes it a wait.  Disabled accounts are passed over
            # (none read, none logged, when a call sent here makes it a wait anyway).
            if has_unresolved_call(lease.record):
                raise
            enabled = enabled_following(charge)
            if after_circuit_open(lease.record, enabled) is Decision.FAIL_OVER:
                account = lease.record.connector_account_id or PLATFORM_ACCOUNT
                fail_over(
                    charge,
                    reason=FailoverReason.CIRCUIT_OPEN,
                    proof=(
                        f"the circuit of {account} refused the call before it was sent "
                        f"({refused}), and no confirm, customer's result or call of unknown "
                        f"outcome was ever sent at {account} for this attempt"
                    ),
                    failure=Failure(
                        code="provider_unavailable",
                        message=f"{account} is unavailable (its circuit is open).",
                    ),
                    enabled=enabled,
                )
            log_skipped(lease.record, skipped_accounts(lease.record, enabled), moved_to=None)
            raise


CHARGE = ChargeKind()


def process_payment(
    runner: Runner,
    payment_id: str,
    lease_token: int,
    **options: Any,
) -> ProcessResult:
    """Charge ``payment_id`` under the lease ``lease_token`` carries (see ``run_operation``
    for the options)."""
    return run_operation(runner, CHARGE, payment_id, lease_token, **options)


def run_steps(charge: ChargeRun) -> None:
    """The recovery-point loop: one step per round, until the finish or a stop."""
    while True:
        record = charge.record
        point = record.recovery_point
        if charge.settlement is not None or point is RecoveryPoint.PROVIDER_SETTLED:
            finish(charge)  # settled, now or by an earlier run: the final status
            return
        if point is RecoveryPoint.ACCEPTED and record.lookup_pending:
            resolve_lost_create(charge)  # a create's outcome is unknown: find it first
        elif point is RecoveryPoint.ACCEPTED:
            create_payment(charge)
        elif point is RecoveryPoint.INTENT_CREATED and record.action_result_pending:
            # The customer's result, sent to us: forwarded (or replayed) before any read.
            forward_action_result(charge)
        elif point is RecoveryPoint.INTENT_CREATED:
            drive_payment(charge)  # query first when needed, confirm, act on the provider payment
        else:
            return  # completed by someone else; the fence would refuse us anyway
