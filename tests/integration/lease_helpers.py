"""Helpers of the lease-expiry tests: records with expired leases, the ``payorch`` CLI as a
subprocess, and the messages a real broker received."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from kombu import Connection

from orchestrator.bootstrap import Container
from orchestrator.db.tables import payments
from orchestrator.domain.model import ApiClient, PaymentRecord
from tests.harness.containers import TEST_SECRET_KEY
from tests.harness.seeds import accept, reload
from tests.support.processes import payorch_command, process_environment

PAYMENTS_QUEUE = "payorch.payments"
PROCESS_PAYMENT = "payorch.process_payment"


def expire_leases(container: Container, ids: list[str], *, ago: timedelta) -> None:
    """Move the leases of ``ids`` into the past by the database's own clock."""
    with container.uow() as uow:
        now = uow.now()
        uow.session.execute(
            payments.update().where(payments.c.id.in_(ids)).values(locked_until=now - ago)
        )
        uow.commit()


def expired_payments(
    container: Container, client: ApiClient, count: int, *, prefix: str = "order"
) -> list[PaymentRecord]:
    """``count`` accepted payments whose dispatch lease ran out a minute ago (a lost
    publish, as far as the sweeper can tell)."""
    ids = [accept(container, client, f"{prefix}-{n}").id for n in range(count)]
    expire_leases(container, ids, ago=timedelta(minutes=1))
    return [reload(container, payment_id) for payment_id in ids]


def lease_tokens(container: Container) -> dict[str, int]:
    with container.engine.connect() as connection:
        rows = connection.execute(sa.select(payments.c.id, payments.c.lease_token))
        return {row.id: row.lease_token for row in rows}


def cli_environment(database_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    env = process_environment(
        {
            "PAYORCH_ENV": "test",
            "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
            "PAYORCH_DATABASE_URL": database_url,
            "PAYORCH_BROKER_URL": broker_url,
            "PAYORCH_LOG_LEVEL": "WARNING",
        }
    )
    env.update(extra)
    return env


def run_payorch(
    *args: str, env: Mapping[str, str], timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        payorch_command(*args),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def run_payorch_json(*args: str, env: Mapping[str, str]) -> Any:
    result = run_payorch(*args, "--json", env=env)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)


def take_process_payment_messages(
    broker_url: str, *, payment_id: str, timeout: float = 10.0
) -> list[tuple[str, int]]:
    """Consume the queue until a ``process_payment`` message for ``payment_id`` arrived;
    every (payment id, token) seen for that payment.  Other messages are consumed too:
    harmless, since the row is the truth and the sweeper re-queues what they were for."""
    found: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    with Connection(broker_url, connect_timeout=5) as connection:
        queue = connection.SimpleQueue(PAYMENTS_QUEUE)
        try:
            while time.monotonic() < deadline:
                try:
                    message = queue.get(block=True, timeout=0.5)
                except queue.Empty:
                    if found:
                        break
                    continue
                with contextlib.suppress(Exception):
                    if message.headers.get("task") == PROCESS_PAYMENT:
                        args = message.decode()[0]
                        if args[0] == payment_id:
                            found.append((args[0], int(args[1])))
                message.ack()
        finally:
            queue.close()
    return found
