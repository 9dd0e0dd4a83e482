"""Log hygiene and start-up configuration checks (issue 7), on real processes.

A real stack (``payorch api``, ``payorch worker``, ``payorch sweeper`` as subprocesses on
PostgreSQL, RabbitMQ and the provider simulator) takes real traffic, error paths included
(a 422 key reuse, 400s, a 401 with a wrong key); then every log line is read:

* no idempotency key and no API key appears anywhere, in any process's log;
* the API's lines are JSON objects with ``request_id``, the authenticated ones with
  ``client_id``, and the accept/reuse lines carry ``key_hmac`` = HMAC(SECRET_KEY, key).

Every line of every process's output is exactly one JSON object (issue 17): the shutdown
notice Celery writes around logging included, and a worker with several pool processes
(or threads) logging a burst of payments at once never runs two records into one line.

Outside dev mode a missing or placeholder ``PAYORCH_SECRET_KEY`` stops ``payorch api`` and
``payorch worker`` before they start, with the message alone (no traceback) and a non-zero
exit status.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import kombu
import pytest
import sqlalchemy as sa

from devtools.simulator import start_in_thread
from orchestrator.broker import PAYMENTS_QUEUE, QUEUE_NOT_FOUND
from orchestrator.db.migrate import upgrade
from orchestrator.db.tables import payments
from orchestrator.domain.model import Role
from orchestrator.logging import key_digest
from orchestrator.services.api_keys import create_client
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.stack import running_stack
from tests.integration.hardening_helpers import BODY, payorch_environment
from tests.support.processes import (
    ManagedProcess,
    ProcessManager,
    free_port,
    payorch_command,
    process_environment,
    wait_for_http,
)

EX_CONFIG = 78


@dataclass
class Traffic:
    api: ManagedProcess
    worker: ManagedProcess
    sweeper: ManagedProcess
    keys: dict[str, str]  # what each idempotency key was used for -> the key
    api_keys: list[str]  # the merchant's, and a wrong one
    merchant_id: str

    def hmac_of(self, name: str) -> str:
        return key_digest(TEST_SECRET_KEY, self.keys[name])

    def logs(self) -> dict[str, str]:
        return {p.name: p.output() for p in (self.api, self.worker, self.sweeper)}


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def traffic(
    make_postgres_database, broker_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Traffic]:
    processes = ProcessManager(tmp_path_factory.mktemp("logging-stack"))
    database_url = make_postgres_database()
    upgrade(database_url)
    setup = build_container(database_url, migrate=False)
    merchant = create_client(setup.uow, "log-merchant", Role.MERCHANT)
    setup.close()
    run = uuid.uuid4().hex[:8]
    keys = {
        name: f"order-{name}-SECRETKEY-{run}"
        for name in ("paid", "declined", "reused", "invalid", "unauthorized", "queued", "raw")
    }
    wrong_api_key = "pok_" + uuid.uuid4().hex + "WRONGKEY"
    try:
        with start_in_thread() as simulator:
            env = payorch_environment(
                database_url,
                PAYORCH_BROKER_URL=broker_url,
                PAYORCH_STRIPE_API_BASE=simulator.url,
                PAYORCH_LOG_LEVEL="INFO",
                # A payment waiting for a worker is the sweeper's after a second: it logs.
                PAYORCH_DISPATCH_LEASE_SECONDS="1",
                PAYORCH_SWEEP_INTERVAL_SECONDS="0.5",
            )
            port = free_port()
            api = processes.payorch("api", "--port", str(port), env=env)
            base = f"http://127.0.0.1:{port}"
            wait_for_http(base + "/healthz", process=api)
            sweeper = processes.payorch("sweeper", env=env)
            good = {"Authorization": f"Bearer {merchant.api_key}"}
            with httpx.Client(base_url=base, headers=good, trust_env=False, timeout=30) as client:

                def post(key: str, body: object = BODY, **headers: str) -> httpx.Response:
                    return client.post(
                        "/v1/payments", json=body, headers={"Idempotency-Key": key, **headers}
                    )

                # Before any worker runs: its wake-up is lost (taken out of the queue), so the
                # sweeper takes it over when its lease ends.  A wake-up still queued would be
                # left alone (decision 0081): whether one is, and when, is the dispatcher's
                # timing, so the queue is emptied until the takeover happens.
                queued = post(keys["queued"])
                assert queued.status_code == 202

                def taken_over() -> bool:
                    _lose_queued_wake_ups(broker_url)
                    return _lease_token(database_url, queued.json()["id"]) > 1

                _wait_for(taken_over, sweeper)
                worker = processes.payorch("worker", "--concurrency", "2", env=env)

                paid = post(keys["paid"])
                assert paid.status_code == 202
                assert post(keys["paid"]).headers["Idempotent-Replayed"] == "true"
                assert client.get(f"/v1/payments/{paid.json()['id']}").status_code == 200
                found = client.get("/v1/payments", params={"idempotency_key": keys["paid"]})
                assert found.json()["data"][0]["id"] == paid.json()["id"]
                declined = post(
                    keys["declined"], {**BODY, "payment_method": "pm_card_chargeDeclined"}
                )
                assert declined.status_code == 202
                assert post(keys["reused"]).status_code == 202
                assert post(keys["reused"], {**BODY, "amount": 2000}).status_code == 422
                assert post(keys["invalid"], {**BODY, "amount": -1}).status_code == 400
                assert post(keys["invalid"], {**BODY, "currency": "xx"}).status_code == 400
                assert post("bad\tkey-" + keys["invalid"]).status_code == 400
                assert (
                    post(keys["unauthorized"], Authorization=f"Bearer {wrong_api_key}").status_code
                    == 401
                )
                # Not valid HTTP (a NUL in a header, which h11 refuses; it lets \x01 through
                # to the app's own 400): uvicorn refuses it and logs a warning, which must
                # be a JSON line too.
                _send_raw(port, merchant.api_key, "\x00" + keys["raw"])
                ids = [r.json()["id"] for r in (queued, paid, declined)]
                _wait_for(lambda: _all_final(database_url, ids), worker)
            processes.stop_all()  # flushes and closes every log
            yield Traffic(
                api=api,
                worker=worker,
                sweeper=sweeper,
                keys=keys,
                api_keys=[merchant.api_key, wrong_api_key],
                merchant_id=merchant.client.id,
            )
    finally:
        processes.stop_all()


def _send_raw(port: int, api_key: str, idempotency_key: str) -> None:
    request = (
        f"POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api_key}\r\n"
        f"Idempotency-Key: {idempotency_key}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        answer = sock.recv(1024)
    assert answer.startswith(b"HTTP/1.1 400 "), answer


def _lose_queued_wake_ups(broker_url: str) -> None:
    """Take every wake-up out of the payments queue, acknowledged to nobody (none, if the
    queue was never declared: a publish to it was dropped)."""
    with kombu.Connection(broker_url) as connection:
        channel = connection.channel()
        try:
            channel.queue_purge(PAYMENTS_QUEUE)
        except Exception as error:  # amqp's NotFound: nothing was ever queued
            if getattr(error, "reply_code", None) != QUEUE_NOT_FOUND:
                raise
        finally:
            with contextlib.suppress(Exception):
                channel.close()


def _wait_for(condition: Any, process: ManagedProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.running, process.tail()
        assert time.monotonic() < deadline, f"condition not met; {process.name}:\n{process.tail()}"
        time.sleep(0.2)


def _lease_token(database_url: str, payment_id: str) -> int:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(payments.c.lease_token).where(payments.c.id == payment_id)
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _all_final(database_url: str, ids: list[str]) -> bool:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            statuses = conn.execute(
                sa.select(payments.c.status).where(payments.c.id.in_(ids))
            ).scalars()
            return all(status in ("succeeded", "failed") for status in statuses)
    finally:
        engine.dispose()


def test_no_idempotency_key_or_api_key_appears_in_any_log(traffic: Traffic) -> None:
    logs = traffic.logs()
    assert all(logs.values()), {name: len(text) for name, text in logs.items()}
    for name, text in logs.items():
        for secret in [*traffic.keys.values(), *traffic.api_keys]:
            assert secret not in text, f"{secret!r} in the {name} log"
        assert "SECRETKEY" not in text, name
        assert "WRONGKEY" not in text, name
        assert "pok_" not in text, name


def test_api_log_lines_are_json_with_request_and_client_ids(traffic: Traffic) -> None:
    lines = _json_lines(traffic.api.output())
    access = [line for line in lines if line["event"] == "http_request"]
    assert len(access) >= 12
    assert all(line.get("request_id") and line.get("timestamp") for line in access)
    assert any(line["event"] == "Invalid HTTP request received." for line in lines)
    authenticated = [
        line for line in access if line["path"].startswith("/v1/") and line["status"] != 401
    ]
    assert {line["client_id"] for line in authenticated} == {traffic.merchant_id}
    [refused] = [line for line in access if line["status"] == 401]
    assert refused["client_id"] is None
    assert {line["status"] for line in access} >= {200, 202, 400, 401, 422}


def test_accept_and_reuse_lines_carry_the_key_hmac_under_the_secret_key(traffic: Traffic) -> None:
    lines = _json_lines(traffic.api.output())
    accepted = {line["key_hmac"] for line in lines if line["event"] == "payment_accepted"}
    [reuse] = [line for line in lines if line["event"] == "idempotency_key_reused"]
    assert accepted == {traffic.hmac_of(n) for n in ("queued", "paid", "declined", "reused")}
    assert reuse["key_hmac"] == traffic.hmac_of("reused")
    assert reuse["client_id"] == traffic.merchant_id and reuse["request_id"]
    # Keyed, not a plain hash: under another secret the same key has another tag.
    assert key_digest("another-secret", traffic.keys["paid"]) not in accepted


def test_worker_and_sweeper_logs_are_json_and_show_the_work(traffic: Traffic) -> None:
    worker_lines = _every_line_one_json_object(traffic.worker)
    worker_events = [line["event"] for line in worker_lines]
    assert "payment_finished" in worker_events
    # Celery's own per-task lines ("received", "succeeded in") are off at INFO: payorch's
    # lines name the payment.
    per_task = [line for line in worker_lines if line.get("logger", "").startswith("celery.")]
    assert not [line for line in per_task if " received" in line["event"]]
    assert not [line for line in per_task if " succeeded in " in line["event"]]
    # Celery's shutdown notice, which it writes around logging, is a record like the rest.
    assert "worker: Warm shutdown (MainProcess)" in worker_events
    sweeper_events = _every_line_one_json_object(traffic.sweeper)
    assert any(line["event"] == "sweep_pass" and line["taken_over"] >= 1 for line in sweeper_events)
    _every_line_one_json_object(traffic.api)


def _every_line_one_json_object(process: ManagedProcess) -> list[dict[str, Any]]:
    """Each line of the process's output as exactly one JSON object: no blank line, no
    plain text, no two records run together (json.loads refuses '{...}{...}')."""
    records = []
    for number, line in enumerate(process.output().splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            problem = f"{process.name} line {number} is not one JSON object: {line!r}"
            raise AssertionError(problem) from error
        assert isinstance(record, dict), (process.name, number, line)
        records.append(record)
    return records


# Many pool processes logging at once (issue 17) ---------------------------------------------

BURST = 60


@pytest.mark.parametrize(("pool", "concurrency"), [("prefork", 4), ("threads", 4)])
def test_a_busy_pool_writes_every_record_on_its_own_line(
    pool: str, concurrency: int, make_postgres_database, make_broker_url, processes
) -> None:
    """Several pool processes (or threads) log the same moments of a burst of payments
    into one stderr; a log shipper reads it one JSON object per line."""
    with running_stack(make_postgres_database(), make_broker_url()) as stack:
        worker = stack.start_worker(processes, pool=pool, concurrency=concurrency)
        # On a busy machine a task can spend its time budget and hand the payment back to
        # the row for later: the sweeper is what dispatches it again.
        sweeper = stack.start_sweeper(processes)
        run = uuid.uuid4().hex[:8]
        with ThreadPoolExecutor(max_workers=12) as senders:
            accepted = list(senders.map(lambda n: stack.pay(f"burst-{run}-{n}"), range(BURST)))
        for payment in accepted:
            assert stack.wait_final(payment["id"])["status"] == "succeeded"
        assert worker.stop() == 0  # a graceful stop: Celery's shutdown notice is logged too
        sweeper.stop()

    _every_line_one_json_object(sweeper)
    records = _every_line_one_json_object(worker)
    finished = {r["payment_id"] for r in records if r["event"] == "payment_finished"}
    # Also when a soft time limit lands between a finish's commit and its line
    # (test_interrupted_finish): the run reports the finish it finds in the row.
    assert finished == {p["id"] for p in accepted}
    assert "worker: Warm shutdown (MainProcess)" in {r["event"] for r in records}


# Start-up refuses a missing or placeholder secret ------------------------------------------


@pytest.mark.parametrize("command", ["api", "worker"])
@pytest.mark.parametrize(
    "secret", [None, "", "changeme", "dev-secret-key", "short-but-not-a-placeholder"]
)
def test_production_refuses_a_missing_or_placeholder_secret_key(
    command: str, secret: str | None
) -> None:
    env = {
        "PAYORCH_ENV": "production",
        "PAYORCH_DATABASE_URL": "postgresql+psycopg://payorch:hunter2@127.0.0.1:1/payorch",
        "PAYORCH_STRIPE_API_KEY": "sk_live_do_not_print_me",
    }
    if secret is not None:
        env["PAYORCH_SECRET_KEY"] = secret
    result = subprocess.run(
        payorch_command(command, "--port", str(free_port()))
        if command == "api"
        else payorch_command(command),
        env=process_environment(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == EX_CONFIG, output
    assert "PAYORCH_SECRET_KEY is missing or a placeholder" in result.stderr
    assert "Traceback" not in output
    assert len(output.splitlines()) <= 3, output
    assert "hunter2" not in output and "sk_live_do_not_print_me" not in output


def test_an_invalid_setting_is_named_without_a_traceback() -> None:
    result = subprocess.run(
        payorch_command("worker"),
        env=process_environment(
            {
                "PAYORCH_ENV": "test",
                "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
                "PAYORCH_LEASE_SECONDS": "-5",
            }
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EX_CONFIG, result.stderr
    assert "PAYORCH_LEASE_SECONDS" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


# SQL errors never carry their parameters ---------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_failed_statement_does_not_show_its_parameters(
    backend: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """A traceback in a log prints the error's message; with bound parameters shown, a
    failing claim would print the idempotency key, a failing finish the stored response."""
    url = (
        f"sqlite:///{tmp_path / 'p.sqlite3'}"
        if backend == "sqlite"
        else request.getfixturevalue("make_postgres_database")()
    )
    container = build_container(url)
    secret = "order-SECRETKEY-in-a-failing-statement"
    try:
        with container.engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as raised:
            conn.execute(
                sa.text("SELECT no_such_column FROM payments WHERE idempotency_key = :key"),
                {"key": secret},
            )
    finally:
        container.close()
    assert "no_such_column" in str(raised.value)
    assert secret not in str(raised.value)
    assert secret not in repr(raised.value)
