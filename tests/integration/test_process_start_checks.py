"""The long-running processes refuse to start on a database or broker they cannot use, and
say what they run with when they do start (issue 44, decision 0100).

``payorch worker``, ``sweeper`` and ``relay`` against a database that does not exist, a
port nothing listens on, or a database never migrated; ``worker`` and ``sweeper`` against a
RabbitMQ vhost that does not exist, a closed broker port and a refused password: each is
one JSON line ``<process>_database_unusable`` / ``<process>_broker_unusable`` naming the
URL (password hidden), the cause and what to check, exit 69, no traceback, and never a
``*_started`` or Celery ``ready`` line.  A worker whose vhost is deleted after its start
exits 69 with one line instead of Celery's ``RestartFreqExceeded`` loop.

Each command runs as a real subprocess against the real PostgreSQL and RabbitMQ.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.cli.exit_codes import EX_UNAVAILABLE
from orchestrator.db.migrate import upgrade
from tests.harness.stack import wait_for_output
from tests.integration.hardening_helpers import payorch_environment
from tests.support import rabbitmq
from tests.support.processes import (
    ManagedProcess,
    ProcessManager,
    free_port,
    payorch_command,
    process_environment,
)

pytestmark = [pytest.mark.postgres, pytest.mark.broker]

PASSWORD = "hunter2-do-not-print"
# The light form of each long-running command: what is checked does not depend on the pool.
LONG_RUNNING = {
    "worker": ["worker", "--pool", "solo"],
    "sweeper": ["sweeper"],
    "relay": ["relay"],
}
USES_THE_BROKER = ["worker", "sweeper"]
# What a process says once it runs: none may appear when it refused to start.
STARTED_MARKERS = ("_started", " ready.", "_listening", "RestartFreqExceeded")
# Generous: a loaded machine; a process that does not exit at all fails here.
EXIT_TIMEOUT_SECONDS = 120


def _with_password(url: str, **parts: object) -> str:
    return sa.make_url(url).set(password=PASSWORD, **parts).render_as_string(hide_password=False)


def _shown(url: str) -> str:
    return sa.make_url(url).render_as_string(hide_password=True)


def _run(args: list[str], database_url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        payorch_command(*args),
        env=process_environment(payorch_environment(database_url, **extra)),
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT_SECONDS,
        check=False,
    )


def _lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def _refusal_problems(
    result: subprocess.CompletedProcess[str],
    event: str,
    field: str,
    shown: str,
    cause: str,
    check: str,
) -> list[str]:
    """What is wrong with how a process refused to start (empty: nothing)."""
    output = result.stdout + result.stderr
    problems = []
    if result.returncode != EX_UNAVAILABLE:
        problems.append(f"exit {result.returncode}, not {EX_UNAVAILABLE}")
    if "Traceback" in output:
        problems.append("a traceback")
    if PASSWORD in output:
        problems.append("the password")
    problems += [f"{marker!r} said" for marker in STARTED_MARKERS if marker in output]
    refusals = [line for line in _lines(output) if line.get("event") == event]
    if len(refusals) != 1:
        return [*problems, f"{len(refusals)} {event} lines, not 1"]
    [line] = refusals
    if line.get(field) != shown:
        problems.append(f"{field} {line.get(field)!r}, not {shown!r}")
    if cause not in line.get("cause", ""):
        problems.append(f"cause {line.get('cause')!r} does not say {cause!r}")
    if check not in line.get("check", ""):
        problems.append(f"check {line.get('check')!r} does not say {check!r}")
    return problems


def _assert_each_refuses(
    runs: dict[str, Callable[[], subprocess.CompletedProcess[str]]],
    *,
    service: str,
    shown: str,
    cause: str,
    check: str,
) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(runs, pool.map(lambda run: run(), runs.values()), strict=True))
    failures = [
        f"payorch {name}: {', '.join(problems)}\n{(r.stdout + r.stderr)[-3000:]}"
        for name, r in results.items()
        if (
            problems := _refusal_problems(
                r, f"{name}_{service}_unusable", service, shown, cause, check
            )
        )
    ]
    assert not failures, "\n\n".join(failures)


# -- the database -------------------------------------------------------------------------


def _database_refusals(database_url: str, cause: str, check: str = "PAYORCH_DATABASE_URL") -> None:
    runs = {
        name: (lambda args=args: _run(args, database_url)) for name, args in LONG_RUNNING.items()
    }
    _assert_each_refuses(
        runs, service="database", shown=_shown(database_url), cause=cause, check=check
    )


def test_a_database_that_does_not_exist_stops_each_process_at_its_start(
    make_postgres_database: Callable[[], str],
) -> None:
    name = f"payorch_missing_{secrets.token_hex(6)}"
    url = _with_password(make_postgres_database(), database=name)
    _database_refusals(url, f'database "{name}" does not exist')


def test_a_closed_database_port_stops_each_process_at_its_start(
    make_postgres_database: Callable[[], str],
) -> None:
    url = _with_password(make_postgres_database(), port=free_port())
    _database_refusals(url, "Connection refused")


def test_a_database_never_migrated_stops_each_process_at_its_start(
    make_postgres_database: Callable[[], str],
) -> None:
    empty = make_postgres_database()  # exists, no tables
    _database_refusals(empty, "there is no table 'payments'", check="run 'payorch db upgrade'")


# -- the broker ---------------------------------------------------------------------------


@pytest.fixture
def migrated_database(make_postgres_database: Callable[[], str]) -> str:
    url = make_postgres_database()
    upgrade(url)
    return url


def _broker_refusals(database_url: str, broker_url: str, cause: str) -> None:
    runs = {
        name: (
            lambda args=LONG_RUNNING[name]: _run(args, database_url, PAYORCH_BROKER_URL=broker_url)
        )
        for name in USES_THE_BROKER
    }
    shown = broker_url.replace(f":{PASSWORD}@", ":***@")
    assert shown != broker_url
    _assert_each_refuses(
        runs, service="broker", shown=shown, cause=cause, check="PAYORCH_BROKER_URL"
    )


def test_a_vhost_that_does_not_exist_stops_the_worker_and_the_sweeper_at_their_start(
    migrated_database: str, rabbitmq_server: None
) -> None:
    vhost = f"payorch_missing_{secrets.token_hex(6)}"  # never created
    # guest's real password: RabbitMQ checks the login before the vhost.
    url = rabbitmq.broker_url(vhost)
    runs = {
        name: (
            lambda args=LONG_RUNNING[name]: _run(args, migrated_database, PAYORCH_BROKER_URL=url)
        )
        for name in USES_THE_BROKER
    }
    _assert_each_refuses(
        runs,
        service="broker",
        shown=url.replace(f":{rabbitmq.PASSWORD}@", ":***@"),
        cause=f"vhost {vhost} not found",
        check="PAYORCH_BROKER_URL",
    )


def test_a_closed_broker_port_stops_the_worker_and_the_sweeper_at_their_start(
    migrated_database: str, rabbitmq_server: None
) -> None:
    url = f"amqp://{rabbitmq.USER}:{PASSWORD}@{rabbitmq.HOST}:{free_port()}//"
    _broker_refusals(migrated_database, url, "Connection refused")


def test_a_refused_broker_password_stops_the_worker_and_the_sweeper_at_their_start(
    migrated_database: str, rabbitmq_server: None
) -> None:
    url = f"amqp://{rabbitmq.USER}:{PASSWORD}@{rabbitmq.HOST}:{rabbitmq.PORT}//"
    _broker_refusals(migrated_database, url, "ACCESS_REFUSED")


def test_a_worker_whose_vhost_is_deleted_after_its_start_exits_69_without_a_restart_loop(
    migrated_database: str, rabbitmq_server: None, processes: ProcessManager
) -> None:
    vhost = rabbitmq.create_vhost()
    try:
        worker = processes.payorch(
            "worker",
            "--processes",
            "2",
            "--concurrency",
            "2",
            env=payorch_environment(
                migrated_database, PAYORCH_BROKER_URL=rabbitmq.broker_url(vhost)
            ),
        )
        wait_for_output(worker, " ready.", timeout=EXIT_TIMEOUT_SECONDS)
        rabbitmq.delete_vhost(vhost)  # RabbitMQ closes the worker's connections

        status = worker.wait(timeout=EXIT_TIMEOUT_SECONDS)
    finally:
        rabbitmq.delete_vhost(vhost)  # a no-op once deleted

    output = worker.output()
    assert status == EX_UNAVAILABLE, worker.tail()
    assert "Traceback" not in output and "RestartFreqExceeded" not in output, worker.tail()
    refusals = [line for line in _lines(output) if line.get("event") == "worker_broker_refused"]
    assert len(refusals) == 2, worker.tail()  # one per worker process
    assert {line["broker"] for line in refusals} == {
        rabbitmq.broker_url(vhost).replace(f":{rabbitmq.PASSWORD}@", ":***@")
    }
    assert all(vhost in line["cause"] and "NOT_ALLOWED" in line["cause"] for line in refusals)
    events = [line.get("event") for line in _lines(output)]
    assert events.count("worker_stopped") == 2, worker.tail()


# -- start and stop lines -----------------------------------------------------------------


def test_the_sweeper_says_what_it_runs_with_where_its_metrics_are_and_when_it_stops(
    migrated_database: str, make_broker_url: Callable[[], str], processes: ProcessManager
) -> None:
    broker_url = make_broker_url()
    metrics_port = free_port()
    sweeper = processes.payorch(
        "sweeper",
        "--metrics-port",
        str(metrics_port),
        env=payorch_environment(
            migrated_database,
            PAYORCH_BROKER_URL=broker_url,
            PAYORCH_SWEEP_INTERVAL_SECONDS="7",
        ),
    )
    wait_for_output(sweeper, '"sweeper_started"', timeout=EXIT_TIMEOUT_SECONDS)
    sweeper.send_signal(signal.SIGTERM)
    assert sweeper.wait(timeout=EXIT_TIMEOUT_SECONDS) == 0, sweeper.tail()

    lines = _lines(sweeper.output())
    events = [line["event"] for line in lines]
    assert events.count("sweeper_started") == 1 and events.count("sweeper_stopped") == 1
    assert events.index("sweeper_started") < events.index("sweeper_stopped")
    [started] = [line for line in lines if line["event"] == "sweeper_started"]
    assert started["interval_seconds"] == 7
    assert started["database"] == _shown(migrated_database)
    assert started["broker"] == broker_url.replace(f":{rabbitmq.PASSWORD}@", ":***@")
    assert started["wake_up"] == "notify" and started["dispatcher"] is True
    [metrics_line] = [line for line in lines if line["event"] == "metrics_listening"]
    assert metrics_line["url"] == f"http://127.0.0.1:{metrics_port}/metrics"
    assert metrics_line["role"] == "sweeper"


def test_the_relay_names_its_database_in_its_start_line(
    migrated_database: str, processes: ProcessManager
) -> None:
    relay = processes.payorch("relay", env=payorch_environment(migrated_database))
    wait_for_output(relay, '"relay_started"', timeout=EXIT_TIMEOUT_SECONDS)
    relay.send_signal(signal.SIGTERM)
    assert relay.wait(timeout=EXIT_TIMEOUT_SECONDS) == 0, relay.tail()

    lines = _lines(relay.output())
    [started] = [line for line in lines if line["event"] == "relay_started"]
    assert started["database"] == _shown(migrated_database)
    assert [line["event"] for line in lines].count("relay_stopped") == 1


# -- a broker lost after the start --------------------------------------------------------


class _Proxy:
    """A TCP relay to RabbitMQ that the test can cut (listener and every connection) and
    bring back on the same port: a broker that goes away and returns, seen from the worker,
    without touching the shared RabbitMQ."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((rabbitmq.HOST, self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            doomed = [self._listener, *self._sockets] if self._listener else self._sockets
            self._listener, self._sockets = None, []
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection((rabbitmq.HOST, rabbitmq.PORT))
            with self._lock:
                self._sockets += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, target), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_RDWR)


def test_a_worker_that_loses_its_broker_after_the_start_retries_quietly_and_reconnects(
    migrated_database: str, make_broker_url: Callable[[], str], processes: ProcessManager
) -> None:
    vhost = make_broker_url().rsplit("/", 1)[1]
    proxy = _Proxy(free_port())
    proxy.start()
    broker_url = f"amqp://{rabbitmq.USER}:{rabbitmq.PASSWORD}@{rabbitmq.HOST}:{proxy.port}/{vhost}"
    try:
        worker = processes.payorch(
            "worker",
            "--pool",
            "solo",
            env=payorch_environment(migrated_database, PAYORCH_BROKER_URL=broker_url),
        )
        wait_for_output(worker, " ready.", timeout=EXIT_TIMEOUT_SECONDS)

        proxy.cut()  # the broker is gone: refused from now on
        wait_for_output(worker, "Trying again in 4.00 seconds", timeout=EXIT_TIMEOUT_SECONDS)
        proxy.start()  # back
        _wait_for_count(worker, "Connected to amqp://", 2)
        # Read before the cleanup's cut: that cut is a broker lost once more, and the
        # worker's next line says so ("Server unexpectedly closed connection").
        output = worker.output()
        assert worker.running, worker.tail()
    finally:
        proxy.cut()

    assert "Traceback" not in output and "RestartFreqExceeded" not in output, worker.tail()
    assert "worker_broker_refused" not in output
    retries = [line for line in _lines(output) if "Trying again in" in line.get("event", "")]
    # One line per attempt, each naming the broker without its password.
    assert all("Connection refused" in line["event"] for line in retries), worker.tail()
    assert rabbitmq.PASSWORD + "@" not in output


def _wait_for_count(process: ManagedProcess, text: str, count: int) -> None:
    deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
    while process.output().count(text) < count:
        assert process.poll() is None, process.tail()
        assert time.monotonic() < deadline, f"{text!r} not seen {count} times:\n{process.tail()}"
        time.sleep(0.1)


# The worker's Celery app as `payorch worker` builds it, with Celery's reconnect cut from
# 100 attempts (about 47 minutes) to two, so that giving up is seen in a test.
_GIVING_UP_WORKER = """
import sys
from orchestrator.broker import create_celery_app
from orchestrator.cli.process_setup import log_celery_as_json
from orchestrator.cli.worker.command import run_celery_worker
from orchestrator.logging import configure_logging
from orchestrator.settings import Settings

settings = Settings()
configure_logging(settings)
app = create_celery_app(settings)
app.conf.broker_connection_max_retries = 2
log_celery_as_json(settings, "INFO")
sys.exit(run_celery_worker(app, [
    "--quiet", "worker", "--pool=solo", "--loglevel=INFO", "--without-gossip",
    "--without-mingle",
]))
"""


def test_a_worker_whose_reconnect_gives_up_says_it_in_one_line_and_exits_69(
    migrated_database: str, make_broker_url: Callable[[], str], processes: ProcessManager
) -> None:
    vhost = make_broker_url().rsplit("/", 1)[1]
    proxy = _Proxy(free_port())
    proxy.start()
    broker_url = f"amqp://{rabbitmq.USER}:{rabbitmq.PASSWORD}@{rabbitmq.HOST}:{proxy.port}/{vhost}"
    try:
        worker = processes.start(
            [sys.executable, "-c", _GIVING_UP_WORKER],
            name="giving-up-worker",
            env=payorch_environment(migrated_database, PAYORCH_BROKER_URL=broker_url),
        )
        wait_for_output(worker, " ready.", timeout=EXIT_TIMEOUT_SECONDS)
        proxy.cut()  # and never back
        status = worker.wait(timeout=EXIT_TIMEOUT_SECONDS)
    finally:
        proxy.cut()

    output = worker.output()
    assert status == EX_UNAVAILABLE, worker.tail()
    assert "Traceback" not in output and "Unrecoverable error" not in output, worker.tail()
    [lost] = [line for line in _lines(output) if line.get("event") == "worker_broker_lost"]
    assert "Connection refused" in lost["cause"] and lost["attempts"] == 2
    assert lost["broker"] == broker_url.replace(f":{rabbitmq.PASSWORD}@", ":***@")
    assert "PAYORCH_BROKER_URL" in lost["check"]
