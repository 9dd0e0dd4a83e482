"""A claimed lease, and the only way to write under it.

Every write an operation makes after its claim goes through ``Lease.write``: one short
transaction whose change says ``WHERE lease_token = mine``.  A change that finds no row
(the repository returns None) means another holder took the lease over: ``Fenced`` is
raised, the transaction rolls back, and the run stops without writing anything more.

The three ways a run stops early are exceptions the runner (``engine.runner``) turns into
a result::

    Fenced    our token is stale            -> nothing written, FENCED
    Deferred  wait longer than a task may   -> lease released until next_attempt_at, DEFERRED
    Waiting   someone else must act first   -> lease released, re-check at next_attempt_at,
              (the customer, the provider)     not a failed attempt; WAITING
    Parked    an operator must decide       -> needs_attention, PARKED

Deferred and Waiting both release the lease into the row; the difference is what the wait
means.  A deferral is our backoff after a failure.  A wait is the provider's answer that
nothing can happen until someone else acts (3-D Secure, an asynchronous method): no worker
holds a lease meanwhile, the claim that found it out does not count as a failed attempt
(only unknown outcomes do), and a provider event or the sweeper's periodic re-check resumes
the operation, which reads the provider's truth and applies it through the fenced path.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.backoff import backoff_delay
from orchestrator.domain.lease_state import Leased, has_ended
from orchestrator.domain.states import WaitingFor
from orchestrator.engine import call_log
from orchestrator.logging import get_logger
from orchestrator.settings import Settings

log = get_logger(__name__)


class ProcessResult(StrEnum):
    NOT_CLAIMED = "not_claimed"  # someone else holds it, it is not due, or it is finished
    COMPLETED = "completed"
    DEFERRED = "deferred"  # waits in the row (next_attempt_at) for the sweeper
    PARKED = "parked"  # needs_attention
    WAITING = "waiting"  # no lease: waits for the customer or the provider, re-checked later
    FENCED = "fenced"  # taken over while we worked; nothing of ours was written after


class Fenced(Exception):
    """Our lease token is stale: another holder owns the record now."""


class Deferred(Exception):
    def __init__(self, delay: float, reason: str) -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class Waiting(Exception):
    """Release the lease: nothing can happen until ``waiting_for`` acts.  The record is
    re-checked ``recheck_after`` seconds from now (or sooner, when an event wakes it)."""

    def __init__(self, recheck_after: float, reason: str, waiting_for: WaitingFor) -> None:
        super().__init__(reason)
        self.recheck_after = recheck_after
        self.reason = reason
        self.waiting_for = waiting_for


class Parked(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# What the engine reads of any operation's record: its lease (``domain.lease_state``).
R = TypeVar("R", bound=Leased)
R_co = TypeVar("R_co", bound=Leased, covariant=True)


class LeaseStore(Protocol[R_co]):
    """The lease columns of one kind's rows, as compare-and-set updates (None: fenced or
    not ours to take).  ``orchestrator.db.repositories.leases`` is the charge's."""

    def claim(
        self,
        record_id: str,
        *,
        carried_token: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
    ) -> R_co | None: ...

    def renew(
        self, record_id: str, *, token: int, now: datetime, lease_until: datetime
    ) -> R_co | None: ...

    def defer(
        self, record_id: str, *, token: int, until: datetime, error: str | None, now: datetime
    ) -> R_co | None: ...

    def park(self, record_id: str, *, token: int, error: str, now: datetime) -> R_co | None: ...

    def wait(
        self,
        record_id: str,
        *,
        token: int,
        until: datetime,
        waiting_for: WaitingFor,
        now: datetime,
    ) -> R_co | None:
        """Release the lease until ``until`` as a wait (not a failed attempt)."""
        ...

    def ended_under(self, record_id: str, *, token: int) -> R_co | None:
        """The record, if a write under ``token`` ended the operation."""
        ...


@dataclass
class Lease(Generic[R]):
    """One run's hold on one operation's record."""

    store: Callable[[UnitOfWork], LeaseStore[R]]
    uow: UnitOfWorkFactory
    settings: Settings
    record: R
    owner: str
    log_fields: dict[str, Any]
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random | None = None
    started: float = 0.0
    retries: int = 0
    # A unit whose statements each commit on their own (the runner's ``claim_uow``), for
    # ``write(one_statement=True)``; None: such writes use ``uow``.
    statement_uow: UnitOfWorkFactory | None = None
    # The finish's report (its metric and log line) from before its commit until it has
    # run: ``engine.runner`` reports a finish an interruption split from its line.
    finishing: Callable[[R], None] | None = None

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def token(self) -> int:
        return self.record.lease_token

    def until(self, now: datetime) -> datetime:
        """Where a renewal moves ``locked_until`` to."""
        return now + timedelta(seconds=self.settings.lease_seconds)

    # -- the fenced write -----------------------------------------------------------------

    def write(
        self, change: Callable[[UnitOfWork, datetime], R | None], *, one_statement: bool = False
    ) -> R:
        """Run ``change`` in one short transaction and commit it, or raise ``Fenced`` (and
        roll back) when it found our token stale.  The only writer after the claim.

        The provider-call rows held since the last write (``engine.call_log``) go into the
        same transaction: the write that follows a call is what stores its answer, so the
        call's evidence costs no transaction of its own.  A change that does not commit
        (fenced, a database error) leaves them to be written alone.

        ``one_statement``: ``change`` is one prebuilt lease UPDATE, so it runs in a unit
        whose statement commits on its own (``statement_uow``), and on PostgreSQL the rows
        ride in that statement (``db.repositories.carried_calls``): one round trip for the
        write.  Once that statement ran, its rows are stored, fenced or not, and are not
        written again."""
        calls = call_log.take()
        stored = False
        factory = self.statement_uow if one_statement and self.statement_uow else self.uow
        try:
            with factory() as uow:
                now = uow.now()
                if factory is not self.uow:
                    uow.carry_calls(calls, now)
                written = change(uow, now)
                stored = uow.calls_carried
                if written is None:
                    raise Fenced()
                if calls and not stored:
                    # The write's last statements, for their effect only: the session
                    # sends them with the COMMIT.
                    for call in calls:
                        uow.history.add_provider_call(call, now=now)
                uow.commit()
        except BaseException:
            if not stored:
                call_log.write_alone(calls, self.uow)
            raise
        self.record = written
        return written

    def finish(
        self, change: Callable[[UnitOfWork, datetime], R | None], report: Callable[[R], None]
    ) -> R:
        """The write that ends the operation, then ``report``.

        Hazard: Celery's soft time limit raises asynchronously, anywhere, including after
        the commit reached the server and before the report ran.  The report is therefore
        held on the lease until it has run; the runner, interrupted, reads the row and
        reports a finish that landed (``runner._interrupted``).  The worst case is the
        line twice (an interruption in the last instructions here), never not at all.
        A change that commits without ending the operation (a settlement kept for a park)
        reports nothing."""
        self.finishing = report
        written = self.write(change)
        if has_ended(written.status):
            report(written)
        self.finishing = None
        return written

    def renew(self) -> None:
        """Before every provider call: extend the lease (a heartbeat, not a change)."""
        self.check_budget()
        self.write(
            lambda uow, now: self.store(uow).renew(
                self.id, token=self.token, now=now, lease_until=self.until(now)
            )
        )

    # -- time -----------------------------------------------------------------------------

    def now(self) -> datetime:
        """The database clock (one short read, no transaction left open): what deadlines
        stored in the row (``waiting_since``) are compared with."""
        with self.uow() as uow:
            return uow.now()

    def within_budget(self) -> bool:
        """Whether one more provider call fits in the task's soft time limit."""
        settings = self.settings
        elapsed = time.monotonic() - self.started
        return elapsed + settings.provider_timeout_seconds <= settings.task_soft_time_limit

    def check_budget(self) -> None:
        """Stop starting provider calls that could outlive the task's soft time limit:
        the work waits in the row instead, and the lease stays meaningful."""
        if not self.within_budget():
            raise Deferred(0.0, "task time budget spent")

    def wait(self, retry_after: float | None, reason: str) -> None:
        """Back off (full jitter) here if the wait is short; otherwise hand the work back to
        the row (``Deferred``) and let the sweeper re-queue it when it is due."""
        settings = self.settings
        delay = backoff_delay(
            self.retries + self.record.unknown_outcomes,
            base=settings.retry_base_seconds,
            cap=settings.retry_cap_seconds,
            rng=self._rng(),
            retry_after=retry_after,
        )
        self.retries += 1
        elapsed = time.monotonic() - self.started
        if (
            delay > settings.max_in_task_wait_seconds
            or elapsed + delay + settings.provider_timeout_seconds > settings.task_soft_time_limit
        ):
            raise Deferred(delay, reason)
        log.info("provider_backoff", **self.log_fields, delay=round(delay, 3), reason=reason)
        self.sleep(delay)

    def _rng(self) -> random.Random:
        if self.rng is None:
            self.rng = random.Random()
        return self.rng

    def park_if_out_of_attempts(self, why: str) -> None:
        if self.record.unknown_outcomes >= self.settings.max_attempts:
            raise Parked(f"{self.record.unknown_outcomes} unknown outcomes: {why}")


def describe_error(error: BaseException) -> str:
    """An error as stored in ``last_error``: type, HTTP status, provider code, message."""
    code = getattr(error, "code", None)
    status = getattr(error, "http_status", None)
    parts = [type(error).__name__]
    if status:
        parts.append(str(status))
    if code:
        parts.append(str(code))
    return f"{' '.join(parts)}: {error}"[:2000]
