"""The pytest plugin: real-service fixtures and process fixtures (registered by tests/conftest.py).

Nothing here is autouse.  A test that asks for ``postgres_url`` or ``broker_url`` (directly or
through another fixture) gets the ``postgres`` / ``broker`` marker at collection, and the
services are checked once per session, right after collection and only when such a test was
selected: unit and replay runs never touch a server.  Doing the check after collection rather
than inside the first test keeps a slow ``apt-get install`` out of that test's timeout.

Session fixtures::

    postgres_url            postgresql+psycopg://postgres@127.0.0.1:5432/payorch_test_<pid>_<hex>
                            an EMPTY database for this run; the consumer runs migrations
    make_postgres_database  () -> url of another empty database (dropped at session end)

Databases and vhosts are dropped in ``pytest_sessionfinish``, not in a fixture's finalizer:
session finalizers run inside the LAST test's teardown, under its 300 s timeout, and a
whole run's cleanup (hundreds of databases, each ``DROP DATABASE`` forcing a checkpoint in
PostgreSQL 15) outgrew that budget on a busy machine and failed a test that did nothing
wrong.  The drops run a few at once: concurrent drops share their checkpoints.
    broker_url              amqp://guest:guest@127.0.0.1:5672/payorch_test_<pid>_<hex>
    broker_vhost            the vhost's name
    session_processes       a ProcessManager for processes shared by a whole session

    private_services        this session's own PostgreSQL cluster and RabbitMQ node (each
                            started on first use, on free ports, destroyed at session end)

Under pytest-xdist (``make test`` runs ``-n 2``) every worker is a session of its own, as two
pytest processes side by side would be: its own pid in its resource names, its own databases,
vhosts and private servers, its own service check and reaper (which spares a sibling worker's
resources because the sibling's pid is alive), its own drops at its session finish.  The
controller runs no test and makes nothing.  A worker's terminal output goes to /dev/null, so
what it would have printed (``payorch services: …`` lines and cleanup problems) travels to the
controller in ``workeroutput`` and is shown in the controller's terminal summary.

Function fixtures (a test using ``service_control`` is marked ``outage``)::

    processes               a ProcessManager; everything it started is stopped at teardown
    service_control         ServiceControl: databases and vhosts on the private servers, and
                            stop/start/restart of those (never of the shared servers)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import postgres, rabbitmq
from tests.support.private_servers import reap_dead_sessions
from tests.support.processes import ProcessManager
from tests.support.services import PrivateServices, ServiceControl, ensure_services
from tests.support.system import Ensured

log = logging.getLogger("payorch.tests.services")

DatabaseFactory = Callable[[], str]

POSTGRES = "postgres"
BROKER = "broker"
OUTAGE = "outage"
_NEEDS = {POSTGRES: "postgres_server", BROKER: "rabbitmq_server"}
_MARKERS_BY_FIXTURE = {**{f: m for m, f in _NEEDS.items()}, "service_control": OUTAGE}

# At session end, how long to wait for a service another session has taken down for an
# outage test before giving up on dropping our database or vhost (the next run's reaper
# removes it then).  Outage windows are seconds long.
CLEANUP_WAIT_SECONDS = 60.0

# Drops at once at session end: each DROP DATABASE waits for a checkpoint, and concurrent
# drops are served by the same one (12 drops took 8 s one by one, 1.6 s eight at a time).
CLEANUP_CONCURRENCY = 8


@dataclass
class _SessionServices:
    """What this session found and did; reported in the terminal summary."""

    outcome: dict[str, Ensured | BaseException] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # Made by this session, removed by ``pytest_sessionfinish`` (see the module docstring).
    databases: list[str] = field(default_factory=list)
    vhosts: list[str] = field(default_factory=list)
    # Every ``payorch services:`` line, so an xdist worker can hand them to the controller.
    said: list[str] = field(default_factory=list)
    # In the xdist controller: what each worker said and the problems it had, by worker id.
    from_workers: list[str] = field(default_factory=list)


_state_key = pytest.StashKey[_SessionServices]()


def _state(config: pytest.Config) -> _SessionServices:
    if _state_key not in config.stash:
        config.stash[_state_key] = _SessionServices()
    return config.stash[_state_key]


def _say(config: pytest.Config, line: str) -> None:
    log.warning("%s", line)
    _state(config).said.append(line)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"payorch services: {line}")


def _ensure_once(config: pytest.Config, service: str) -> Ensured | BaseException:
    """Check (start, install) one service the first time it is needed; cache the outcome."""
    state = _state(config)
    if service not in state.outcome:
        try:
            results = ensure_services(
                want_postgres=service == POSTGRES, want_rabbitmq=service == BROKER
            )
        except Exception as exc:
            state.outcome[service] = exc
            _say(config, f"{service} unavailable: {exc}")
            return exc
        # One line per service, including an apt install done on its behalf.
        ensured = Ensured(results[-1].service, [a for r in results for a in r.actions])
        state.outcome[service] = ensured
        if ensured.changed:
            _say(config, ensured.summary())
        try:
            reaped = (
                postgres.reap_stale_databases()
                if service == POSTGRES
                else rabbitmq.reap_stale_vhosts()
            )
        except Exception as exc:  # housekeeping only: never fail the session for it
            state.problems.append(f"could not remove leftovers of dead test runs: {exc}")
        else:
            if reaped:
                _say(config, f"removed leftovers of dead test runs: {', '.join(reaped)}")
    return state.outcome[service]


def _require(config: pytest.Config, service: str) -> None:
    outcome = _ensure_once(config, service)
    if isinstance(outcome, BaseException):
        # Every test that needs the service errors with the original cause, without retrying.
        pytest.fail(f"{service} is not available for the tests: {outcome}", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{OUTAGE}: stops PostgreSQL or RabbitMQ on purpose (service_control), only "
        "servers the session started for it (the shared ones are never stopped)",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        for fixture, marker in _MARKERS_BY_FIXTURE.items():
            if fixture in names:
                item.add_marker(marker)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    for marker in _NEEDS:
        if any(item.get_closest_marker(marker) for item in session.items):
            _ensure_once(session.config, marker)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = _state(terminalreporter.config)
    actions = [
        outcome.summary()
        for outcome in state.outcome.values()
        if isinstance(outcome, Ensured) and outcome.changed
    ]
    if not (actions or state.problems or state.from_workers):
        return
    terminalreporter.section("payorch test services")
    for line in [*actions, *state.problems, *state.from_workers]:
        terminalreporter.write_line(line)


_WORKER_REPORT = "payorch_services"


def _hand_report_to_controller(config: pytest.Config) -> None:
    """In an xdist worker (whose terminal is /dev/null): what it said and what went wrong."""
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        state = _state(config)
        workeroutput[_WORKER_REPORT] = [*state.said, *state.problems]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent under -p no:xdist
def pytest_testnodedown(node: object, error: object) -> None:
    """In the xdist controller: keep a finished worker's lines for the terminal summary."""
    workeroutput = getattr(node, "workeroutput", None) or {}
    lines = workeroutput.get(_WORKER_REPORT, [])
    if lines:
        worker = node.gateway.id  # type: ignore[attr-defined]
        config: pytest.Config = node.config  # type: ignore[attr-defined]
        _state(config).from_workers.extend(f"{worker}: {line}" for line in lines)


# Services -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server(pytestconfig: pytest.Config) -> None:
    """PostgreSQL answers on 127.0.0.1:5432 (started or installed when it was not)."""
    _require(pytestconfig, POSTGRES)


@pytest.fixture(scope="session")
def rabbitmq_server(pytestconfig: pytest.Config) -> None:
    """RabbitMQ answers AMQP on 127.0.0.1:5672 (started or installed when it was not)."""
    _require(pytestconfig, BROKER)


@pytest.fixture(scope="session")
def make_postgres_database(postgres_server: None, pytestconfig: pytest.Config) -> DatabaseFactory:
    """Create fresh, empty databases on demand; all are dropped when the session ends."""
    state = _state(pytestconfig)

    def make() -> str:
        url = postgres.create_database()
        state.databases.append(url.rsplit("/", 1)[-1])
        return url

    return make


@pytest.fixture(scope="session")
def postgres_url(make_postgres_database: DatabaseFactory) -> str:
    """This run's own empty database (not ``postgres``); run migrations on it yourself."""
    return make_postgres_database()


@pytest.fixture(scope="session")
def broker_vhost(rabbitmq_server: None, pytestconfig: pytest.Config) -> str:
    return new_session_vhost(pytestconfig)


def new_session_vhost(config: pytest.Config) -> str:
    """A fresh vhost of this session, deleted when the session ends."""
    vhost = rabbitmq.create_vhost()
    _state(config).vhosts.append(vhost)
    return vhost


# trylast: after the runner tears down what a stopped (-x) session left set up.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop this session's databases and vhosts, after every fixture is torn down (so no
    worker of a test is still using them) and outside every test's timeout."""
    state = _state(session.config)
    if state.databases:
        _drop_databases(state)
    if state.vhosts:
        _delete_vhosts(state)
    # Inside xdist's own sessionfinish wrapper, which sends workeroutput after this returns.
    _hand_report_to_controller(session.config)


def _drop_databases(state: _SessionServices) -> None:
    names, state.databases = list(reversed(state.databases)), []
    if not postgres.wait_until_ready(timeout=CLEANUP_WAIT_SECONDS).ok:
        state.problems.append(f"PostgreSQL down at session end; left {', '.join(names)}")
        return

    def drop(name: str) -> None:
        try:
            # WITH (FORCE): a worker a test forgot (or could not) stop may still be connected.
            postgres.drop_database(name)
        except Exception as exc:
            # A leftover database is harmless and the next run's reaper drops it.
            state.problems.append(f"could not drop database {name}: {exc}")

    with ThreadPoolExecutor(CLEANUP_CONCURRENCY) as pool:
        list(pool.map(drop, names))


def _delete_vhosts(state: _SessionServices) -> None:
    vhosts, state.vhosts = list(state.vhosts), []
    if not _broker_back_within(CLEANUP_WAIT_SECONDS):
        state.problems.append(f"RabbitMQ down at session end; left {', '.join(vhosts)}")
        return

    def delete(vhost: str) -> None:
        try:
            rabbitmq.delete_vhost(vhost)
        except Exception as exc:  # a leftover vhost is reaped by the next run
            state.problems.append(f"could not delete vhost {vhost}: {exc}")

    # rabbitmqctl starts an Erlang VM per call: a few at once, not eight.
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(delete, vhosts))


def _broker_back_within(timeout: float) -> bool:
    """Wait for another session's broker outage to end, without starting anything."""
    deadline = time.monotonic() + timeout
    while not rabbitmq.probe_rabbitmq().ok:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


@pytest.fixture(scope="session")
def broker_url(broker_vhost: str) -> str:
    """This run's own RabbitMQ vhost, where guest has all permissions."""
    return rabbitmq.broker_url(broker_vhost)


@pytest.fixture(scope="session")
def private_services(pytestconfig: pytest.Config) -> Iterator[PrivateServices]:
    """A PostgreSQL cluster and a RabbitMQ node of this session's own, for outage tests."""
    reaped = reap_dead_sessions()
    if reaped:
        _say(pytestconfig, f"stopped private servers of dead test runs: {', '.join(reaped)}")
    servers = PrivateServices()
    try:
        yield servers
    finally:
        servers.destroy()


@pytest.fixture
def service_control(private_services: PrivateServices) -> Iterator[ServiceControl]:
    """Outages of the private servers; whatever the test stopped runs again afterwards."""
    control = ServiceControl(private_services)
    yield control
    control.restore()


# Processes ----------------------------------------------------------------------------------

_reports_key = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    item.stash.setdefault(_reports_key, {})[report.when] = report
    return report


def _failed(item: pytest.Item) -> bool:
    return any(report.failed for report in item.stash.get(_reports_key, {}).values())


@pytest.fixture
def processes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessManager]:
    """Start real processes (``processes.payorch("worker")``); all are stopped at teardown."""
    manager = ProcessManager(tmp_path / "processes")
    try:
        yield manager
    finally:
        manager.stop_all()
        if manager.started and _failed(request.node):
            # Shown under "Captured stdout teardown" of the failed test.
            print(manager.describe())


@pytest.fixture(scope="session")
def session_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessManager]:
    """Like ``processes``, for servers shared by many tests (stopped at session end)."""
    manager = ProcessManager(tmp_path_factory.mktemp("session-processes"))
    try:
        yield manager
    finally:
        manager.stop_all()
