"""Round trips to PostgreSQL, read from libpq's protocol trace: each turn from sending to
reading the server's answer is one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from psycopg import pq
from sqlalchemy import event
from sqlalchemy.engine import Engine


def round_trips(trace: str) -> int:
    """How many times the client stopped sending and read the server's answer."""
    turns, sending = 0, False
    for line in trace.splitlines():
        direction = line.split("\t", 1)[0]
        if direction == "F":
            sending = True
        elif direction == "B" and sending:
            turns, sending = turns + 1, False
    return turns


def start_trace(pgconn: pq.abc.PGconn, path: Path) -> Any:
    """Trace ``pgconn`` into ``path`` until ``pgconn.untrace()``; returns the open file,
    for the caller to close after that."""
    trace = path.open("w")
    pgconn.trace(trace.fileno())
    pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
    return trace


class CheckoutTraces:
    """Every pool checkout of an engine traced into a file of its own while active."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._open: dict[int, tuple[pq.abc.PGconn, Any]] = {}
        self.paths: list[Path] = []
        self.active = False

    def checkout(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if not self.active:
            return
        path = self._directory / f"checkout-{len(self.paths)}.trace"
        self.paths.append(path)
        pgconn = dbapi_connection.pgconn
        self._open[id(dbapi_connection)] = (pgconn, start_trace(pgconn, path))

    def checkin(self, dbapi_connection: Any, _record: Any) -> None:
        opened = self._open.pop(id(dbapi_connection), None)
        if opened is not None:
            pgconn, trace = opened
            pgconn.untrace()
            trace.close()

    def round_trips(self) -> int:
        return sum(round_trips(path.read_text()) for path in self.paths)


@contextmanager
def traced_checkouts(engine: Engine, directory: Path) -> Iterator[CheckoutTraces]:
    """Trace every checkout of ``engine`` made while ``traces.active`` is true."""
    traces = CheckoutTraces(directory)
    event.listen(engine, "checkout", traces.checkout)
    event.listen(engine, "checkin", traces.checkin)
    try:
        yield traces
    finally:
        event.remove(engine, "checkout", traces.checkout)
        event.remove(engine, "checkin", traces.checkin)
