"""Make the real services reachable, and take them down on purpose for outage tests.

``ensure_services()`` is what the pytest fixtures run once per session (only when a test needs
a service) and what ``.ci/run`` runs before the suite::

    python -m tests.support.services --ensure [--configure-auth] [--no-install]

A stopped service is started, a missing one is installed from Debian packages (both in one
``apt-get install``), and every action is logged and returned so the session can report it.

``ServiceControl`` stops and starts them for chaos and outage tests.  Its context managers
restart the service in ``finally``, so a failing test body still leaves it running, and the
``service_control`` fixture re-checks everything it touched at teardown.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tests.support import postgres, rabbitmq
from tests.support.locking import SERVICE_LOCK
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


class ServiceControl:
    """Deliberate outages of the shared services, always undone.

    Hazard: every test session on this machine shares these servers, so an outage here is an
    outage for all of them.  Keep the window short, and hold ``exclusive()`` when a test needs
    several steps without another session starting the service in between.
    """

    def __init__(self) -> None:
        self.touched: set[str] = set()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Keep other test sessions from starting or stopping services meanwhile."""
        with SERVICE_LOCK.held():
            yield

    # PostgreSQL ---------------------------------------------------------------------------

    def stop_postgres(self) -> None:
        """Stop it now (fast shutdown); the caller or the fixture teardown starts it again."""
        self.touched.add("postgres")
        log.warning("PostgreSQL: stopping for an outage test")
        postgres.stop_postgres()

    def start_postgres(self) -> None:
        postgres.start_postgres()
        log.warning("PostgreSQL: running again")

    def restart_postgres(self) -> None:
        with self.postgres_stopped():
            pass

    @contextmanager
    def postgres_stopped(self) -> Iterator[None]:
        """PostgreSQL is down inside the block and running again after it, whatever happens."""
        with self.exclusive():
            self.stop_postgres()
            try:
                yield
            finally:
                self.start_postgres()

    # RabbitMQ -----------------------------------------------------------------------------

    def stop_broker(self, mode: rabbitmq.StopMode = "app") -> None:
        """``app``: stop_app (quick, the VM stays); ``node``: the whole node goes down."""
        self.touched.add("rabbitmq")
        log.warning("RabbitMQ: stopping (%s) for an outage test", mode)
        rabbitmq.stop_rabbitmq(mode)

    def start_broker(self) -> None:
        rabbitmq.start_rabbitmq()
        log.warning("RabbitMQ: running again")

    def restart_broker(self, mode: rabbitmq.StopMode = "app") -> None:
        with self.broker_stopped(mode):
            pass

    @contextmanager
    def broker_stopped(self, mode: rabbitmq.StopMode = "app") -> Iterator[None]:
        """RabbitMQ is down inside the block and running again after it, whatever happens."""
        with self.exclusive():
            self.stop_broker(mode)
            try:
                yield
            finally:
                self.start_broker()

    def restore(self) -> list[Ensured]:
        """Bring back everything this object ever stopped (fixture teardown)."""
        return ensure_services(
            want_postgres="postgres" in self.touched,
            want_rabbitmq="rabbitmq" in self.touched,
            allow_install=False,
        )


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
