"""Connector accounts' circuits (``domain.circuit``), and the payments waiting them out.

A circuit's row is written only under its own row lock (``lock``, then ``save`` in the
same short transaction): every host's transition reads the state the previous one left.
No row is a closed circuit; ``lock`` makes one on an account's first failure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import circuits, lease_events, payments
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY, Circuit, CircuitState
from orchestrator.domain.states import PaymentStatus, WaitingFor

c = circuits.c
p = payments.c
CIRCUIT_WAIT = WaitingFor.CIRCUIT.value
# The circuits an ops read lists: one per connector account, which a platform has
# hundreds of at most; the cap bounds the read all the same.
MAX_CIRCUITS_LISTED = 500


def to_circuit(m: Row) -> Circuit:
    return Circuit(
        key=m["key"],
        state=CircuitState(m["state"]),
        failures=m["failures"],
        window_started_at=m["window_started_at"],
        since=m["since"],
        opened_at=m["opened_at"],
        next_probe_at=m["next_probe_at"],
        probes=m["probes"],
        released_at=m["released_at"],
        probe_released_at=m["probe_released_at"],
    )


def _values(circuit: Circuit) -> dict[str, Any]:
    return {
        "state": circuit.state.value,
        "failures": circuit.failures,
        "window_started_at": circuit.window_started_at,
        "since": circuit.since,
        "opened_at": circuit.opened_at,
        "next_probe_at": circuit.next_probe_at,
        "probes": circuit.probes,
        "released_at": circuit.released_at,
        "probe_released_at": circuit.probe_released_at,
    }


def _of_account(key: str) -> sa.ColumnElement[bool]:
    """The payments of the account a circuit key names (None: the platform's)."""
    if key == PLATFORM_CIRCUIT_KEY:
        return p.connector_account_id.is_(None)
    return p.connector_account_id == key


def _waiting() -> sa.ColumnElement[bool]:
    return sa.and_(
        p.waiting_for == CIRCUIT_WAIT,
        p.status == PaymentStatus.PROCESSING.value,
        p.lease_owner.is_(None),
    )


class CircuitRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def get(self, key: str) -> Circuit | None:
        row = self._db.one(sa.select(circuits).where(c.key == key))
        return None if row is None else to_circuit(row)

    def all(self) -> list[Circuit]:
        rows = self._db.all(sa.select(circuits).order_by(c.key).limit(MAX_CIRCUITS_LISTED))
        return [to_circuit(r) for r in rows]

    def lock(self, key: str, *, now: datetime) -> Circuit:
        """The circuit, row-locked for a transition (made, closed, if it had no row)."""
        insert = postgresql.insert if self._db.dialect == "postgresql" else sqlite.insert
        self._db.write(
            insert(circuits)
            .values(key=key, **_values(Circuit(key=key)), updated_at=now)
            .on_conflict_do_nothing(index_elements=["key"])
        )
        row = self._db.one(sa.select(circuits).where(c.key == key).with_for_update())
        assert row is not None
        return to_circuit(row)

    def save(self, circuit: Circuit, *, now: datetime) -> None:
        self._db.write(
            circuits.update().where(c.key == circuit.key).values(**_values(circuit), updated_at=now)
        )

    # -- the payments waiting out a circuit ---------------------------------------------------

    def waiting_counts(self) -> dict[str, int]:
        """Payments waiting for a circuit, by circuit key."""
        key = sa.func.coalesce(p.connector_account_id, PLATFORM_CIRCUIT_KEY)
        rows = self._db.all(
            sa.select(key.label("key"), sa.func.count().label("n")).where(_waiting()).group_by(key)
        )
        return {r["key"]: int(r["n"]) for r in rows}

    def release_waiting(
        self,
        key: str,
        *,
        limit: int,
        now: datetime,
        owner: str,
        lease_until: datetime,
        max_attempts: int,
        fewest_unknown_first: bool = False,
    ) -> list[tuple[str, int]]:
        """Hand up to ``limit`` of the account's waiting payments straight to a worker,
        oldest first (``fewest_unknown_first``: those with the fewest unknown outcomes
        first, for the probes, so no payment spends its attempts probing again and again):
        each gets a new token and a dispatch lease under ``owner``, with its ``takeover``
        history row, exactly as the sweeper's takeover of a due record would give it.  The
        (id, token) pairs returned are the wake-ups the caller publishes after the commit.

        One statement for the whole batch, not a takeover per row: after an outage every
        waiting payment is released within seconds, and a row-at-a-time path paced the
        drain at the sweeper's speed instead of the workers'.  A payment out of attempts
        is only made due, for the same pass's takeover to park it.  Rows another sweeper
        holds are skipped (SKIP LOCKED)."""
        if limit <= 0:
            return []
        order: list[sa.ColumnElement[Any]] = [p.created_at, p.id]
        if fewest_unknown_first:
            order.insert(0, p.unknown_outcomes)
        # Two statements, not ``IN (subquery)``: the locked choice is made once, and the
        # update touches exactly the rows it locked.
        chosen = self._db.all(
            sa.select(p.id, p.attempts)
            .where(_waiting(), _of_account(key), p.next_attempt_at > now)
            .order_by(*order)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        spent = [r["id"] for r in chosen if r["attempts"] >= max_attempts]
        ids = [r["id"] for r in chosen if r["attempts"] < max_attempts]
        if spent:
            self._db.write(
                payments.update()
                .where(p.id.in_(spent))
                .values(locked_until=now, next_attempt_at=now)
            )
        if not ids:
            return []
        rows = self._db.all(
            payments.update()
            .where(p.id.in_(ids))
            .values(
                lease_token=p.lease_token + 1,
                lease_owner=owner,
                locked_until=lease_until,
                next_attempt_at=None,
                # No longer waiting: out of the partial index of circuit waits, which every
                # later update of the row would otherwise write again (a drain after an
                # outage rewrites each row several times).
                waiting_for=None,
                waiting_since=None,
                updated_at=now,
            )
            .returning(p.id, p.lease_token)
        )
        # The history rows from the rows just written, in the database: a VALUES list
        # would bind nine parameters per payment (a thousand-payment release took longer
        # to parse than to run).
        released = sa.select(
            p.id,
            sa.null(),
            sa.literal("takeover"),
            p.lease_owner,
            p.lease_token,
            p.locked_until,
            p.status,
            p.recovery_point,
            p.updated_at,
        ).where(p.id.in_(ids))
        self._db.write(
            lease_events.insert().from_select(
                [
                    "payment_id",
                    "operation_id",
                    "event",
                    "owner",
                    "lease_token",
                    "locked_until",
                    "status",
                    "recovery_point",
                    "created_at",
                ],
                released,
            )
        )
        # RETURNING's order is not the statement's: put the oldest first again.
        token_of = {r["id"]: int(r["lease_token"]) for r in rows}
        return [(payment_id, token_of[payment_id]) for payment_id in ids if payment_id in token_of]
