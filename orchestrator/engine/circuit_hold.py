"""The dispatcher's hold: a payment accepted while its account's circuit is open waits
without a message (decision 0109).

Without it, a payment accepted during an outage cost two wake-ups: the dispatcher published
one, a worker claimed the payment only to find the circuit open and made it wait, and the
sweeper published the second when the circuit let calls through again.  The dispatcher
instead writes that wait itself, in one statement per batch of wake-ups, before publishing
the rest: the payment then gets its only message when the sweeper releases it
(``engine.circuits.release_waiting``), oldest first with the payments the workers made wait.

What is held, all in the statement (the row decides, not the dispatcher's view):

* a payment still under the accept's dispatch lease and its token (nobody claimed it: no
  call was ever made for it), never claimed (``attempts = 0``);
* whose account's circuit would refuse its call: open with its next probe not yet due, or
  half-open with every probe slot of the period taken (``domain.circuit.take_probe``: a
  probe that hangs to its read timeout keeps the circuit half-open that long);
* with no other account in its route.  A payment that may fail over is published as
  before: the worker moves it to the next account at once (decision 0086), and holding it
  would make it wait for a circuit it need not wait for.

Hazards:

* the dispatcher's cached answer to "is any circuit open?" is up to ``CACHE_SECONDS`` old.
  It only decides whether to run the statement: a stale "open" costs one statement that
  holds nothing; a stale "closed" publishes, as before this hold existed (the worker makes
  the payment wait: one more message, never a wrong state);
* the hold is the worker's wait written by someone else: the same columns, a ``wait``
  history row, the accept's token kept (nobody held a lease to fence out);
* a statement that fails raises: the dispatcher reconnects with its wake-ups still held in
  memory, and publishes them (nothing is lost; at worst they wait the old way).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg

from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY, CircuitPolicy
from orchestrator.domain.states import WaitingFor
from orchestrator.engine.circuits import policy_of
from orchestrator.settings import Settings

# How long the dispatcher trusts its answer to "is any circuit open?" (one autocommit
# read of the circuits table, which has a row per account that ever failed).
CACHE_SECONDS = 1.0

_ANY_OPEN = "SELECT EXISTS (SELECT 1 FROM circuits WHERE state IN ('open', 'half_open'))"

_HOLD = """
WITH wakeups AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS w(id, token)
), held AS (
    UPDATE payments AS p
       SET lease_owner = NULL,
           locked_until = now() + %(recheck)s * interval '1 second',
           next_attempt_at = now() + %(recheck)s * interval '1 second',
           waiting_for = %(waiting_for)s,
           waiting_since = now(),
           updated_at = now()
      FROM wakeups AS w, circuits AS c
     WHERE p.id = w.id
       AND p.lease_token = w.token
       AND p.status = 'processing'
       AND p.lease_owner = 'dispatch'
       AND p.recovery_point = 'accepted'
       AND p.attempts = 0
       AND c.key = coalesce(p.connector_account_id, %(platform)s)
       AND (
             (c.state = 'open' AND c.next_probe_at > now())
             OR (c.state = 'half_open'
                 AND c.probes >= %(probes)s
                 AND c.since > now() - %(open_seconds)s * interval '1 second')
           )
       AND coalesce(
             CASE WHEN jsonb_typeof(p.route) = 'array' THEN jsonb_array_length(p.route) END, 0
           ) <= 1
    RETURNING p.id, p.lease_token, p.locked_until, p.status, p.recovery_point, p.updated_at
), history AS (
    INSERT INTO lease_events
        (payment_id, operation_id, event, owner, lease_token, locked_until, status,
         recovery_point, created_at)
    SELECT id, NULL, 'wait', NULL, lease_token, locked_until, status, recovery_point,
           updated_at
      FROM held
)
SELECT id FROM held
"""


class CircuitHold:
    """Holds wake-ups of payments whose circuit would refuse their call, on the dispatcher's
    connection; ``policy``: the circuits' settings (the probe slots, the open period)."""

    def __init__(self, recheck_seconds: float, policy: CircuitPolicy) -> None:
        # The held payment's safety net (``PAYORCH_CIRCUIT_WAIT_RECHECK_SECONDS``), as a
        # worker's circuit wait sets it.
        self.recheck_seconds = recheck_seconds
        self.policy = policy
        self._open: bool = False
        self._read_at: float = float("-inf")

    @classmethod
    def of(cls, settings: Settings) -> CircuitHold:
        return cls(settings.circuit_wait_recheck_seconds, policy_of(settings))

    def held(self, conn: psycopg.Connection[Any], wakeups: Sequence[tuple[str, int]]) -> set[str]:
        """The payments of ``wakeups`` (payments' only) this call made wait."""
        if not wakeups or not self._any_open(conn):
            return set()
        rows = conn.execute(
            _HOLD,
            {
                "ids": [payment_id for payment_id, _ in wakeups],
                "tokens": [token for _, token in wakeups],
                "recheck": self.recheck_seconds,
                "probes": self.policy.probes,
                "open_seconds": self.policy.open_seconds,
                "waiting_for": WaitingFor.CIRCUIT.value,
                "platform": PLATFORM_CIRCUIT_KEY,
            },
        ).fetchall()
        return {str(row[0]) for row in rows}

    def _any_open(self, conn: psycopg.Connection[Any]) -> bool:
        now = time.monotonic()
        if now - self._read_at >= CACHE_SECONDS:
            row = conn.execute(_ANY_OPEN).fetchone()
            self._open = bool(row and row[0])
            self._read_at = now
        return self._open
