"""The database clock, with a seam for tests.

Lease comparisons use one clock, the database's, so an API, workers and sweepers on hosts
with drifting clocks cannot disagree about whether a lease expired.  The clock is read with
``SELECT coalesce(:now, clock_timestamp())``: production passes NULL; tests pass the
instant freezegun froze, through ``FrozenClock`` (and then no statement is needed at all:
the answer is ``:now``).  Fencing tokens keep writes safe even when clocks are wrong; the clock only
decides *when* a takeover may happen.

A unit of work used to read the clock with its own statement, one round trip in each of a
payment's eight transactions.  Now each process samples the database clock at most every
``SAMPLE_SECONDS`` per engine and advances the sample on the host's boot-time clock
(monotonic, and counting a suspended VM's sleep, so a resumed host re-reads instead of
running behind).  The estimate is the database's clock within the sample's round trip plus
the host clock's drift over ``SAMPLE_SECONDS`` (parts per million): microseconds to a
millisecond, against leases of seconds.  A host whose clock runs wrong still agrees with
everyone else, as before.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import sqlalchemy as sa

from orchestrator.db.database import Database
from orchestrator.db.session import Session
from orchestrator.db.types import UtcDateTime


class Clock(Protocol):
    def override(self) -> datetime | None:
        """The instant to use instead of the database's ``now()``, or None."""


class DatabaseClock:
    def override(self) -> datetime | None:
        return None


class FrozenClock:
    """Passes Python's idea of now (frozen by freezegun in tests) to the database."""

    def override(self) -> datetime | None:
        return datetime.now(UTC)


# How long one sample of the database clock is used.  Too long: the host's clock drift
# (and a database failover to a host with another clock) goes unnoticed that long; too
# short: more round trips (one per process and engine each time).
SAMPLE_SECONDS = 10.0
_ELAPSED_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def _elapsed() -> float:
    return time.clock_gettime(_ELAPSED_CLOCK)


@dataclass(frozen=True)
class _Sample:
    database_now: datetime
    taken_at: float  # _elapsed() when it was read


# One sample per engine (a process may hold several, e.g. tests); forgotten with the engine.
_samples: weakref.WeakKeyDictionary[sa.Engine, _Sample] = weakref.WeakKeyDictionary()


def read_database_now(session: Session, clock: Clock) -> datetime:
    """The database's now: the test seam's instant, or the database clock (sampled)."""
    override = clock.override()
    if override is not None:
        return override
    engine = session.connection.engine
    sample = _samples.get(engine)
    elapsed = _elapsed()
    if sample is None or not 0 <= elapsed - sample.taken_at < SAMPLE_SECONDS:
        sample = _Sample(query_database_now(session, None), _elapsed())
        _samples[engine] = sample
        return sample.database_now
    return sample.database_now + timedelta(seconds=elapsed - sample.taken_at)


def sampled_now(engine: sa.Engine, clock: Clock) -> datetime | None:
    """The database's now when it needs no round trip (the test seam's instant, or a fresh
    sample), else None.  Never blocks: the API's event loop may ask."""
    override = clock.override()
    if override is not None:
        return override
    sample = _samples.get(engine)
    elapsed = _elapsed()
    if sample is not None and 0 <= elapsed - sample.taken_at < SAMPLE_SECONDS:
        return sample.database_now + timedelta(seconds=elapsed - sample.taken_at)
    return None


def engine_now(database: Database, clock: Clock) -> datetime:
    """``read_database_now`` without a connection of the caller's: the sample when it is
    fresh (no checkout at all), else one checkout to take a new one.  For statements run
    outside a unit of work (orchestrator.db.accept_claims's authenticated claim)."""
    now = sampled_now(database.engine, clock)
    if now is not None:
        return now
    with database.transaction(read_only=True) as session:
        return read_database_now(session, clock)


def query_database_now(session: Session, override: datetime | None) -> datetime:
    """``SELECT coalesce(:now, clock_timestamp())``: one round trip."""
    if session.dialect == "sqlite":
        now_expr = sa.text("strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'")
    else:
        # clock_timestamp(), not now(): now() is the start of this transaction, which a
        # sample reused for seconds must not be.
        now_expr = sa.text("clock_timestamp()")
    query = sa.select(
        sa.func.coalesce(
            sa.bindparam("now", override, type_=UtcDateTime()), now_expr, type_=UtcDateTime()
        )
    )
    value = session.scalar(query)
    assert isinstance(value, datetime)
    return value
