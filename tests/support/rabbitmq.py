"""RabbitMQ for the tests: 127.0.0.1:5672, guest/guest, managed with ``rabbitmqctl``.

``ensure_rabbitmq`` decides what to do from what it finds::

    AMQP login on vhost / works ............ nothing
    Erlang node up, application stopped .... rabbitmqctl start_app, await_startup
    node down ............................... rabbitmq-server -detached, await_startup
    not installed ........................... apt-get install rabbitmq-server, then start

Nothing here stops it: outage tests stop a private node of their own
(``tests.support.private_servers``), never the shared one.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass
from typing import Literal

import amqp

from tests.support.locking import SERVICE_LOCK
from tests.support.system import (
    CommandError,
    Ensured,
    apt_install,
    belongs_to_dead_run,
    is_test_resource,
    new_resource_name,
    run,
    run_detached,
    which,
)

HOST = "127.0.0.1"
PORT = 5672
USER = "guest"
PASSWORD = "guest"

# Booting the Erlang VM and RabbitMQ takes 5-20 s; a first boot after install longer.  Too
# short: a slow boot fails the session; too long: a broken node keeps the session waiting.
READY_TIMEOUT_SECONDS = 120.0

ProbeKind = Literal["ok", "refused", "starting", "auth", "error"]


class RabbitMQUnavailable(RuntimeError):
    """RabbitMQ could not be made reachable; the message says what was tried."""


@dataclass(frozen=True)
class Probe:
    kind: ProbeKind
    detail: str

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def broker_url(vhost: str) -> str:
    return f"amqp://{USER}:{PASSWORD}@{HOST}:{PORT}/{vhost}"


def port_open(timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, PORT), timeout=timeout):
            return True
    except OSError:
        return False


def probe_rabbitmq(vhost: str = "/", timeout: float = 3.0) -> Probe:
    """TCP connect, then a real AMQP handshake and login: an open port alone proves little."""
    if not port_open(timeout=timeout):
        return Probe("refused", f"nothing accepts TCP connections on {HOST}:{PORT}")
    connection = amqp.Connection(
        host=f"{HOST}:{PORT}",
        userid=USER,
        password=PASSWORD,
        virtual_host=vhost,
        connect_timeout=timeout,
        read_timeout=timeout,
        write_timeout=timeout,
    )
    try:
        connection.connect()
        connection.close()
    except amqp.exceptions.AccessRefused as exc:
        return Probe("auth", f"AMQP login as {USER} refused: {exc}")
    except (amqp.exceptions.AMQPError, OSError) as exc:
        # Typical while booting or stopping: the socket accepts, then the handshake fails.
        return Probe("starting", f"AMQP handshake failed: {exc!r}")
    finally:
        with contextlib.suppress(Exception):
            connection.collect()
    return Probe("ok", f"RabbitMQ answers AMQP on {HOST}:{PORT}")


def installed() -> bool:
    return which("rabbitmqctl") is not None and which("rabbitmq-server") is not None


def _rabbitmqctl(*args: str, timeout: float = 60.0, check: bool = True) -> str:
    return run(["rabbitmqctl", "-q", *args], timeout=timeout, check=check).stdout


def node_running() -> bool:
    """The Erlang node is up (its RabbitMQ application may still be stopped)."""
    return run(["rabbitmqctl", "-q", "ping", "-t", "10"], timeout=30, check=False).returncode == 0


def wait_until_ready(timeout: float = READY_TIMEOUT_SECONDS) -> Probe:
    deadline = time.monotonic() + timeout
    # await_startup blocks until the application is up, but fails at once while the node
    # itself is still booting; the AMQP probe below is the truth either way.
    while time.monotonic() < deadline:
        remaining = max(5.0, deadline - time.monotonic())
        if run(["rabbitmqctl", "-q", "await_startup"], timeout=remaining, check=False).returncode:
            time.sleep(0.5)
            continue
        break
    probe = probe_rabbitmq()
    while not probe.ok and probe.kind != "auth" and time.monotonic() < deadline:
        time.sleep(0.25)
        probe = probe_rabbitmq()
    return probe


def _start() -> str:
    if node_running():
        _rabbitmqctl("start_app", timeout=READY_TIMEOUT_SECONDS)
        return "started the RabbitMQ application (the node was up, the app stopped)"
    # Through the Debian wrapper, which switches to the rabbitmq user when run as root.
    run_detached(["rabbitmq-server", "-detached"], timeout=60)
    return "started the RabbitMQ node with rabbitmq-server -detached (it was stopped)"


def ensure_rabbitmq(*, allow_install: bool = True) -> Ensured:
    ensured = Ensured("RabbitMQ")
    if probe_rabbitmq().ok:
        return ensured
    with SERVICE_LOCK.held():
        probe = probe_rabbitmq()  # another session may have fixed it while we waited
        if probe.ok:
            return ensured
        if probe.kind == "auth":
            raise RabbitMQUnavailable(
                f"{probe.detail}. The tests log in as guest/guest from 127.0.0.1; restore that "
                "account (rabbitmqctl add_user guest guest; set_permissions -p / guest "
                "'.*' '.*' '.*'; set_user_tags guest administrator)."
            )
        if not installed():
            if not allow_install:
                raise RabbitMQUnavailable(f"RabbitMQ is not installed ({probe.detail})")
            apt_install(["rabbitmq-server"])
            ensured.did("installed the Debian package rabbitmq-server")
            # The package's maintainer script may or may not have started it.
            probe = probe_rabbitmq()
        if probe.kind == "refused":
            ensured.did(_start())
        probe = wait_until_ready()
        if not probe.ok:
            raise RabbitMQUnavailable(f"RabbitMQ is not usable: {probe.detail}")
    return ensured


def create_vhost(name: str | None = None) -> str:
    """Create a vhost where guest may do anything; return its name."""
    name = name or new_resource_name()
    if not is_test_resource(name):
        raise ValueError(f"test vhost names look like payorch_test_<pid>_<suffix>, not {name!r}")
    _rabbitmqctl("add_vhost", name)
    _rabbitmqctl("set_permissions", "-p", name, USER, ".*", ".*", ".*")
    return name


def delete_vhost(name: str) -> None:
    result = run(["rabbitmqctl", "-q", "delete_vhost", name], timeout=60, check=False)
    if result.returncode != 0 and name in list_vhosts():
        raise CommandError(f"could not delete vhost {name}: {result.stderr.strip()}")


def list_vhosts() -> list[str]:
    # --silent also drops the header line that --quiet keeps.
    listing = run(["rabbitmqctl", "--silent", "list_vhosts", "name"], timeout=60).stdout
    return [line.strip() for line in listing.splitlines() if line.strip()]


def reap_stale_vhosts() -> list[str]:
    """Delete vhosts of earlier runs that died before their teardown."""
    stale = [name for name in list_vhosts() if belongs_to_dead_run(name)]
    for name in stale:
        with contextlib.suppress(CommandError):
            delete_vhost(name)
    return stale
