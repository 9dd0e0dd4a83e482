"""A stand-in for PostgreSQL's autovacuum, for a server that runs without it.

The machine this bench is run on in CI may run PostgreSQL with ``autovacuum = off``.  No
table is then ever analysed, and an index keeps the size it had when it was created (empty)
in the planner's eyes.  Looked up by ``id``, a payment was then found through
``ix_payments_client_created`` (``id`` is its third column: a scan of the whole index)
instead of the primary key, in every claim, finish and foreign-key check: a payment's
database work grew with the table, and a scenario long enough to fill it measured the
server's missing maintenance, not the orchestrator.  Production runs autovacuum.

``autovacuum_stand_in`` does what autovacuum's launcher would at its default naptime: a
``VACUUM (ANALYZE)`` of the scenario's database every ``NAPTIME_SECONDS``, only while the
server's own autovacuum is off.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

# PostgreSQL's default autovacuum_naptime.
NAPTIME_SECONDS = 60.0


def autovacuum_is_on(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return str(conn.execute(sa.text("SHOW autovacuum")).scalar_one()) == "on"


@contextmanager
def autovacuum_stand_in(engine: sa.Engine) -> Iterator[bool]:
    """Vacuum and analyse ``engine``'s database every NAPTIME_SECONDS while inside, when
    the server's autovacuum is off; yields whether it stands in."""
    if autovacuum_is_on(engine):
        yield False
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(NAPTIME_SECONDS):
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text("VACUUM (ANALYZE)"))

    thread = threading.Thread(target=loop, name="autovacuum-stand-in", daemon=True)
    thread.start()
    try:
        yield True
    finally:
        stop.set()
        thread.join()
