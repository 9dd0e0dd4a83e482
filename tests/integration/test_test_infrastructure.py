"""The test infrastructure itself: per-run databases and vhosts, outages, processes.

The outage tests really stop a PostgreSQL cluster and a RabbitMQ node, the session's
private ones (``service_control``), and prove that the machine's shared servers stay up
meanwhile and that the private ones come back.
"""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import kombu
import pytest
import sqlalchemy as sa

from tests.support import postgres, rabbitmq
from tests.support.locking import LOCK_PATH, SERVICE_LOCK, ServiceLock
from tests.support.plugin import DatabaseFactory
from tests.support.private_servers import OWNER_FILE, ROOT, reap_dead_sessions
from tests.support.processes import (
    ManagedProcess,
    ProcessExited,
    ProcessManager,
    free_port,
    payorch_command,
    wait_for_http,
    wait_for_port,
)
from tests.support.services import PrivateServices, ServiceControl


def _user_tables(url: str) -> list[str]:
    with postgres.connection_to(url) as connection:
        rows = connection.execute(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    return [row[0] for row in rows]


def _amqp_round_trip(url: str) -> object:
    with kombu.Connection(url, connect_timeout=5) as connection:
        queue = connection.SimpleQueue(
            f"infra-check-{os.getpid()}",
            serializer="json",
            queue_opts={"durable": False, "auto_delete": True},  # gone with its consumer
        )
        try:
            queue.put({"hello": "broker"})
            message = queue.get(timeout=5)
            message.ack()
            return message.payload
        finally:
            queue.close()


# PostgreSQL ---------------------------------------------------------------------------------


def test_per_run_database_is_its_own_usable_database(postgres_url: str) -> None:
    name = postgres_url.rsplit("/", 1)[-1]
    assert postgres_url.startswith("postgresql+psycopg://postgres@127.0.0.1:5432/")
    assert name.startswith("payorch_test_")
    assert name != postgres.ADMIN_DATABASE

    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            assert connection.scalar(sa.text("SELECT current_database()")) == name
            # A temporary table: usable, and leaves the database as the consumer expects it.
            connection.execute(sa.text("CREATE TEMPORARY TABLE scratch (value int)"))
            connection.execute(sa.text("INSERT INTO scratch VALUES (42)"))
            assert connection.scalar(sa.text("SELECT value FROM scratch")) == 42
    finally:
        engine.dispose()


def test_made_databases_are_empty_and_distinct(
    make_postgres_database: DatabaseFactory, postgres_url: str
) -> None:
    first, second = make_postgres_database(), make_postgres_database()

    assert len({first, second, postgres_url}) == 3
    assert _user_tables(first) == []
    assert _user_tables(second) == []


def test_migrations_run_on_a_made_database(make_postgres_database: DatabaseFactory) -> None:
    from orchestrator.db.migrate import upgrade

    url = make_postgres_database()
    upgrade(url)

    assert "public.payments" in _user_tables(url)


def test_a_database_with_open_connections_is_still_dropped(postgres_server: None) -> None:
    url = postgres.create_database()
    name = url.rsplit("/", 1)[-1]
    with postgres.connection_to(url) as leftover:  # like a worker the test could not stop
        leftover.execute("SELECT 1")
        postgres.drop_database(name)

    with postgres.connection_to(postgres.ADMIN_DATABASE) as admin:
        remaining = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        assert remaining.fetchone() is None


def test_a_postgres_outage_stops_the_private_cluster_never_the_shared_one(
    service_control: ServiceControl, postgres_server: None
) -> None:
    url = service_control.make_database()
    port = int(url.split("@127.0.0.1:", 1)[1].split("/", 1)[0])
    assert port != postgres.PORT
    engine = sa.create_engine(url, pool_pre_ping=True)
    try:
        with service_control.postgres_stopped():
            with pytest.raises(sa.exc.OperationalError), engine.connect():
                pass
            assert postgres.probe_postgres().ok  # the shared server did not notice
        with engine.connect() as connection:  # the private one is back, data intact
            assert connection.scalar(sa.text("SELECT current_database()")) == url.rsplit("/")[-1]
    finally:
        engine.dispose()


def test_postgres_outage_ends_even_when_the_test_body_fails(
    service_control: ServiceControl, private_services: PrivateServices
) -> None:
    def outage_with_a_failing_body() -> None:
        with service_control.postgres_stopped():
            assert not private_services.postgres.is_ready()
            raise RuntimeError("body failed")

    with pytest.raises(RuntimeError, match="body failed"):
        outage_with_a_failing_body()

    assert private_services.postgres.is_ready()


def test_trust_auth_goes_first_in_pg_hba_and_is_added_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The path a freshly installed cluster takes; this machine's cluster is left alone.
    cluster = postgres.Cluster("15", "main", 5432, online=True, config_root=tmp_path)
    cluster.config_dir.mkdir(parents=True)
    hba = cluster.config_dir / "pg_hba.conf"
    hba.write_text("host    all    all    127.0.0.1/32    scram-sha-256\n")
    reloads: list[tuple[str, ...]] = []
    monkeypatch.setattr(
        postgres, "_pg_ctlcluster", lambda _cluster, *action: reloads.append(action)
    )

    assert postgres.configure_trust_auth(cluster) is True
    assert postgres.configure_trust_auth(cluster) is False

    rules = [line.split() for line in hba.read_text().splitlines() if line and line[0] != "#"]
    assert rules == [
        ["host", "all", "all", "127.0.0.1/32", "trust"],
        ["host", "all", "all", "127.0.0.1/32", "scram-sha-256"],
    ]
    assert reloads == [("reload",)]


# RabbitMQ -----------------------------------------------------------------------------------


def test_per_run_vhost_exists_and_accepts_amqp(broker_url: str, broker_vhost: str) -> None:
    assert broker_url == f"amqp://guest:guest@127.0.0.1:5672/{broker_vhost}"
    assert broker_vhost != "/"
    assert broker_vhost in rabbitmq.list_vhosts()

    assert _amqp_round_trip(broker_url) == {"hello": "broker"}


@pytest.mark.parametrize("mode", ["app", "node"])
def test_a_broker_outage_stops_the_private_node_never_the_shared_one(
    service_control: ServiceControl,
    private_services: PrivateServices,
    broker_url: str,
    mode: str,
) -> None:
    private_url = service_control.make_broker_url()
    assert f":{rabbitmq.PORT}/" not in private_url
    assert _amqp_round_trip(private_url) == {"hello": "broker"}

    with service_control.broker_stopped(mode):
        assert not private_services.rabbitmq.is_ready()
        assert private_services.rabbitmq.node_running() is (mode == "app")
        assert rabbitmq.probe_rabbitmq().ok  # the shared broker did not notice
        assert _amqp_round_trip(broker_url) == {"hello": "broker"}

    assert _amqp_round_trip(private_url) == {"hello": "broker"}  # vhosts are durable


def test_broker_restart_and_outage_leave_it_running(service_control: ServiceControl) -> None:
    private_url = service_control.make_broker_url()
    service_control.restart_broker()
    assert _amqp_round_trip(private_url) == {"hello": "broker"}

    def outage_with_a_failing_body() -> None:
        with service_control.broker_stopped():
            raise RuntimeError("body failed")

    with pytest.raises(RuntimeError, match="body failed"):
        outage_with_a_failing_body()

    assert _amqp_round_trip(private_url) == {"hello": "broker"}


def test_private_servers_of_a_dead_session_are_stopped_and_removed(tmp_path: Path) -> None:
    # A session killed before its teardown leaves its servers running: the next session's
    # reaper stops them (by the pid files in their directory) and nothing else.  The reaper
    # runs on a root of this test's own: in the shared ROOT, a sibling xdist worker's (or
    # another run's) reaper could take the dead directory first and this one not report it.
    root = tmp_path / "servers"
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = subprocess.Popen(["sleep", "600"], start_new_session=True)
    alive_owner_dir = root / f"rabbitmq-{os.getpid()}-reaper-test-live"
    dead_owner_dir = root / f"rabbitmq-{dead.pid}-reaper-test-dead"
    try:
        for directory, owner in ((dead_owner_dir, dead.pid), (alive_owner_dir, os.getpid())):
            directory.mkdir(parents=True)
            (directory / OWNER_FILE).write_text(str(owner))
            (directory / "node.pid").write_text(str(orphan.pid))
        reaped = reap_dead_sessions(root)

        assert dead_owner_dir.name in reaped
        assert alive_owner_dir.name not in reaped
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert not dead_owner_dir.exists()
        assert alive_owner_dir.exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
    # What the sessions themselves reap (the private_services fixture) is the shared root.
    assert inspect.signature(reap_dead_sessions).parameters["root"].default == ROOT


def test_service_lock_is_reentrant_here_and_exclusive_across_processes(tmp_path: Path) -> None:
    # The lock's own file, not the machine-wide one: other test sessions on this machine hold
    # that one while they start a private server (tens of seconds on a busy machine), and
    # what is tested here is the lock's behaviour, not who else is running.
    lock_path = tmp_path / "services.lock"
    lock = ServiceLock(lock_path)
    other_process_tries = textwrap.dedent(
        f"""
        import fcntl, sys
        with open({str(lock_path)!r}, "ab") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                sys.exit(7)
        """
    )
    with lock.held(timeout=60), lock.held(timeout=1):
        blocked = subprocess.run([sys.executable, "-c", other_process_tries], check=False)
    assert blocked.returncode == 7

    free = subprocess.run([sys.executable, "-c", other_process_tries], check=False)
    assert free.returncode == 0


def test_the_machine_wide_service_lock_lives_in_the_shared_temp_directory() -> None:
    # Every session on the machine must agree on the path, or the lock serialises nothing.
    assert Path(tempfile.gettempdir()) / "payorch-test-services.lock" == LOCK_PATH
    assert SERVICE_LOCK.path == LOCK_PATH


# Processes ----------------------------------------------------------------------------------


def _alive(pid: int, settle: float = 5.0) -> bool:
    """Still running after up to ``settle`` seconds (a SIGKILLed process takes a moment to go;
    a zombie, which lingers until init reaps an orphan, counts as gone)."""
    deadline = time.monotonic() + settle
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def _wait_for_output(process: ManagedProcess, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in process.output():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in output of {process}:\n{process.output()}")
        time.sleep(0.02)
    return process.output()


def _http_server(processes: ProcessManager) -> tuple[ManagedProcess, str]:
    port = free_port()
    server = processes.start(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], name="http"
    )
    wait_for_port("127.0.0.1", port, timeout=20, process=server)
    return server, f"http://127.0.0.1:{port}/"


def test_process_output_is_captured_and_stop_is_graceful(processes: ProcessManager) -> None:
    server, url = _http_server(processes)

    response = wait_for_http(url, timeout=20, process=server)

    assert response.status_code == 200
    assert _wait_for_output(server, '"GET / HTTP/1.1" 200')
    assert server.log_path.parent == processes.log_dir
    assert server.stop(grace=5) == -signal.SIGTERM
    assert not server.running


def test_paused_process_answers_only_after_resume(processes: ProcessManager) -> None:
    server, url = _http_server(processes)
    wait_for_http(url, timeout=20, process=server)

    server.pause()
    with pytest.raises(httpx.TimeoutException):
        httpx.get(url, timeout=1.0, trust_env=False)
    server.resume()

    assert wait_for_http(url, timeout=10, process=server).status_code == 200


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace_period(
    processes: ProcessManager,
) -> None:
    stubborn = processes.start(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready'); time.sleep(600)",
        ],
        name="stubborn",
    )
    _wait_for_output(stubborn, "ready")

    started = time.monotonic()
    assert stubborn.stop(grace=1.0) == -signal.SIGKILL
    assert time.monotonic() - started < 5


_PARENT_WITH_CHILD = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    print("child", child.pid, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exits without stopping its child
    time.sleep(600)
    """
)


def _child_pid(parent: ManagedProcess) -> int:
    line = _wait_for_output(parent, "child ").split("child ", 1)[1]
    return int(line.split()[0])


def test_stop_also_ends_children_left_by_the_process(processes: ProcessManager) -> None:
    parent = processes.start([sys.executable, "-c", _PARENT_WITH_CHILD], name="parent")
    child = _child_pid(parent)

    assert parent.stop(grace=5) == 0

    assert not _alive(child)


def test_killing_only_the_leader_orphans_children_until_cleanup(
    processes: ProcessManager,
) -> None:
    parent = processes.start([sys.executable, "-c", _PARENT_WITH_CHILD], name="parent")
    child = _child_pid(parent)

    assert parent.kill(group=False) == -signal.SIGKILL
    assert _alive(child, settle=0)  # a crashed Celery parent can leave its pool processes behind

    processes.stop_all()
    assert not _alive(child)


def test_cleanup_stops_running_and_paused_processes(tmp_path: Path) -> None:
    manager = ProcessManager(tmp_path)
    sleeper = manager.start([sys.executable, "-c", "import time; time.sleep(600)"])
    paused = manager.start([sys.executable, "-c", "import time; time.sleep(600)"])
    paused.pause()

    manager.stop_all(grace=5)

    assert not sleeper.running
    assert not paused.running
    assert not _alive(sleeper.pid)
    assert not _alive(paused.pid)


def test_wait_for_port_fails_fast_with_the_output_of_a_dead_process(
    processes: ProcessManager,
) -> None:
    doomed = processes.start(
        [sys.executable, "-c", "print('cannot bind: boom'); raise SystemExit(3)"], name="doomed"
    )
    started = time.monotonic()

    with pytest.raises(ProcessExited, match="cannot bind: boom"):
        wait_for_port("127.0.0.1", free_port(), timeout=30, process=doomed)

    assert time.monotonic() - started < 10
    assert doomed.returncode == 3


def test_processes_do_not_inherit_the_callers_payorch_settings(
    processes: ProcessManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_DATABASE_URL", "postgresql+psycopg://someone@prod/db")
    printer = processes.start(
        [
            sys.executable,
            "-c",
            "import os; print(os.environ.get('PAYORCH_DATABASE_URL'), "
            "os.environ.get('PAYORCH_ENV'))",
        ],
        env={"PAYORCH_ENV": "test"},
    )

    assert printer.wait(timeout=20) == 0
    assert printer.output().strip() == "None test"


def test_payorch_command_runs_the_cli_under_this_interpreter(
    processes: ProcessManager,
) -> None:
    pytest.importorskip("orchestrator.cli.main")
    assert payorch_command("--help")[0] == sys.executable

    cli = processes.payorch("--help")

    assert cli.wait(timeout=60) == 0, cli.output()
    assert "api" in cli.output()


def test_a_session_drops_its_databases_and_vhosts_after_its_last_test(
    postgres_server: None, rabbitmq_server: None, tmp_path: Path
) -> None:
    """A whole pytest session (run here as a child) leaves none of its databases or vhosts
    behind; the drops happen at session finish, after the last test's teardown."""
    names = tmp_path / "made.txt"
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["tests.support.plugin", "tests.harness.fixtures"]\n'
    )
    (tmp_path / "test_makes.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            def test_makes(make_postgres_database, make_broker_url):
                made = [make_postgres_database() for _ in range(3)] + [make_broker_url()]
                Path({str(names)!r}).write_text("\\n".join(made))
            """
        )
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "timeout=300",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    *database_urls, broker = names.read_text().splitlines()
    with postgres.connection_to(postgres.ADMIN_DATABASE) as admin:
        for url in database_urls:
            name = url.rsplit("/", 1)[-1]
            found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            assert found.fetchone() is None, f"{name} was left behind"
    assert broker.rsplit("/", 1)[-1] not in rabbitmq.list_vhosts()
