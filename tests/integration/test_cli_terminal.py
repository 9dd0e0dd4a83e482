"""The CLI as a person sees it: a real pseudo-terminal of 80 columns (pexpect), on SQLite.

* ``clients create`` prints the new API key whole, alone on its own line (it is shown once:
  a key cut by a table in a narrow terminal is a key lost);
* list commands never cut an id with an ellipsis: extras are hidden at 80 columns, and
  ``--wide`` shows them whole;
* ``leases list`` shows every unfinished payment by default, and a deferred one (waiting
  for a stored retry time, nobody working on it) is "deferred", never "active";
* ``payorch api`` says, in one log line, where it listens.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pexpect
import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, Role
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.takeover import Actor
from orchestrator.ops.commands import take_over_payment
from orchestrator.services.api_keys import authenticate, create_client
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.seeds import accept, force, new_merchant
from tests.integration.hardening_helpers import sqlite_url
from tests.support.processes import free_port, payorch_command, process_environment

COLUMNS = 80
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_API_KEY = re.compile(r"^pok_[A-Za-z0-9_-]+$")


@dataclass
class Cli:
    container: Container
    env: dict[str, str]
    merchant: ApiClient


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    url = sqlite_url(tmp_path_factory.mktemp("terminal"))
    container = build_container(url)
    env = process_environment(
        {
            "PAYORCH_ENV": "test",
            "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
            "PAYORCH_DATABASE_URL": url,
            "PAYORCH_LOG_LEVEL": "WARNING",
            "PAYORCH_OPERATOR": "terminal-test",
            "TERM": "xterm-256color",
        }
    )
    for variable in ("COLUMNS", "LINES", "NO_COLOR"):  # the terminal decides, not these
        env.pop(variable, None)
    try:
        yield Cli(container, env, new_merchant(container, "terminal-merchant"))
    finally:
        container.close()


def in_terminal(cli: Cli, *args: str) -> list[str]:
    """Run ``payorch ARGS`` in an 80x24 pseudo-terminal; its screen lines, without colour."""
    command = payorch_command(*args)
    child = pexpect.spawn(
        command[0], command[1:], env=cli.env, dimensions=(24, COLUMNS), encoding="utf-8"
    )
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 0, child.before
    text = _ANSI.sub("", child.before or "")
    return [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]


def one_row_table(lines: list[str]) -> dict[str, str]:
    """The cells of a one-row rich table by column name, folded pieces joined back.

    Header lines are drawn with "┃", body lines with "│"; a folded cell continues on the
    next line in the same column, so joining a column's pieces gives the whole cell
    (without the spaces at which a cell was wrapped).
    """

    def columns(marker: str) -> list[str]:
        rows = [line.split(marker)[1:-1] for line in lines if line.startswith(marker)]
        assert rows, f"no {marker!r} lines in {lines}"
        return ["".join(row[i].strip() for row in rows) for i in range(len(rows[0]))]

    return dict(zip(columns("┃"), columns("│"), strict=True))


def test_a_new_api_key_is_printed_whole_on_its_own_line(cli: Cli) -> None:
    lines = in_terminal(cli, "clients", "create", "a-merchant-with-a-rather-long-name")

    keys = [line for line in lines if _API_KEY.match(line)]
    assert len(keys) == 1, lines
    assert "…" not in "".join(lines)
    client = authenticate(cli.container.lookup_uow, keys[0])  # whole: it authenticates
    assert client is not None and client.name == "a-merchant-with-a-rather-long-name"
    assert any(client.id in line for line in lines), lines


def test_client_ids_fold_instead_of_being_cut(cli: Cli, tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    container = build_container(url)
    try:
        only = create_client(container.uow, "only-client", Role.OPS).client
    finally:
        container.close()
    lines = in_terminal(
        Cli(cli.container, {**cli.env, "PAYORCH_DATABASE_URL": url}, cli.merchant),
        "clients",
        "list",
    )
    assert "…" not in "".join(lines)
    assert one_row_table(lines)["id"] == only.id


def test_leases_list_shows_every_unfinished_payment_and_calls_deferred_ones_deferred(
    cli: Cli,
) -> None:
    active = accept(cli.container, cli.merchant, "terminal-active")
    deferred = accept(cli.container, cli.merchant, "terminal-deferred")
    expired = accept(cli.container, cli.merchant, "terminal-expired")
    parked = accept(cli.container, cli.merchant, "terminal-parked")
    finished = accept(cli.container, cli.merchant, "terminal-finished")
    with cli.container.uow() as uow:
        now = uow.now()
    # Deferred: the worker released its lease and stored when to retry (locked_until =
    # next_attempt_at, both ahead): nobody holds it.
    later = now + timedelta(minutes=10)
    force(cli.container, deferred.id, next_attempt_at=later, locked_until=later, lease_owner=None)
    force(cli.container, expired.id, locked_until=now - timedelta(seconds=5))
    force(cli.container, parked.id, status=PaymentStatus.NEEDS_ATTENTION.value)
    force(cli.container, finished.id, status=PaymentStatus.SUCCEEDED.value, completed_at=now)

    result = subprocess.run(
        payorch_command("leases", "list", "--json"),
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    assert listing["state"] == "unfinished"
    listed = {lease["payment_id"] for lease in listing["data"]}
    assert {active.id, deferred.id, expired.id, parked.id} <= listed
    assert finished.id not in listed

    by_state = {}
    for state in ("active", "deferred", "expired", "needs_attention"):
        data = subprocess.run(
            payorch_command("leases", "list", "--state", state, "--json"),
            env=cli.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        by_state[state] = {lease["payment_id"] for lease in json.loads(data.stdout)["data"]}
    assert deferred.id in by_state["deferred"]
    assert deferred.id not in by_state["active"]
    assert active.id in by_state["active"]
    assert expired.id in by_state["expired"]
    assert parked.id in by_state["needs_attention"]

    lines = in_terminal(cli, "leases", "list", "--state", "deferred")
    assert "…" not in "".join(lines)
    cells = one_row_table(lines)
    assert cells["payment_id"] == deferred.id
    assert cells["lease"] == "deferred"


def test_audit_ids_are_whole_at_80_columns_and_wide_shows_the_rest(cli: Cli) -> None:
    record = accept(cli.container, cli.merchant, "terminal-audited")
    reason = "a reason long enough to need folding in a narrow terminal window"
    action = take_over_payment(
        cli.container.uow,
        cli.container.publisher,
        cli.container.settings,
        Actor.operator("cli:terminal-test", "terminal-test"),
        record.id,
        reason=reason,
        force=True,
    )
    lines = in_terminal(cli, "audit", "list", "--payment-id", record.id)
    assert "…" not in "".join(lines)
    cells = one_row_table(lines)
    assert cells["payment_id"] == record.id
    assert cells["action"] == "takeover"
    assert "reason" not in cells and "--wide" in "".join(lines)  # hidden, and said so

    wide = one_row_table(in_terminal(cli, "audit", "list", "--payment-id", record.id, "--wide"))
    assert wide["payment_id"] == record.id
    assert wide["id"] == str(action.audit.id)
    assert wide["reason"] == reason


def test_the_api_logs_one_line_with_the_address_it_listens_on(cli: Cli) -> None:
    with subprocess.Popen(
        payorch_command("api", "--host", "127.0.0.1", "--port", "0"),
        env={**cli.env, "PAYORCH_LOG_LEVEL": "INFO"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stderr is not None
            deadline = time.monotonic() + 60
            line = ""
            while "api_listening" not in line:
                assert time.monotonic() < deadline, "no api_listening line"
                line = process.stderr.readline()
                assert line or process.poll() is None, "the API exited"
            url = json.loads(line)["url"]
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
            assert not url.endswith(":0")  # the port it really bound
            deadline = time.monotonic() + 60
            while True:
                try:
                    response = httpx.get(f"{url}/healthz", trust_env=False, timeout=5)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert response.status_code == 200
            # Stopped as a supervisor stops it: one stop line, then the signal's exit.
            process.terminate()
            _, rest = process.communicate(timeout=30)
            stops = [
                json.loads(line)
                for line in rest.splitlines()
                if line.startswith("{") and json.loads(line)["event"] == "api_stopped"
            ]
            assert [stop["signal"] for stop in stops] == ["SIGTERM"], rest
            assert process.returncode == -signal.SIGTERM
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


def test_the_apis_metrics_are_served_on_their_own_port_and_not_on_the_apis(cli: Cli) -> None:
    with subprocess.Popen(
        payorch_command("api", "--port", "0", "--metrics-port", str(free_port())),
        env={**cli.env, "PAYORCH_LOG_LEVEL": "INFO"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stderr is not None
            urls: dict[str, str] = {}
            deadline = time.monotonic() + 60
            while len(urls) < 2:
                assert time.monotonic() < deadline, f"not both start-up lines: {urls}"
                line = process.stderr.readline()
                assert line or process.poll() is None, "the API exited"
                if line.startswith("{"):
                    event = json.loads(line)
                    if event.get("event") in ("api_listening", "api_metrics_listening"):
                        urls[event["event"]] = event["url"]
            metrics_url = urls["api_metrics_listening"]
            scraped = httpx.get(metrics_url, trust_env=False, timeout=10)
            assert scraped.status_code == 200
            assert 'payorch_payment_records{status="processing"}' in scraped.text
            assert "payorch_http_requests_total" in scraped.text
            deadline = time.monotonic() + 60
            while True:
                try:
                    on_api = httpx.get(
                        f"{urls['api_listening']}/metrics", trust_env=False, timeout=5
                    )
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert on_api.status_code == 404
        finally:
            process.terminate()
            process.wait(timeout=30)
