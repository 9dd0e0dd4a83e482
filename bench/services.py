"""PostgreSQL and RabbitMQ for the bench: the test suite's own helpers, reused.

``ensure()`` is what ``.ci/run`` and the test session run: start a stopped server, install a
missing one from Debian packages, configure trust auth on a fresh cluster.  The bench then
makes its own database and vhost and drops them when it ends, whatever happens.  Their names
follow the test suite's pattern (``payorch_test_<pid>_<hex>``), so the leftovers of a bench
killed before its cleanup are reaped by the next test session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.support import postgres, rabbitmq
from tests.support.services import ensure_services


def ensure() -> list[str]:
    """Make PostgreSQL and RabbitMQ reachable; what was done, one line per service."""
    return [ensured.summary() for ensured in ensure_services()]


@contextmanager
def scratch_database() -> Iterator[str]:
    """An empty PostgreSQL database of this run (SQLAlchemy URL); dropped at the end."""
    url = postgres.create_database()
    try:
        yield url
    finally:
        postgres.drop_database(url.rsplit("/", 1)[-1])


@contextmanager
def scratch_vhost() -> Iterator[str]:
    """A RabbitMQ vhost of this run (broker URL); deleted at the end."""
    vhost = rabbitmq.create_vhost()
    try:
        yield rabbitmq.broker_url(vhost)
    finally:
        rabbitmq.delete_vhost(vhost)
