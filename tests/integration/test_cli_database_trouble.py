"""A database that cannot be used is one line and exit status 69 from every ``payorch``
command (issue 44, decision 0090): a database that does not exist on the real server, a
port nothing listens on, a database never migrated.  ``payorch status`` keeps 1 for
"unhealthy", so a check script can tell the two apart; ``payorch api`` refuses to start.

Each command runs as a real subprocess: the point is what a person at a terminal sees.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from orchestrator.cli.exit_codes import EX_UNAVAILABLE, EXIT_UNHEALTHY
from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force
from tests.integration.hardening_helpers import payorch_environment
from tests.support.processes import free_port, payorch_command, process_environment

pytestmark = pytest.mark.postgres

PASSWORD = "hunter2-do-not-print"
# The commands issue 44 names, and one more reader; each must fail the same way.
COMMANDS = [
    ["status"],
    ["payments", "list"],
    ["clients", "create", "shop"],
    ["db", "upgrade"],
    ["leases", "list"],
]


def _with(url: str, **parts: object) -> str:
    return sa.make_url(url).set(password=PASSWORD, **parts).render_as_string(hide_password=False)


@pytest.fixture
def missing_database_url(make_postgres_database: Callable[[], str]) -> str:
    """The real server, a database name nobody created."""
    return _with(make_postgres_database(), database=f"payorch_missing_{secrets.token_hex(6)}")


@pytest.fixture
def closed_port_url(make_postgres_database: Callable[[], str]) -> str:
    """A port nothing listens on (it was free a moment ago)."""
    return _with(make_postgres_database(), port=free_port())


def _run(args: list[str], database_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        payorch_command(*args),
        env=process_environment(payorch_environment(database_url)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _run_all(database_url: str) -> list[subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        return list(pool.map(lambda args: _run(args, database_url), COMMANDS))


def _problems(result: subprocess.CompletedProcess[str], database_url: str, cause: str) -> list[str]:
    shown = sa.make_url(database_url).render_as_string(hide_password=True)
    problems = []
    if result.returncode != EX_UNAVAILABLE:
        problems.append(f"exit {result.returncode}, not {EX_UNAVAILABLE}")
    output = result.stdout + result.stderr
    if "Traceback" in output or "sqlalchemy" in output.lower():
        problems.append("a traceback or SQLAlchemy's text")
    if PASSWORD in output:
        problems.append("the password")
    lines = result.stderr.splitlines()
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, not 1")
    if f"cannot use the database at {shown}: " not in result.stderr:
        problems.append(f"the URL {shown} (password hidden) not named")
    if cause not in result.stderr:
        problems.append(f"the cause {cause!r} not said")
    if "PAYORCH_DATABASE_URL" not in result.stderr:
        problems.append("nothing to check named")
    return problems


def _assert_all_fail_clearly(database_url: str, cause: str) -> None:
    results = _run_all(database_url)
    failures = [
        f"payorch {' '.join(args)}: {', '.join(problems)}\n{(r.stdout + r.stderr)[-3000:]}"
        for args, r in zip(COMMANDS, results, strict=True)
        if (problems := _problems(r, database_url, cause))
    ]
    assert not failures, "\n\n".join(failures)


def test_a_database_that_does_not_exist_is_one_line_and_exit_69(missing_database_url: str) -> None:
    name = sa.make_url(missing_database_url).database
    _assert_all_fail_clearly(missing_database_url, f'database "{name}" does not exist')


def test_a_closed_port_is_one_line_and_exit_69(closed_port_url: str) -> None:
    _assert_all_fail_clearly(closed_port_url, "Connection refused")


def test_a_database_never_migrated_says_to_run_db_upgrade(
    make_postgres_database: Callable[[], str],
) -> None:
    empty = make_postgres_database()  # exists, no tables
    result = _run(["status"], empty)

    assert result.returncode == EX_UNAVAILABLE, result.stderr
    assert "run 'payorch db upgrade'" in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_status_tells_unhealthy_from_unreachable(
    make_postgres_database: Callable[[], str], missing_database_url: str
) -> None:
    url = make_postgres_database()
    container = build_container(url)  # migrated
    try:
        merchant = create_client(container.uow, "shop", Role.MERCHANT).client
        parked = accept(container, merchant, "parked-1")
        force(container, parked.id, status="needs_attention")
    finally:
        container.close()

    unhealthy = _run(["status"], url)
    unreachable = _run(["status"], missing_database_url)

    assert unhealthy.returncode == EXIT_UNHEALTHY, unhealthy.stdout + unhealthy.stderr
    assert "NEEDS A PERSON" in unhealthy.stdout
    assert unreachable.returncode == EX_UNAVAILABLE, unreachable.stderr
    assert EXIT_UNHEALTHY != EX_UNAVAILABLE


def test_the_api_refuses_to_start_naming_the_cause(missing_database_url: str) -> None:
    result = subprocess.run(
        payorch_command("api", "--port", str(free_port())),
        env=process_environment(payorch_environment(missing_database_url)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == EX_UNAVAILABLE, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "api_listening" not in output
    assert "Traceback" not in output and PASSWORD not in output
    [line] = [json.loads(x) for x in output.splitlines() if "api_database_unusable" in x]
    name = sa.make_url(missing_database_url).database
    assert f'database "{name}" does not exist' in line["cause"]
    assert line["database"] == sa.make_url(missing_database_url).render_as_string(
        hide_password=True
    )
    assert "PAYORCH_DATABASE_URL" in line["check"]
