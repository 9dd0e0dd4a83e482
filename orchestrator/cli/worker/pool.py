"""How ``payorch worker`` runs its tasks: the pool, its concurrency, and the connection
pools sized from it.

A payment spends almost all of its time waiting for the provider (two calls of 200-600 ms
at Stripe) and comparatively little CPU.  So the default is a pool of **threads**, many of
them, a thread's stack per payment in flight (prefork costs a whole interpreter per pool
process and runs one payment in each), as one process per usable CPU: one interpreter's
threads share one core (``processes``).  The benchmark (``payorch bench``,
docs/performance.md) measures these choices.

    pool      default concurrency       processes     in flight per process   time limits
    threads   128, shared among them    one per CPU   its share of threads    not enforced
    prefork   2                         Celery's      1                       soft and hard
    solo      1                         1             1                       not enforced

**Time limits in the threads (and solo) pool.**  Only prefork enforces Celery's time
limits (its parent signals and kills a child); a thread cannot be interrupted, so neither
``task_soft_time_limit`` nor ``task_time_limit`` fires there.  What they protected still
holds without them, because no step of a payment can block without a bound of its own:

* the task starts no provider call that could end past the soft limit (its own time budget,
  ``orchestrator/engine/lease.py``), and renews its lease before every call;
* every provider call is bounded by ``PROVIDER_CONNECT_TIMEOUT_SECONDS`` (connect, and the
  wait for one of the client's connections) and ``PROVIDER_TIMEOUT_SECONDS`` (each read and
  write); every statement by ``DB_STATEMENT_TIMEOUT_MS``, every database connect by its
  connect timeout, every wait for a pooled connection by ``DB_POOL_TIMEOUT_SECONDS``;
* and whatever still outlives its lease (a thread starved of the GIL, a frozen process) is
  fenced: every write is a compare-and-set on the lease token, so a late run changes nothing,
  and a late provider call reuses the same idempotency key.

**gevent and eventlet are refused.**  ``--pool gevent`` needs the whole process
monkey-patched before anything imports ``socket``, ``ssl`` or ``threading``; the CLI has
imported all of them long before Celery reads ``--pool``, so such a worker hangs (it
finishes no payment at all).  Patched by hand it was much slower than threads at a real
provider's latency, and psycopg's C wait loop would block the hub.  Not offered.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

POOLS = ("threads", "prefork", "solo")
DEFAULT_POOL = "threads"
# Threads: enough payments in flight that a 300 ms provider (two calls, 0.6 s a payment)
# is not what limits a worker to fewer than ~200 payments/s; the worker's CPU then does.
# More threads only add contention for the GIL; fewer cap the rate at threads / 0.6 s.
# They are the command's, shared among its processes (``processes``: 2 x 64 on two
# CPUs).
DEFAULT_THREADS = 128
DEFAULT_PROCESSES = 2
REFUSED_POOLS = {
    "gevent": (
        "needs the process monkey-patched before anything imports socket, which the CLI "
        "cannot do (such a worker hangs); use --pool threads (the default), which is made "
        "for the same I/O-bound work"
    ),
    "eventlet": (
        "needs the process monkey-patched before anything imports socket, which the CLI "
        "cannot do (such a worker hangs); use --pool threads (the default)"
    ),
}
# Database connections a pool process keeps beyond one per task in flight (a sweep task may
# run beside the payments), and the most one worker process opens.  A task holds a
# connection only inside its short transactions, so far fewer than the threads are busy at
# once; but under contention for the GIL a thread can sit on one between two round trips,
# and 128 threads with a pool of 130 opened enough connections to exhaust PostgreSQL's
# default ``max_connections`` (100, shared by every API, worker and sweeper process).
SPARE_DB_CONNECTIONS = 2
MAX_DB_CONNECTIONS = 32


def default_concurrency(pool: str) -> int:
    if pool == "threads":
        return DEFAULT_THREADS
    if pool == "prefork":
        return DEFAULT_PROCESSES
    return 1


def in_flight_per_process(pool: str, concurrency: int) -> int:
    """Tasks one process runs at once: every thread of a threads pool, one per process
    otherwise (prefork children each run one task; solo runs one)."""
    return concurrency if pool == "threads" else 1


@dataclass(frozen=True)
class ConnectionSizing:
    db_pool_size: int
    db_max_overflow: int

    def as_environment(self) -> dict[str, str]:
        return {
            "PAYORCH_DB_POOL_SIZE": str(self.db_pool_size),
            "PAYORCH_DB_MAX_OVERFLOW": str(self.db_max_overflow),
        }


def connection_sizing(pool: str, concurrency: int, processes: int = 1) -> ConnectionSizing:
    """The database pool of each worker process, from the tasks it runs at once
    (``concurrency``, per process) and the threads-pool processes one ``payorch worker``
    runs (``processes``).  (The provider client needs no sizing: it keeps one urllib3
    connection per thread, see ``orchestrator.providers.stripe_adapter``.)

    A task holds a connection only inside its short transactions (never across a provider
    call), one at a time.  The pool holds one per task in flight, and one ``payorch
    worker`` holds at most ``MAX_DB_CONNECTIONS`` however many processes it runs (two
    processes: 16 each, which the benchmark found no slower than 32 each); beyond
    that, threads wait for a connection (at most ``DB_POOL_TIMEOUT_SECONDS``, well inside a
    lease) rather than open more than the server can take.  Connections open on demand, so
    an idle worker holds few.
    """
    in_flight = in_flight_per_process(pool, concurrency)
    per_process_cap = max(SPARE_DB_CONNECTIONS + 1, -(-MAX_DB_CONNECTIONS // processes))
    return ConnectionSizing(
        db_pool_size=min(in_flight + SPARE_DB_CONNECTIONS, per_process_cap),
        db_max_overflow=0,
    )


def apply_connection_sizing(
    sizing: ConnectionSizing, environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Put the sizes into the environment the worker's containers read their settings
    from (each prefork child, or each threads-pool process, builds its own), except
    where the operator set a variable: their value wins.  Returns what was set."""
    environ = os.environ if environ is None else environ
    applied = {}
    for name, value in sizing.as_environment().items():
        if name not in environ:
            environ[name] = value
            applied[name] = value
    return applied
