"""Make the real services reachable, and take them down on purpose for outage tests.

``ensure_services()`` is what the pytest fixtures run once per session (only when a test needs
a service) and what ``.ci/run`` runs before the suite::

    python -m tests.support.services --ensure [--configure-auth] [--no-install]

A stopped service is started, a missing one is installed from Debian packages (both in one
``apt-get install``), and every action is logged and returned so the session can report it.

``ServiceControl`` is for chaos and outage tests, and never touches those shared servers: it
stops and starts a PostgreSQL cluster and a RabbitMQ node that this session started for the
purpose (``PrivateServices``, ``tests.support.private_servers``).  Its context managers
restart the server in ``finally``, and the ``service_control`` fixture restarts anything
still down at teardown.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tests.support import postgres, rabbitmq
from tests.support.locking import SERVICE_LOCK
from tests.support.private_servers import PrivatePostgres, PrivateRabbitMQ
from tests.support.system import Ensured, apt_install

log = logging.getLogger("payorch.tests.services")


def ensure_services(
    *,
    want_postgres: bool = True,
    want_rabbitmq: bool = True,
    configure_auth: bool = False,
    allow_install: bool = True,
) -> list[Ensured]:
    """Start (or install, then start) PostgreSQL and RabbitMQ; return what was done."""
    done: list[Ensured] = []
    missing: list[str] = []
    if want_postgres and not postgres.probe_postgres().ok and not postgres.installed():
        missing.append("postgresql")
    if want_rabbitmq and not rabbitmq.probe_rabbitmq().ok and not rabbitmq.installed():
        missing.append("rabbitmq-server")
    if missing and allow_install:
        with SERVICE_LOCK.held():
            # Re-check under the lock: another session may have installed them meanwhile.
            missing = [
                package
                for package, installed in (
                    ("postgresql", postgres.installed),
                    ("rabbitmq-server", rabbitmq.installed),
                )
                if package in missing and not installed()
            ]
            if missing:
                apt_install(missing)
                packages = Ensured("Debian packages")
                packages.did(f"installed {' '.join(missing)}")
                done.append(packages)
    if want_postgres:
        # A cluster that was just installed asks for a password on TCP: configure it.
        fresh = "postgresql" in missing
        done.append(
            postgres.ensure_postgres(
                configure_auth=configure_auth or fresh, allow_install=allow_install
            )
        )
    if want_rabbitmq:
        done.append(rabbitmq.ensure_rabbitmq(allow_install=allow_install))
    return done


class PrivateServices:
    """This session's own PostgreSQL cluster and RabbitMQ node, each started on first use
    and destroyed at session end (``tests.support.private_servers``)."""

    def __init__(self) -> None:
        self._postgres: PrivatePostgres | None = None
        self._rabbitmq: PrivateRabbitMQ | None = None

    @property
    def postgres(self) -> PrivatePostgres:
        if self._postgres is None:
            server = PrivatePostgres()
            log.warning("private PostgreSQL for outage tests: starting on port %s", server.port)
            self._postgres = server
            server.start()
        return self._postgres

    @property
    def rabbitmq(self) -> PrivateRabbitMQ:
        if self._rabbitmq is None:
            server = PrivateRabbitMQ()
            log.warning("private RabbitMQ for outage tests: node %s, port %s", server.node,
                        server.port)  # fmt: skip
            self._rabbitmq = server
            server.start()
        return self._rabbitmq

    def destroy(self) -> None:
        for server in (self._postgres, self._rabbitmq):
            if server is not None:
                server.destroy()


class ServiceControl:
    """Deliberate outages, of servers this session started for the purpose.

    Hazard: the machine's PostgreSQL (5432) and RabbitMQ (5672) are shared by every test
    session and every developer on it; stopping them is an outage for all of them.  So an
    outage test works on the session's private servers: it takes its database
    (``make_database``) and broker (``make_broker_url``) from here, and stops and starts
    only those.  Whatever a test stopped is started again at teardown.
    """

    def __init__(self, servers: PrivateServices) -> None:
        self._servers = servers
        self.touched: set[str] = set()

    # PostgreSQL ---------------------------------------------------------------------------

    def make_database(self) -> str:
        """A new empty database on the private PostgreSQL; its SQLAlchemy URL."""
        return self._servers.postgres.create_database()

    def stop_postgres(self) -> None:
        """Stop it now (fast shutdown); the caller or the fixture teardown starts it again."""
        self.touched.add("postgres")
        log.warning("private PostgreSQL: stopping for an outage test")
        self._servers.postgres.stop("fast")

    def start_postgres(self) -> None:
        self._servers.postgres.start()
        log.warning("private PostgreSQL: running again")

    def restart_postgres(self) -> None:
        with self.postgres_stopped():
            pass

    @contextmanager
    def postgres_stopped(self) -> Iterator[None]:
        """PostgreSQL is down inside the block and running again after it, whatever happens."""
        self.stop_postgres()
        try:
            yield
        finally:
            self.start_postgres()

    # RabbitMQ -----------------------------------------------------------------------------

    def make_broker_url(self) -> str:
        """A new vhost on the private RabbitMQ; its AMQP URL."""
        rabbitmq = self._servers.rabbitmq
        return rabbitmq.url(rabbitmq.create_vhost())

    def stop_broker(self, mode: str = "app") -> None:
        """``app``: stop_app (quick, the VM stays); ``node``: the whole node goes down."""
        self.touched.add("rabbitmq")
        log.warning("private RabbitMQ: stopping (%s) for an outage test", mode)
        self._servers.rabbitmq.stop(mode)

    def start_broker(self) -> None:
        self._servers.rabbitmq.start()
        log.warning("private RabbitMQ: running again")

    def restart_broker(self, mode: str = "app") -> None:
        with self.broker_stopped(mode):
            pass

    @contextmanager
    def broker_stopped(self, mode: str = "app") -> Iterator[None]:
        """RabbitMQ is down inside the block and running again after it, whatever happens."""
        self.stop_broker(mode)
        try:
            yield
        finally:
            self.start_broker()

    def restore(self) -> None:
        """Start again whatever this object stopped and was not started (fixture teardown)."""
        if "postgres" in self.touched and not self._servers.postgres.is_ready():
            self.start_postgres()
        if "rabbitmq" in self.touched and not self._servers.rabbitmq.is_ready():
            self.start_broker()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.services",
        description="Make PostgreSQL (127.0.0.1:5432) and RabbitMQ (127.0.0.1:5672) usable "
        "for the test suite: start them when stopped, install them when absent.",
    )
    parser.add_argument("--ensure", action="store_true", help="start/install what is needed")
    parser.add_argument(
        "--configure-auth",
        action="store_true",
        help="allow adding 'host all all 127.0.0.1/32 trust' to pg_hba.conf of an existing "
        "cluster that asks for a password (always done for a freshly installed one)",
    )
    parser.add_argument("--no-install", action="store_true", help="never run apt-get")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if not args.ensure:
        parser.print_help()
        return 2
    try:
        done = ensure_services(
            configure_auth=args.configure_auth, allow_install=not args.no_install
        )
    except (RuntimeError, OSError) as exc:  # *Unavailable, CommandError, lock timeout
        log.error("services not ready: %s", exc)
        return 1
    for ensured in done:
        log.info("ready: %s", ensured.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
