"""The sweeper: every accepted payment reaches a final state, whatever the broker lost.

One pass (``run_once``)::

    0. circuits:         hand back the payments waiting out a circuit that lets calls
                         through again (``release_waits``: ``engine.circuits``): new
                         token and dispatch lease, a chunk per transaction, each chunk's
                         wake-ups published as soon as it committed; while payments
                         wait, ``run`` repeats this step every RESUME_STEP_SECONDS
                         between passes (decision 0110)
    1. one transaction:  lock_due (FOR UPDATE SKIP LOCKED, up to PAYORCH_SWEEP_BATCH_SIZE)
                         -> take_over_lease for each: token + 1 and a dispatch lease,
                            or needs_attention at PAYORCH_MAX_ATTEMPTS
                         commit
    2. after the commit: publish process_payment(id, new token) for each re-queued record
                         (in batches of PUBLISH_BATCH with one confirm wait each, when
                         the publisher can: ``BatchTaskPublisher``)
    3. retention:        forget idempotency data of payments finished more than
                         PAYORCH_IDEMPOTENCY_RETENTION_HOURS ago, batch by batch, each batch
                         its own short transaction; then webhook events past
                         PAYORCH_WEBHOOK_EVENT_RETENTION_DAYS (``purge_events``: the
                         composition root binds orchestrator.events.retention, which the
                         engine does not import: the engine and the webhook relay know
                         nothing of each other); then provider events received more
                         than PAYORCH_PROVIDER_EVENT_RETENTION_DAYS ago

What a pass finds due (``status = 'processing' AND locked_until <= now``):

* an expired lease: a worker crashed or hung, a message was lost, or a publish failed
  (the API's dispatch lease ran out) -> a *takeover*; except an expired dispatch lease
  whose wake-up may still be in the broker's queue (a backlog): left alone, since another
  message would only queue behind the first (``queue_horizon``, decision 0081);
* a deferred record (``lease_owner IS NULL``, ``next_attempt_at`` set): a worker's long
  backoff that is now due -> a *due retry*.

Any number of sweepers (``payorch sweeper`` loops, Celery beat's ``payorch.sweep``) may run
at once: SKIP LOCKED hands each row to one of them, and the takeover is a compare-and-set
on the token it saw.  On SQLite, which has no row locks, every write transaction begins
IMMEDIATE (one writer at a time) and the same compare-and-set keeps it safe.

Every timestamp comes from the database clock (``uow.now()``), never from this host.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.ids import is_payment_id
from orchestrator.engine.publisher import (
    BatchPublishFailed,
    BatchTaskPublisher,
    QueueDepthProbe,
    QueueState,
    TaskPublisher,
)
from orchestrator.engine.queue_horizon import GRACE_OWNER, grace_first, queued_hold
from orchestrator.engine.takeover import (
    Actor,
    TakeoverOutcome,
    TakeoverResult,
    count_outcome,
    payment_of,
    requeue_after_commit,
    take_over_lease,
)
from orchestrator.logging import get_logger
from orchestrator.settings import Settings

log = get_logger(__name__)

SWEEP_REASON = "lease expired"
# Purge batches per pass.  Too few: a backlog (first run after a long outage) takes many
# passes to drain; too many: one pass holds the loop long enough to delay takeovers.
MAX_PURGE_BATCHES_PER_PASS = 20
# Pause after a pass that failed (database down), so the loop does not spin on errors.
ERROR_BACKOFF_SECONDS = 5.0
# Publishes that may fail in a row before a pass stops publishing.  Each failure with the
# broker down costs the publisher's connect timeout; a whole batch of them would hold the
# pass (and the purge behind it) for minutes.  The records not published keep the dispatch
# lease the takeover committed, so the next passes after it expires publish them again.
# Too low: one blip delays the rest of the batch by a dispatch lease.
MAX_CONSECUTIVE_PUBLISH_FAILURES = 3
# Wake-ups per confirm wait when the publisher batches.  Publishing one at a time waits for
# each confirm: a backlog released after an outage then drained at the sweeper's publishing
# speed (about a hundred a second) instead of the workers'.
PUBLISH_BATCH = 500
# While payments wait out a circuit, the sweeper releases them this often between its
# passes, not once per pass.  Once per pass, a backlog released at the resume rate came
# in lumps a whole interval apart (the rate's first half-second, then nothing for the rest
# of the interval), and the workers sat idle between the lumps; and a circuit's close or
# probe time waited up to an interval for the next pass.  Each step is the waiting count
# and, per circuit with waiting payments, its row lock: nothing more while none is owed.
RESUME_STEP_SECONDS = 0.5


@dataclass
class SweepReport:
    """What one pass did (payment ids, in the order they were handled)."""

    taken_over: list[str] = field(default_factory=list)
    due_retries: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)
    # Expired dispatch leases given a grace lease (a wake-up the queue no longer holds,
    # perhaps taken by a worker and not yet claimed): re-dispatched if it runs out too.
    graced: list[str] = field(default_factory=list)
    publish_failures: list[str] = field(default_factory=list)
    # Found due but changed by someone else before we could act (expected to stay empty).
    skipped: list[str] = field(default_factory=list)
    # Handed back because their circuit lets calls through again (step 0), and how many
    # were left waiting.
    circuit_released: int = 0
    circuit_waiting: int = 0
    purged_keys: int = 0
    purged_events: int = 0
    purged_provider_events: int = 0
    batch_full: bool = False
    duration_seconds: float = 0.0

    @property
    def requeued(self) -> list[str]:
        return [*self.taken_over, *self.due_retries]

    def as_dict(self) -> dict[str, object]:
        return {
            "taken_over": list(self.taken_over),
            "due_retries": list(self.due_retries),
            "parked": list(self.parked),
            "graced": list(self.graced),
            "publish_failures": list(self.publish_failures),
            "skipped": list(self.skipped),
            "circuit_released": self.circuit_released,
            "circuit_waiting": self.circuit_waiting,
            "purged_keys": self.purged_keys,
            "purged_events": self.purged_events,
            "purged_provider_events": self.purged_provider_events,
            "batch_full": self.batch_full,
            "duration_seconds": round(self.duration_seconds, 3),
        }


def default_sweeper_name() -> str:
    return f"sweeper@{socket.gethostname()}:{os.getpid()}"


class Sweeper:
    """Takes over expired leases and re-queues due work; needs a unit of work to find and
    fence the rows, a publisher to wake a worker after the commit, and the webhook events'
    retention pass (``purge_events``: how many it deleted)."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        publisher: TaskPublisher,
        settings: Settings,
        *,
        purge_events: Callable[[], int],
        name: str | None = None,
        release_waits: Callable[[str], Generator[list[tuple[str, int]], None, int]] | None = None,
    ) -> None:
        self._uow = uow
        self._publisher = publisher
        self._settings = settings
        self._purge_events = purge_events
        self._release_waits = release_waits
        # Inside ``run``: the batch connection is kept from pass to pass, closed at the end.
        self._looping = False
        self.actor = Actor.sweeper(name or default_sweeper_name())

    def run_once(self) -> SweepReport:
        started = time.monotonic()
        report = SweepReport()
        self._release(report)
        outcomes = self._take_over_due(report)
        self._publish(
            [
                (outcome.payment_id, outcome.new_token)
                for outcome in outcomes
                if outcome.needs_requeue and outcome.new_token is not None
            ],
            report,
        )
        report.purged_keys = self.purge_expired_idempotency_data()
        report.purged_events = self._purge_events()
        report.purged_provider_events = self.purge_old_provider_events()
        if not self._looping and isinstance(self._publisher, BatchTaskPublisher):
            # A pass run on its own (Celery beat's ``payorch.sweep`` in any of a worker's
            # threads, ``payorch sweep --once``) must not leave its thread's batch
            # connection open: a worker would gather one per thread that ever swept.
            self._publisher.close_batches()
        report.duration_seconds = time.monotonic() - started
        self._log(report)
        return report

    def _release(self, report: SweepReport) -> None:
        """Step 0: hand back what the circuits owe, each chunk published as soon as it
        committed (``engine.circuits``); ``report.circuit_waiting``: how many still wait."""
        if self._release_waits is None:
            return
        chunks = self._release_waits(self.actor.lease_owner)
        while True:
            try:
                released = next(chunks)
            except StopIteration as done:
                report.circuit_waiting = int(done.value)
                return
            report.circuit_released += len(released)
            self._publish(released, report)
            if report.publish_failures:
                chunks.close()
                return  # the broker is down: the rest keep waiting for a later pass

    def _wait_for_next_pass(self, stop_event: threading.Event, waiting: int) -> None:
        """The interval between passes; while payments wait out a circuit, a release step
        every RESUME_STEP_SECONDS meanwhile."""
        next_pass = time.monotonic() + self._settings.sweep_interval_seconds
        while waiting:
            left = next_pass - time.monotonic()
            if left <= 0 or stop_event.wait(min(RESUME_STEP_SECONDS, left)):
                return
            step = SweepReport()
            try:
                self._release(step)
            except Exception as error:
                log.error("circuit_release_failed", sweeper=self.actor.name, exc_info=error)
                break
            if step.publish_failures:
                break  # the broker is down (logged): the next pass tries again
            waiting = step.circuit_waiting
        stop_event.wait(max(0.0, next_pass - time.monotonic()))

    def run(
        self, stop_event: threading.Event, started_with: Mapping[str, object] | None = None
    ) -> None:
        """Sweep every SWEEP_INTERVAL_SECONDS until ``stop_event`` is set.  A full batch
        means more is due: the next pass starts at once instead of after the interval.
        ``started_with``: what the command adds to the start line (which database and
        broker, what else the process runs)."""
        settings = self._settings
        log.info(
            "sweeper_started",
            sweeper=self.actor.name,
            interval_seconds=settings.sweep_interval_seconds,
            batch_size=settings.sweep_batch_size,
            dispatch_lease_seconds=settings.dispatch_lease_seconds,
            max_attempts=settings.max_attempts,
            **(started_with or {}),
        )
        self._looping = True
        while not stop_event.is_set():
            try:
                report = self.run_once()
            except Exception as error:
                # A database outage must not kill the loop: the work stays in the rows and
                # the next pass after the outage finds it.
                log.error("sweep_failed", sweeper=self.actor.name, exc_info=error)
                stop_event.wait(ERROR_BACKOFF_SECONDS)
                continue
            if not report.batch_full:
                self._wait_for_next_pass(stop_event, report.circuit_waiting)
        if isinstance(self._publisher, BatchTaskPublisher):
            self._publisher.close_batches()
        log.info("sweeper_stopped", sweeper=self.actor.name)

    def _take_over_due(self, report: SweepReport) -> list[TakeoverOutcome]:
        """One transaction over every table that holds leases (the payments' charges, then
        the operations), each with its own batch."""
        settings = self._settings
        outcomes: list[TakeoverOutcome] = []
        # Asked before the transaction: a broker round trip never holds row locks.
        queue = self._wake_up_queue()
        with self._uow() as uow:
            now = uow.now()
            hold = queued_hold(uow, queue)
            for leases in (uow.leases, uow.operations):
                due = leases.lock_due(now=now, limit=settings.sweep_batch_size, hold=hold)
                report.batch_full = report.batch_full or len(due) >= settings.sweep_batch_size
                for record in due:
                    if grace_first(queue, record.lease_owner):
                        graced = leases.grant_grace(
                            record.id,
                            expected_token=record.lease_token,
                            owner=GRACE_OWNER,
                            now=now,
                            lease_until=now + timedelta(seconds=settings.dispatch_lease_seconds),
                        )
                        target = report.graced if graced is not None else report.skipped
                        target.append(payment_of(record))
                        continue
                    outcome = take_over_lease(
                        uow,
                        record.id,
                        actor=self.actor,
                        reason=SWEEP_REASON,
                        force=False,
                        now=now,
                        lease_seconds=settings.dispatch_lease_seconds,
                        max_attempts=settings.max_attempts,
                        expected_token=record.lease_token,
                    )
                    outcomes.append(outcome)
            uow.commit()
        for outcome in outcomes:
            count_outcome(outcome, self.actor)
            if outcome.result is TakeoverResult.TAKEN_OVER:
                report.taken_over.append(outcome.payment_id)
            elif outcome.result is TakeoverResult.DUE_RETRY:
                report.due_retries.append(outcome.payment_id)
            elif outcome.result is TakeoverResult.PARKED:
                report.parked.append(outcome.payment_id)
                log.warning(
                    "payment_parked",
                    payment_id=outcome.payment_id,
                    sweeper=self.actor.name,
                    attempts=outcome.record.attempts if outcome.record else None,
                )
            else:
                report.skipped.append(outcome.payment_id)
        return outcomes

    def _wake_up_queue(self) -> QueueState | None:
        """The broker's wake-up queue, when the publisher can tell."""
        if not isinstance(self._publisher, QueueDepthProbe):
            return None
        queue = self._publisher.wake_up_queue()
        if queue is not None:
            metrics.WAKE_UPS_QUEUED.set(queue.ready)
        return queue

    def _publish(self, wakeups: list[tuple[str, int]], report: SweepReport) -> None:
        """Publish committed wake-ups, in order.  After MAX_CONSECUTIVE_PUBLISH_FAILURES
        failures in a row (or a failed batch) the rest are not attempted: the dispatch
        lease each committed brings it back to a later pass."""
        if not wakeups:
            return
        if isinstance(self._publisher, BatchTaskPublisher):
            self._publish_batches(self._publisher, wakeups, report)
            return
        consecutive_failures = 0
        for record_id, token in wakeups:
            if consecutive_failures >= MAX_CONSECUTIVE_PUBLISH_FAILURES:
                # Not attempted: the committed dispatch lease brings it back next time.
                report.publish_failures.append(record_id)
                continue
            if requeue_after_commit(self._publisher, record_id, token):
                consecutive_failures = 0
            else:
                consecutive_failures += 1
                report.publish_failures.append(record_id)
        if consecutive_failures >= MAX_CONSECUTIVE_PUBLISH_FAILURES:
            self._log_broker_down(report)

    def _publish_batches(
        self, publisher: BatchTaskPublisher, wakeups: list[tuple[str, int]], report: SweepReport
    ) -> None:
        """Payments' wake-ups PUBLISH_BATCH at a time (one confirm wait each); an
        operation's on its own (``process_operation``: few of them).  The first failure
        stops the publishing: the broker is probably down."""
        pending = list(wakeups)
        while pending:
            if not is_payment_id(pending[0][0]):
                record_id, token = pending.pop(0)
                if not requeue_after_commit(self._publisher, record_id, token):
                    report.publish_failures.extend([record_id, *(i for i, _ in pending)])
                    self._log_broker_down(report)
                    return
                continue
            batch = list(
                itertools.takewhile(
                    lambda wakeup: is_payment_id(wakeup[0]),
                    itertools.islice(pending, PUBLISH_BATCH),
                )
            )
            try:
                publisher.publish_process_payments(batch)
            except BatchPublishFailed as error:
                metrics.PUBLISH_FAILURES.inc()
                report.publish_failures.extend(i for i, _ in pending[error.confirmed :])
                log.warning(
                    "requeue_publish_failed",
                    sweeper=self.actor.name,
                    confirmed=error.confirmed,
                    error=str(error),
                )
                self._log_broker_down(report)
                return
            del pending[: len(batch)]

    def _log_broker_down(self, report: SweepReport) -> None:
        log.warning(
            "requeue_stopped_broker_down",
            sweeper=self.actor.name,
            not_published=len(report.publish_failures),
        )

    def purge_expired_idempotency_data(self) -> int:
        """Forget keys, fingerprints and stored responses past the retention window.  Short
        transactions, one per batch, so the purge never holds many row locks for long."""
        settings = self._settings
        window = timedelta(hours=settings.idempotency_retention_hours)
        purged = 0
        for _ in range(MAX_PURGE_BATCHES_PER_PASS):
            with self._uow() as uow:
                now = uow.now()
                count = uow.payments.purge_idempotency_data(
                    cutoff=now - window, limit=settings.retention_batch_size, now=now
                )
                uow.commit()
            purged += count
            if count < settings.retention_batch_size:
                break
        if purged:
            metrics.RETENTION_PURGED.inc(purged)
        return purged

    def purge_old_provider_events(self) -> int:
        """Delete provider events (and their stored payloads) past their retention, batch by
        batch, each its own short transaction."""
        settings = self._settings
        window = timedelta(days=settings.provider_event_retention_days)
        purged = 0
        for _ in range(MAX_PURGE_BATCHES_PER_PASS):
            with self._uow() as uow:
                count = uow.provider_events.purge_received_before(
                    cutoff=uow.now() - window, limit=settings.retention_batch_size
                )
                uow.commit()
            purged += count
            if count < settings.retention_batch_size:
                break
        return purged

    def _log(self, report: SweepReport) -> None:
        did_something = (
            report.requeued
            or report.circuit_released
            or report.parked
            or report.graced
            or report.skipped
            or report.purged_keys
            or report.purged_events
            or report.purged_provider_events
        )
        # An idle pass every few seconds would drown the log at INFO.
        emit = log.info if did_something else log.debug
        emit(
            "sweep_pass",
            sweeper=self.actor.name,
            taken_over=len(report.taken_over),
            due_retries=len(report.due_retries),
            parked=len(report.parked),
            graced=len(report.graced),
            publish_failures=len(report.publish_failures),
            skipped=len(report.skipped),
            circuit_released=report.circuit_released,
            circuit_waiting=report.circuit_waiting,
            purged_keys=report.purged_keys,
            purged_events=report.purged_events,
            purged_provider_events=report.purged_provider_events,
            batch_full=report.batch_full,
            duration_seconds=round(report.duration_seconds, 3),
        )
