"""The dispatcher: PostgreSQL NOTIFY in, Celery task out (``PAYORCH_WAKE_UP=notify``).

The accept's INSERT sends ``NOTIFY payorch_wake, '<id>:<lease token>'``, which PostgreSQL
delivers only when the row committed.  One dispatcher LISTENs on a connection of its own
and publishes for each notification the task its id names (``process_payment`` for a
payment, ``process_operation`` for a capture, cancel or refund), so the API's request never
waits for the broker.

Every way a wake-up can be lost ends at the sweeper, one dispatch lease after the accept:
no dispatcher listening at commit time (PostgreSQL drops the notification), a dispatcher
killed between hearing and publishing, a publish that failed, a broker that lost the
message.  The dispatcher makes a wake-up fast; it never makes one certain, and it need not.

One active dispatcher per database: each holds a session advisory lock on its LISTEN
connection while it works, the others wait for that lock (standby), so N sweepers do not
publish every payment N times (a duplicate would only be fenced, but costs a worker a
claim).  When the active one dies its session ends, the lock is released, and a standby
takes over within ``STANDBY_RETRY_SECONDS``.  On every (re)connection the dispatcher first
publishes the payments still waiting under their first dispatch lease: a restart loses
no more than the wake-ups a duplicate would have repeated.

A payment accepted while its account's circuit is open is not published: the dispatcher
writes its wait instead (``engine.circuit_hold``, decision 0109), and the sweeper
publishes its one wake-up when the circuit lets calls through again.

Hazards handled here: a database restart or a dead TCP peer (keepalives and a periodic
``SELECT 1`` notice it; the loop reconnects), a broker outage (wake-ups wait in memory and
are retried after a pause; past ``MAX_PENDING`` they are dropped to the sweeper).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import psycopg
import sqlalchemy as sa

from orchestrator import metrics
from orchestrator.db.wake import WAKE_CHANNEL, parse_wake_payload
from orchestrator.domain.ids import is_payment_id
from orchestrator.engine.circuit_hold import CircuitHold
from orchestrator.engine.publisher import (
    BatchPublishFailed,
    BatchTaskPublisher,
    PublishFailed,
    TaskPublisher,
    publish_wake_up,
)
from orchestrator.logging import get_logger

log = get_logger(__name__)

# pg_try_advisory_lock's key: "payorch_dispatcher" as a fixed 64-bit number.
LOCK_KEY = 0x7061796F7263_6400
STANDBY_RETRY_SECONDS = 1.0
RECONNECT_SECONDS = 1.0
# How long the loop waits for a notification before checking its stop flag.
POLL_SECONDS = 0.5
# A LISTEN connection is idle for the server; a peer that vanished without a FIN is noticed
# by this round trip (and TCP keepalives) instead of never.
LIVENESS_SECONDS = 10.0
# After a failed publish: pause, then retry the same wake-up (the broker is probably down).
PUBLISH_BACKOFF_SECONDS = 1.0
# Wake-ups held while the broker is down; beyond this they are left to the sweeper.
MAX_PENDING = 10_000
BATCH = 500
# After the first notification, how long to gather more into the same batch (one confirm
# wait): a wake-up waits at most this much longer; per wake-up the dispatcher's CPU falls
# with the batch's size.
LINGER_SECONDS = 0.005
# Catch-up on (re)connection: the payments and operations (captures, cancels, refunds)
# still under their first dispatch lease, as many as the dispatcher may hold.  A smaller
# limit left a backlog's tail (a burst accepted while no dispatcher listened) waiting out
# its whole dispatch lease for the sweeper: the part of a burst beyond the limit started
# only when that lease ran out.
_WAITING = (
    "SELECT id, lease_token FROM ("
    "SELECT id, lease_token, locked_until FROM payments WHERE status = 'processing' "
    "AND recovery_point = 'accepted' AND lease_owner = 'dispatch' AND locked_until > now() "
    "UNION ALL "
    "SELECT id, lease_token, locked_until FROM operations WHERE status = 'processing' "
    "AND recovery_point = 'accepted' AND lease_owner = 'dispatch' AND locked_until > now()"
    ") AS waiting ORDER BY locked_until LIMIT %s"
)
CATCH_UP_LIMIT = MAX_PENDING


def libpq_url(database_url: str) -> str:
    """``postgresql+psycopg://…`` (SQLAlchemy's form) as the plain URL libpq reads."""
    url = sa.engine.make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class Dispatcher:
    def __init__(
        self,
        database_url: str,
        publisher: TaskPublisher,
        *,
        name: str,
        circuit_hold: CircuitHold,
    ) -> None:
        self._conninfo = libpq_url(database_url)
        self._publisher = publisher
        self.name = name
        self._hold_for_circuits = circuit_hold
        # Set while this dispatcher holds the lock and LISTENs (tests wait for it).
        self.listening = threading.Event()
        self._pending: deque[tuple[str, int]] = deque()

    def run(self, stop: threading.Event, started_with: Mapping[str, object] | None = None) -> None:
        """LISTEN and publish until ``stop`` is set; reconnects after any failure.
        ``started_with``: what the command adds to the start line."""
        log.info("dispatcher_started", dispatcher=self.name, **(started_with or {}))
        while not stop.is_set():
            try:
                self._session(stop)
            except (psycopg.Error, OSError) as error:
                log.warning("dispatcher_disconnected", dispatcher=self.name, error=str(error))
                stop.wait(RECONNECT_SECONDS)
            except Exception as error:  # never let the thread die: wake-ups would stop
                log.error("dispatcher_failed", dispatcher=self.name, exc_info=error)
                stop.wait(RECONNECT_SECONDS)
            finally:
                self.listening.clear()
        if isinstance(self._publisher, BatchTaskPublisher):
            self._publisher.close_batches()
        log.info("dispatcher_stopped", dispatcher=self.name)

    def _session(self, stop: threading.Event) -> None:
        with psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=3,
            application_name="payorch-dispatcher",
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=3,
        ) as conn:
            if not self._acquire(conn, stop):
                return
            conn.execute(f"LISTEN {WAKE_CHANNEL}")
            # After LISTEN: a payment committed from here on is notified, one committed
            # before is in this read (or both: a duplicate, fenced by its token).
            for payment_id, token in conn.execute(_WAITING, (CATCH_UP_LIMIT,)).fetchall():
                self._hold(payment_id, int(token))
            self.listening.set()
            log.info("dispatcher_listening", dispatcher=self.name, caught_up=len(self._pending))
            self._listen(conn, stop)

    def _acquire(self, conn: psycopg.Connection[Any], stop: threading.Event) -> bool:
        waiting_logged = False
        while not stop.is_set():
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                return True
            if not waiting_logged:
                log.info("dispatcher_standby", dispatcher=self.name)
                waiting_logged = True
            stop.wait(STANDBY_RETRY_SECONDS)
        return False

    def _listen(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        checked = time.monotonic()
        retry_at = 0.0
        while not stop.is_set():
            now = time.monotonic()
            wait = POLL_SECONDS if not self._pending else max(0.0, retry_at - now)
            for notify in conn.notifies(timeout=wait, stop_after=1):
                self._take(notify.payload)
            # Whatever else arrives within the linger: one batch, one confirm wait.
            linger = LINGER_SECONDS if self._pending else 0.0
            for notify in conn.notifies(timeout=linger, stop_after=BATCH):
                self._take(notify.payload)
            if self._pending and time.monotonic() >= retry_at:
                self._hold_waits(conn)
                if self._pending and not self._publish_pending():
                    retry_at = time.monotonic() + PUBLISH_BACKOFF_SECONDS
            if time.monotonic() - checked >= LIVENESS_SECONDS:
                conn.execute("SELECT 1")
                checked = time.monotonic()

    def _take(self, payload: str) -> None:
        parsed = parse_wake_payload(payload)
        if parsed is None:
            log.warning("dispatcher_unknown_payload", dispatcher=self.name, payload=payload)
            return
        self._hold(*parsed)

    def _hold(self, payment_id: str, token: int) -> None:
        if len(self._pending) >= MAX_PENDING:
            # The broker has been down long enough: the sweeper takes it from here.
            metrics.PUBLISH_FAILURES.inc()
            return
        self._pending.append((payment_id, token))

    def _hold_waits(self, conn: psycopg.Connection[Any]) -> None:
        """Drop from the held wake-ups the payments whose circuit is open, after writing
        their waits (``engine.circuit_hold``): the sweeper publishes them later."""
        payments = [wakeup for wakeup in self._pending if is_payment_id(wakeup[0])]
        held = self._hold_for_circuits.held(conn, payments)
        if not held:
            return
        self._pending = deque(wakeup for wakeup in self._pending if wakeup[0] not in held)
        metrics.WAKEUPS_HELD.inc(len(held))
        log.debug("wake_ups_held_for_open_circuits", dispatcher=self.name, held=len(held))

    def _publish_pending(self) -> bool:
        """Publish held wake-ups in order; False at the first failure (kept for a retry)."""
        if isinstance(self._publisher, BatchTaskPublisher):
            return self._publish_batches(self._publisher)
        while self._pending:
            if not self._publish_head():
                return False
        return True

    def _publish_head(self) -> bool:
        """The first held wake-up as its own message: a payment's ``process_payment``, or
        an operation's (cap_, cnl_, rfd_) ``process_operation``.  False when it failed."""
        record_id, token = self._pending[0]
        try:
            publish_wake_up(self._publisher, record_id, token)
        except PublishFailed as error:
            metrics.PUBLISH_FAILURES.inc()
            log.warning(
                "task_publish_failed",
                payment_id=record_id,
                dispatcher=self.name,
                held=len(self._pending),
                error=str(error),
            )
            return False
        self._pending.popleft()
        metrics.WAKEUPS_DISPATCHED.inc()
        return True

    def _publish_batches(self, publisher: BatchTaskPublisher) -> bool:
        """Up to BATCH held wake-ups per confirm wait (far cheaper per message than
        send_task, which waits for each confirm).  A wake-up leaves the queue only once
        its confirm came; the unconfirmed rest of a failed batch is retried as it is (a
        duplicate of one that did arrive is fenced by its lease token)."""
        while self._pending:
            if not is_payment_id(self._pending[0][0]):
                # An operation's wake-up: not a process_payment batch's (rare: one each).
                if not self._publish_head():
                    return False
                continue
            batch = list(
                itertools.takewhile(
                    lambda wakeup: is_payment_id(wakeup[0]),
                    itertools.islice(self._pending, BATCH),
                )
            )
            try:
                publisher.publish_process_payments(batch)
                confirmed = len(batch)
            except BatchPublishFailed as error:
                confirmed = error.confirmed
                failure: PublishFailed | None = error
            else:
                failure = None
            for _ in range(confirmed):
                self._pending.popleft()
            metrics.WAKEUPS_DISPATCHED.inc(confirmed)
            if failure is not None:
                metrics.PUBLISH_FAILURES.inc()
                log.warning(
                    "task_publish_failed",
                    dispatcher=self.name,
                    confirmed=confirmed,
                    held=len(self._pending),
                    error=str(failure),
                )
                return False
        return True


def start_in_thread(
    database_url: str,
    publisher: TaskPublisher,
    *,
    name: str,
    stop: threading.Event,
    circuit_hold: CircuitHold,
) -> tuple[Dispatcher, threading.Thread]:
    dispatcher = Dispatcher(database_url, publisher, name=name, circuit_hold=circuit_hold)
    thread = threading.Thread(
        target=dispatcher.run, args=(stop,), name="payorch-dispatcher", daemon=True
    )
    thread.start()
    return dispatcher, thread
