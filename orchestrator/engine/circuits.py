"""Connector accounts' circuits at run time (decision 0082; states in ``domain.circuit``).

``CircuitGate`` is one account's circuit as one process sees it; the observing wrapper asks
it before each call and tells it how the call ended (``providers.circuit.CallGate``)::

    admit    closed (cached)            -> call, no database round trip
             open, probe not due yet    -> CircuitOpen: no call; the runner makes the
                                           record wait (WaitingFor.CIRCUIT)
             probe due, or half-open    -> take a probe slot under the row lock; none
                                           left -> CircuitOpen
    settle   a failure                  -> count it under the row lock (may open)
             a success                  -> close, only if this process knows of failures
                                           or of a circuit not closed (healthy: no write)

The state is cached for ``CACHE_SECONDS`` (database clock plus the time elapsed here, so a
host's clock never matters), and replaced by every transition this process makes: the
healthy path costs one short read per account per second per process, not one per call.
That read is one statement in autocommit (``read_uow``), made by one thread at a time
(decision 0091).

``release_waiting`` is the sweeper's step: it hands waiting payments back to the workers
(their wait holds no lease and no broker message), the fewest-unknown-outcomes first as
probes once per open period, and, once the circuit closed, the oldest first at
``CIRCUIT_RESUME_PER_SECOND``.  A released payment gets its new token and dispatch lease in
the release's own statement (``RELEASE_CHUNK`` per transaction), and the sweeper publishes
each chunk's wake-ups as soon as it commits (decision 0109): the drain after an outage runs
at the workers' speed.

Hazards:

* a circuit transition is its own short transaction, after the call returned: never a
  transaction across the call, never inside the run's fenced writes;
* the gate must never change what the worker does with the provider's answer: a failed
  circuit write is logged and swallowed; a failed read admits the call (the run's own
  writes will meet the same database);
* a view up to ``CACHE_SECONDS`` old lets a few calls through after another host opened
  the circuit: counted, bounded by a second of traffic;
* the refresh is on the hot path of every call (decision 0091).  When the view expired,
  every thread of a busy process used to read the row at once (64 threads: about four
  reads where one was due), and each read was a transaction that ended in a ROLLBACK, on
  which psycopg deallocates every statement it prepared on that pooled connection (the
  claim and the run's writes were then parsed and planned anew).  One thread reads, the
  others keep the view it replaces until it lands; the read runs in autocommit, so no
  ROLLBACK reaches the connection.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.circuit import (
    Admission,
    Circuit,
    CircuitPolicy,
    CircuitState,
    admission,
    after_failure,
    after_success,
    needs_success_write,
    seconds_until_probe,
    take_probe,
)
from orchestrator.logging import get_logger
from orchestrator.providers.circuit import CircuitOpen
from orchestrator.settings import Settings

log = get_logger(__name__)

# How long a process trusts its view of a circuit before reading it again.
CACHE_SECONDS = 1.0
# The resume's burst after a long pause between sweeper passes, in seconds of rate.
MAX_RESUME_BURST_SECONDS = 10.0
# Payments released per transaction.  The workers start on a chunk as soon as it is
# published; one transaction for a whole backlog kept them idle until all of it was written
# (about a second for two thousand rows on a loaded host).
RELEASE_CHUNK = 250

Transition = Callable[[Circuit, datetime], Circuit | None]


def policy_of(settings: Settings) -> CircuitPolicy:
    return CircuitPolicy(
        failures=settings.circuit_failures,
        window_seconds=settings.circuit_window_seconds,
        open_seconds=settings.circuit_open_seconds,
        probes=settings.circuit_probes,
    )


def report_transition(before: Circuit, after: Circuit) -> None:
    if before.state is after.state:
        return
    metrics.CIRCUIT_TRANSITIONS.labels(connector_account=after.key, to=after.state.value).inc()
    log.warning(
        "circuit_changed",
        connector_account=after.key,
        state=after.state.value,
        previous=before.state.value,
        failures=after.failures,
        next_probe_at=after.next_probe_at.isoformat() if after.next_probe_at else None,
    )


@dataclass
class CircuitGate:
    """One connector account's circuit, as this process sees it (``CallGate``)."""

    key: str
    uow: UnitOfWorkFactory
    policy: CircuitPolicy
    # Looked up at each call, not bound here: a test's frozen clock moves it.
    monotonic: Callable[[], float] = field(default=lambda: time.monotonic())
    # The view's read: a unit whose statements each commit on their own (no ROLLBACK on
    # the pooled connection, see the module's hazards); None: ``uow``.
    read_uow: UnitOfWorkFactory | None = None
    _view: Circuit | None = field(default=None, repr=False)
    _view_now: datetime | None = field(default=None, repr=False)
    _view_at: float = field(default=-math.inf, repr=False)
    # A thread is reading the row: the others keep the view it replaces meanwhile.
    _refreshing: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- CallGate -------------------------------------------------------------------------

    def admit(self) -> bool:
        view = self._current()
        if view is None:
            return False
        circuit, now = view
        decision = admission(circuit, now)
        if decision is Admission.CALL:
            return False
        if decision is Admission.REFUSE:
            raise CircuitOpen(self.key, retry_after=seconds_until_probe(circuit, now))
        if take_probe(circuit, now, self.policy) is None:
            # Every slot of this half-open period taken, as far as this process knows: no
            # row lock per call while the probes are out.
            raise CircuitOpen(self.key, retry_after=self.policy.open_seconds)
        taken = self._transition(lambda c, at: take_probe(c, at, self.policy))
        if taken is None:
            raise CircuitOpen(self.key, retry_after=self.policy.open_seconds)
        return taken.state is not CircuitState.CLOSED

    def settle(self, *, failed: bool, probe: bool) -> None:
        if failed:
            self._transition(lambda c, at: after_failure(c, at, self.policy))
            return
        with self._lock:
            known = self._view
        if probe or known is None or needs_success_write(known):
            self._transition(lambda c, at: after_success(c, at))

    # -- the view and the row ---------------------------------------------------------------

    def _current(self) -> tuple[Circuit, datetime] | None:
        """The cached view and the database time now, read again when older than
        CACHE_SECONDS, by one thread at a time: while it reads, the others go on with the
        view it replaces (older by the read's duration at most).  None: unreadable (the
        call is admitted)."""
        with self._lock:
            elapsed = self.monotonic() - self._view_at
            view, view_now = self._view, self._view_now
            fresh = elapsed < CACHE_SECONDS or self._refreshing
            if view is not None and view_now is not None and fresh:
                return view, view_now + timedelta(seconds=elapsed)
            self._refreshing = True
        try:
            with (self.read_uow or self.uow)() as uow:
                now = uow.now()
                circuit = uow.circuits.get(self.key) or Circuit(key=self.key)
        except Exception as error:
            log.warning("circuit_unreadable", connector_account=self.key, error=str(error))
            return None
        finally:
            with self._lock:
                self._refreshing = False
        self._remember(circuit, now)
        return circuit, now

    def _remember(self, circuit: Circuit, now: datetime) -> None:
        with self._lock:
            self._view, self._view_now, self._view_at = circuit, now, self.monotonic()

    def _transition(self, change: Transition) -> Circuit | None:
        """Run ``change`` on the locked row in a short transaction of its own; the new
        circuit (None: ``change`` refused, or the database failed)."""
        try:
            with self.uow() as uow:
                now = uow.now()
                before = uow.circuits.lock(self.key, now=now)
                after = change(before, now)
                if after is not None and after != before:
                    uow.circuits.save(after, now=now)
                uow.commit()
        except Exception as error:
            log.warning("circuit_not_written", connector_account=self.key, error=str(error))
            return None
        self._remember(after if after is not None else before, now)
        if after is not None:
            report_transition(before, after)
        return after


@dataclass
class CircuitBoard:
    """Every connector account's gate in this process, made on first use."""

    uow: UnitOfWorkFactory
    policy: CircuitPolicy
    # The gates' view reads (``CircuitGate.read_uow``); None: ``uow``.
    read_uow: UnitOfWorkFactory | None = None
    _gates: dict[str, CircuitGate] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def gate(self, key: str) -> CircuitGate:
        with self._lock:
            gate = self._gates.get(key)
            if gate is None:
                gate = self._gates[key] = CircuitGate(
                    key, self.uow, self.policy, read_uow=self.read_uow
                )
            return gate


def release_waiting(
    uow_factory: UnitOfWorkFactory, settings: Settings, owner: str
) -> Generator[list[tuple[str, int]], None, int]:
    """The sweeper's step: hand back to the workers the payments whose circuit lets calls
    through again, under a dispatch lease held by ``owner``.  Yields each committed chunk's
    (id, new token) wake-ups, oldest first, for the caller to publish before the next chunk
    is released: the workers start on the first chunk while the rest are written.

    Per circuit with waiting payments, under the circuit's row lock:

    * closed (or no row): the oldest first, ``CIRCUIT_RESUME_PER_SECOND`` for every second
      since the last release (0: all of them);
    * open with its probe due, or half-open: once per open period, ``CIRCUIT_PROBES`` of
      them, those with the fewest unknown outcomes first, to be the probes;
    * open, probe not due: none (they wait; no message, no claim).

    The first chunk's transaction decides how many and moves the circuit's bookkeeping
    (so another sweeper's pass meanwhile finds nothing more owed); each later chunk is a
    transaction of its own, under the circuit's lock again.

    Returns how many were left waiting (for the sweeper to come back in
    ``RESUME_STEP_SECONDS`` rather than after its whole interval)."""
    policy = policy_of(settings)
    rate = settings.circuit_resume_per_second
    with uow_factory() as uow:
        waiting = uow.circuits.waiting_counts()
    still_waiting = 0
    for key, count in sorted(waiting.items()):
        remaining: int | None = None
        released = 0
        state = CircuitState.CLOSED
        while remaining is None or remaining > 0:
            with uow_factory() as uow:
                now = uow.now()
                before = uow.circuits.lock(key, now=now)
                circuit = before
                if remaining is None:
                    remaining = _owed(circuit, now, policy, rate, count)
                    if remaining > 0 and circuit.state is CircuitState.CLOSED:
                        circuit = replace(circuit, released_at=now)
                    elif remaining > 0:
                        circuit = replace(circuit, probe_released_at=now)
                    state = circuit.state
                elif circuit.state is not state:
                    # It changed between chunks (a failure reopened it): what was owed is
                    # not any more; the next pass decides again.
                    remaining = 0
                if remaining <= 0:
                    uow.commit()  # nothing owed (an open circuit): the lock only
                    break
                wakeups = uow.circuits.release_waiting(
                    key,
                    limit=min(remaining, RELEASE_CHUNK),
                    now=now,
                    owner=owner,
                    lease_until=now + timedelta(seconds=settings.dispatch_lease_seconds),
                    max_attempts=settings.max_attempts,
                    fewest_unknown_first=circuit.state is not CircuitState.CLOSED,
                )
                if circuit != before:
                    uow.circuits.save(circuit, now=now)
                uow.commit()
            if not wakeups:
                break
            remaining -= len(wakeups)
            released += len(wakeups)
            yield wakeups
        still_waiting += max(count - released, 0)
        if released:
            log.info(
                "circuit_waits_released",
                connector_account=key,
                state=state.value,
                released=released,
                still_waiting=max(count - released, 0),
            )
    return still_waiting


def _owed(circuit: Circuit, now: datetime, policy: CircuitPolicy, rate: float, count: int) -> int:
    """How many of a circuit's ``count`` waiting payments this pass releases."""
    if circuit.state is CircuitState.CLOSED:
        if rate <= 0:
            return count
        last = circuit.released_at or now - timedelta(seconds=1)
        seconds = min((now - last).total_seconds(), MAX_RESUME_BURST_SECONDS)
        return math.floor(rate * seconds)
    if admission(circuit, now) is Admission.PROBE and _probes_owed(circuit, now, policy):
        return policy.probes
    return 0


def _probes_owed(circuit: Circuit, now: datetime, policy: CircuitPolicy) -> bool:
    """Whether this open period's probes were not released yet: none since its probe time
    came (a re-open moves it past the last release), and none for an open period (a
    half-open whose probes never reported)."""
    last = circuit.probe_released_at
    if last is None or circuit.next_probe_at is None or last < circuit.next_probe_at:
        return True
    return now >= last + timedelta(seconds=policy.open_seconds)
