"""The engine: run one operation, of any kind, under a lease.

Read top to bottom, ``run_operation`` is the whole life of one task::

    1. claim     one statement: take the lease if the carried token is current or the
                 lease expired; the fencing token and the attempt count go up, and the
                 lease event row is written with it.  Not ours: NOT_CLAIMED, nothing
                 written.
    2. steps     ``kind.run(lease, provider)``: the kind's steps (``engine.kinds.*``).  Each
                 is a provider call between two fenced writes (``Lease.write``); the last
                 one writes the finish (final status, ledger, outbox) in one transaction.
    3. the end   Fenced   -> nothing more is written                       FENCED
                 Deferred -> lease released until next_attempt_at           DEFERRED
                 Waiting  -> lease released, re-check at next_attempt_at    WAITING
                 CircuitOpen -> the account's circuit refused a call: a wait  WAITING
                            (WaitingFor.CIRCUIT), no attempt spent, never parked
                 Parked   -> needs_attention, for an operator                PARKED

Safe to run any number of times, concurrently, with stale tokens: the claim and the fence
decide who may act.  What a kind supplies is only its steps and how it reads the
provider's truth after an unknown outcome; claim, renew, fenced write, backoff, defer and
park are here (and in ``engine.lease``), take-over and sweep in ``engine.takeover`` and
``engine.sweep``, and they serve every kind.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.lease_state import Leased
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.states import WaitingFor
from orchestrator.engine import call_log
from orchestrator.engine.lease import (
    Deferred,
    Fenced,
    Lease,
    LeaseStore,
    Parked,
    ProcessResult,
    R,
    Waiting,
)
from orchestrator.logging import get_logger
from orchestrator.providers.base import PaymentProvider, Permanent
from orchestrator.providers.circuit import CircuitOpen
from orchestrator.settings import Settings

log = get_logger(__name__)


class OperationKind(Protocol[R]):
    """One kind of provider-side effect (``engine.kinds``): its rows and its steps."""

    @property
    def name(self) -> str: ...

    def leases(self, uow: UnitOfWork) -> LeaseStore[R]:
        """The repository holding this kind's lease columns."""
        ...

    def log_fields(self, record_id: str) -> dict[str, Any]:
        """How log lines name a record of this kind."""
        ...

    def run(self, lease: Lease[R], provider: PaymentProvider) -> None:
        """The steps, from the record's recovery point to its finish."""
        ...


@dataclass(frozen=True)
class Runner:
    """What the engine uses, and nothing else (bound once in ``bootstrap``)."""

    uow: UnitOfWorkFactory
    provider: PaymentProvider
    settings: Settings
    # The claim's unit: its one statement commits on its own on PostgreSQL (no BEGIN and
    # no COMMIT round trips; the lease event row rides in the same statement, see
    # ``lease_statements.with_history``).  None: ``uow``.
    claim_uow: UnitOfWorkFactory | None = None
    # The provider for the record a run claimed (its connector account's: a payment's own,
    # an operation's payment's; ``bootstrap.ProviderRegistry``).  The engine never learns
    # which provider or account it is.  None: ``provider`` for every record.
    provider_for: Callable[[Leased], PaymentProvider] | None = None


@functools.cache
def default_owner() -> str:
    """This process's name on the leases it takes.  Cached: ``gethostname`` is a system
    call that hands the interpreter lock to another thread, once per run otherwise.  A
    forked child names itself anew."""
    return f"{socket.gethostname()}:{os.getpid()}"


os.register_at_fork(after_in_child=default_owner.cache_clear)


def run_operation(
    runner: Runner,
    kind: OperationKind[R],
    record_id: str,
    lease_token: int,
    *,
    owner: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    interruptions: tuple[type[BaseException], ...] = (),
) -> ProcessResult:
    """Claim ``record_id``'s lease and run ``kind``'s steps under it.

    ``interruptions`` are exceptions that mean "stop now and hand the work back" (Celery's
    SoftTimeLimitExceeded): the record is deferred for the sweeper instead of waiting for
    its lease to expire."""
    # Provider-call rows ride along with the next fenced write (``engine.call_log``); what
    # the run still holds when it ends (an error no write followed) is written alone.
    with call_log.collecting():
        try:
            return _run(runner, kind, record_id, lease_token, owner, sleep, rng, interruptions)
        finally:
            call_log.write_alone(call_log.take(), runner.uow)


def _run(
    runner: Runner,
    kind: OperationKind[R],
    record_id: str,
    lease_token: int,
    owner: str | None,
    sleep: Callable[[float], None],
    rng: random.Random | None,
    interruptions: tuple[type[BaseException], ...],
) -> ProcessResult:
    owner = owner or default_owner()
    started = time.monotonic()
    fields = kind.log_fields(record_id)

    # 1. claim
    with (runner.claim_uow or runner.uow)() as uow:
        now = uow.now()
        record = kind.leases(uow).claim(
            record_id,
            carried_token=lease_token,
            owner=owner,
            now=now,
            lease_until=now + timedelta(seconds=runner.settings.lease_seconds),
        )
        uow.commit()
    if record is None:
        log.info("claim_skipped", **fields, carried_token=lease_token)
        return ProcessResult.NOT_CLAIMED
    log.info(
        "lease_claimed",
        **fields,
        lease_token=record.lease_token,
        attempt=record.attempts,
        recovery_point=getattr(record, "recovery_point", None),
    )
    lease = Lease(
        store=kind.leases,
        uow=runner.uow,
        settings=runner.settings,
        record=record,
        owner=owner,
        log_fields=fields,
        sleep=sleep,
        # None until a backoff needs one (``Lease.wait``): seeding a generator reads the
        # system's entropy, a cost on every run that rarely backs off.
        rng=rng,
        started=started,
        statement_uow=runner.claim_uow,
    )

    # 2. the kind's steps, 3. how they ended
    try:
        if record.attempts > runner.settings.max_attempts:
            raise Parked(f"claimed {record.attempts} times without finishing")
        kind.run(lease, _provider(runner, record))
        return ProcessResult.COMPLETED
    except Fenced:
        return _fenced(lease)
    except Deferred as deferred:
        return _defer(lease, deferred)
    except Waiting as waiting:
        return _wait(lease, waiting)
    except CircuitOpen as refused:
        return _wait(lease, _circuit_wait(lease, refused, runner.settings))
    except Parked as parked:
        return _park(lease, parked.reason)
    except interruptions as interruption:
        return _interrupted(lease, interruption)


def _provider(runner: Runner, record: Leased) -> PaymentProvider:
    """The record's provider; one that cannot be built (no adapter for the account's
    provider, unreadable credentials) parks the record before any call is made."""
    if runner.provider_for is None:
        return runner.provider
    try:
        return runner.provider_for(record)
    except Permanent as error:
        raise Parked(f"no provider for this record: {error.message}") from error


def _circuit_wait(lease: Lease[Any], refused: CircuitOpen, settings: Settings) -> Waiting:
    """A call the account's circuit refused (decision 0082): not an attempt and not an
    unknown outcome (nothing was sent), so the record waits without a lease.

    A payment waits long (the safety net): the sweeper releases it when the circuit lets
    calls through (``engine.circuits.release_waiting``), so an outage costs no claim and
    no message per waiting payment per open period.  Another operation's row keeps no
    ``waiting_for`` for the sweeper to find; it is re-checked when the next probe is due,
    spread over one open period (few of them: refunds, captures, cancels)."""
    if isinstance(lease.record, PaymentRecord):
        recheck = settings.circuit_wait_recheck_seconds
    else:
        spread = random.uniform(0.0, settings.circuit_open_seconds)
        recheck = refused.retry_after + spread
    return Waiting(recheck, str(refused), WaitingFor.CIRCUIT)


def _interrupted(lease: Lease[Any], interruption: BaseException) -> ProcessResult:
    """Hand the work back to the row, unless the interruption landed inside the finish
    after its commit: then the row, ended under our token, is reported as finished."""
    report = lease.finishing
    if report is not None:
        with lease.uow() as uow:
            ended = lease.store(uow).ended_under(lease.id, token=lease.token)
        if ended is not None:
            lease.finishing = None
            report(ended)
            return ProcessResult.COMPLETED
    return _defer(lease, Deferred(0.0, f"interrupted: {type(interruption).__name__}"))


def _fenced(lease: Lease[Any]) -> ProcessResult:
    metrics.FENCED_WRITES.inc()
    log.warning("fenced_out", **lease.log_fields, lease_token=lease.token)
    return ProcessResult.FENCED


def _defer(lease: Lease[Any], deferred: Deferred) -> ProcessResult:
    """Release the lease until the wait is over: the wait lives in the row, not in the
    broker, and the sweeper re-queues the record when it is due."""
    try:
        lease.write(
            lambda uow, now: lease.store(uow).defer(
                lease.id,
                token=lease.token,
                until=now + timedelta(seconds=deferred.delay),
                error=deferred.reason,
                now=now,
            )
        )
    except Fenced:
        return _fenced(lease)
    log.info(
        "payment_deferred",
        **lease.log_fields,
        delay=round(deferred.delay, 3),
        reason=deferred.reason,
    )
    return ProcessResult.DEFERRED


def _wait(lease: Lease[Any], waiting: Waiting) -> ProcessResult:
    """No lease while someone else must act: the record waits in the row with its re-check
    time; an event (``services.provider_events``) or the sweeper resumes it."""
    try:
        lease.write(
            lambda uow, now: lease.store(uow).wait(
                lease.id,
                token=lease.token,
                until=now + timedelta(seconds=waiting.recheck_after),
                waiting_for=waiting.waiting_for,
                now=now,
            )
        )
    except Fenced:
        return _fenced(lease)
    log.info(
        "operation_waiting",
        **lease.log_fields,
        waiting_for=waiting.waiting_for.value,
        recheck_after=round(waiting.recheck_after, 3),
        reason=waiting.reason,
    )
    return ProcessResult.WAITING


def _park(lease: Lease[Any], reason: str) -> ProcessResult:
    """needs_attention: the recovery point stays, so an operator's retry resumes there."""
    try:
        lease.write(
            lambda uow, now: lease.store(uow).park(
                lease.id, token=lease.token, error=reason, now=now
            )
        )
    except Fenced:
        return _fenced(lease)
    metrics.PAYMENTS_PARKED.inc()
    log.warning("payment_needs_attention", **lease.log_fields, reason=reason)
    return ProcessResult.PARKED
