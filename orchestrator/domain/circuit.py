"""A connector account's circuit: pure state and transitions (decision 0082).

One circuit per connector account (the platform's own account, used by payments with no
connector account, is ``PLATFORM_CIRCUIT_KEY``), stored in the ``circuits`` table so every
worker on every host agrees.  The functions here take a snapshot and the database clock and
return the next snapshot; ``engine.circuits`` runs them under the row's lock::

              CIRCUIT_FAILURES failures
              within CIRCUIT_WINDOW_SECONDS              CIRCUIT_OPEN_SECONDS passed:
    closed ────────────────────────────────► open ─────────────────────────► half_open
       ▲                                      ▲     a call takes a probe slot    │
       │              a probe failed: open again for CIRCUIT_OPEN_SECONDS        │
       │                                      └──────────────────────────────────┤
       └──────────────────────── any call the provider answered ─────────────────┘

A *failure* is what says the provider itself is unwell: an unknown outcome (timeout,
connection error) or a 5xx (``providers.circuit.counts_against_circuit``).  A decline, a
4xx, or a 429 is the provider answering, so it is a success for the circuit.

Hazard: half-open admits at most ``probes`` calls per half-open period across all hosts
(the slots are counted in the row); a probe whose worker died never reports, so a
half-open period older than ``open_seconds`` hands out fresh slots.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

# The circuit key of the platform's implicit account (payments with no connector account):
# how design.md Part 3 names it in ``payorch status`` and the ops API.
PLATFORM_CIRCUIT_KEY = "ca_platform_stripe"


def circuit_key(connector_account_id: str | None) -> str:
    """The circuit of a connector account; None is the platform's own account."""
    return connector_account_id or PLATFORM_CIRCUIT_KEY


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Admission(StrEnum):
    """What a snapshot says about the next call."""

    CALL = "call"  # closed: call
    PROBE = "probe"  # open long enough, or half-open: call only with a probe slot
    REFUSE = "refuse"  # open: no call; the record waits


@dataclass(frozen=True)
class CircuitPolicy:
    """The settings, as the transitions read them."""

    failures: int
    window_seconds: float
    open_seconds: float
    probes: int


@dataclass(frozen=True)
class Circuit:
    key: str
    state: CircuitState = CircuitState.CLOSED
    # Failures counted in the current window (closed), or since the circuit opened.
    failures: int = 0
    window_started_at: datetime | None = None
    # When the circuit entered ``state`` (None: never left closed).
    since: datetime | None = None
    # When it last opened, and when a probe may first be sent.
    opened_at: datetime | None = None
    next_probe_at: datetime | None = None
    # Probe slots taken in the current half-open period.
    probes: int = 0
    # The sweeper's bookkeeping (``engine.circuits.release_waiting``): when it last made
    # waiting records due for this circuit (the resume's pace, and one probe release per
    # open period).
    released_at: datetime | None = None
    probe_released_at: datetime | None = None


def admission(circuit: Circuit, now: datetime) -> Admission:
    if circuit.state is CircuitState.CLOSED:
        return Admission.CALL
    if circuit.state is CircuitState.OPEN and (
        circuit.next_probe_at is not None and now < circuit.next_probe_at
    ):
        return Admission.REFUSE
    return Admission.PROBE


def take_probe(circuit: Circuit, now: datetime, policy: CircuitPolicy) -> Circuit | None:
    """The circuit with one more probe slot taken, or None when there is none to take."""
    if circuit.state is CircuitState.CLOSED:
        return circuit
    if circuit.state is CircuitState.OPEN:
        if circuit.next_probe_at is not None and now < circuit.next_probe_at:
            return None
        return replace(circuit, state=CircuitState.HALF_OPEN, since=now, probes=1)
    stalled = circuit.since is None or now >= circuit.since + timedelta(seconds=policy.open_seconds)
    if stalled:
        # The probes of this period never reported (their worker died): fresh slots.
        return replace(circuit, since=now, probes=1)
    if circuit.probes < policy.probes:
        return replace(circuit, probes=circuit.probes + 1)
    return None


def opened(circuit: Circuit, now: datetime, policy: CircuitPolicy, failures: int) -> Circuit:
    return replace(
        circuit,
        state=CircuitState.OPEN,
        failures=failures,
        since=now,
        opened_at=now,
        next_probe_at=now + timedelta(seconds=policy.open_seconds),
        probes=0,
    )


def after_failure(circuit: Circuit, now: datetime, policy: CircuitPolicy) -> Circuit:
    """A call the provider failed (unknown outcome, 5xx, timeout)."""
    if circuit.state is CircuitState.HALF_OPEN:
        return opened(circuit, now, policy, circuit.failures + 1)
    if circuit.state is CircuitState.OPEN:
        # A call let through before it opened (another host's stale view): counted, but
        # it does not push the next probe further out.
        return replace(circuit, failures=circuit.failures + 1)
    window_over = circuit.window_started_at is None or now >= circuit.window_started_at + (
        timedelta(seconds=policy.window_seconds)
    )
    if window_over:
        circuit = replace(circuit, failures=1, window_started_at=now)
    else:
        circuit = replace(circuit, failures=circuit.failures + 1)
    if circuit.failures >= policy.failures:
        return opened(circuit, now, policy, circuit.failures)
    return circuit


def after_success(circuit: Circuit, now: datetime) -> Circuit:
    """A call the provider answered: closed, and the count starts over."""
    return replace(
        circuit,
        state=CircuitState.CLOSED,
        failures=0,
        window_started_at=None,
        since=now if circuit.state is not CircuitState.CLOSED else circuit.since,
        next_probe_at=None,
        probes=0,
        # The resume is paced from the close (``engine.circuits.release_waiting``).
        released_at=now if circuit.state is not CircuitState.CLOSED else circuit.released_at,
    )


def needs_success_write(circuit: Circuit) -> bool:
    """Whether a success changes the stored circuit (the healthy case writes nothing)."""
    return circuit.state is not CircuitState.CLOSED or circuit.failures > 0


def seconds_until_probe(circuit: Circuit, now: datetime) -> float:
    if circuit.next_probe_at is None:
        return 0.0
    return max(0.0, (circuit.next_probe_at - now).total_seconds())
