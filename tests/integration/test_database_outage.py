"""PostgreSQL unavailable (issue 7): the API answers a 503 problem with ``Retry-After``,
never a 500 with a trace; when the database is back, every payment is accepted exactly once
and charged exactly once; a worker that loses the database mid-payment leaves the record
for the sweeper, and nothing is charged twice.

These tests really stop a PostgreSQL server and start it again: the session's private
cluster (``service_control``), never the machine's shared one.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from orchestrator import metrics
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines, payment_outcomes, payments
from orchestrator.domain.model import Role
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.ops.metrics_server import database_gauges
from orchestrator.providers.base import ProviderPayment
from orchestrator.services.api_keys import create_client
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force, reload
from tests.harness.server import ServerThread
from tests.integration.hardening_helpers import assert_problem, post_payment
from tests.support.services import ServiceControl

# A request must be answered well within this; without a connect timeout an unreachable
# database would hold it for the kernel's TCP connect timeout (minutes).
CLIENT_TIMEOUT_SECONDS = 20.0


@pytest.fixture
def control(service_control: ServiceControl) -> ServiceControl:
    return service_control


@pytest.fixture
def database_url(control: ServiceControl) -> str:
    """A database on the private cluster: the one these tests stop."""
    return control.make_database()


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def container(
    database_url: str, provider: FakeProvider, publisher: RecordingPublisher
) -> Iterator[Container]:
    built = build_container(database_url, provider=provider, publisher=publisher)
    yield built
    built.close()


def _assert_unavailable(response: httpx.Response) -> None:
    assert_problem(response, 503, "service-unavailable")
    assert int(response.headers["Retry-After"]) >= 1


def _rows(container: Container, table: sa.Table, payment_id: str) -> int:
    with container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(table)
                .where(table.c.payment_id == payment_id)
            ).scalar_one()
        )


def _records_by_key(container: Container) -> dict[str, list[str]]:
    with container.engine.connect() as conn:
        rows = conn.execute(sa.select(payments.c.idempotency_key, payments.c.id)).all()
    found: dict[str, list[str]] = {}
    for key, payment_id in rows:
        found.setdefault(key, []).append(payment_id)
    return found


def test_the_api_answers_503_during_an_outage_and_loses_nothing_after_it(
    container: Container, provider: FakeProvider, control: ServiceControl
) -> None:
    key = create_client(container.uow, "outage-merchant", Role.MERCHANT).api_key
    with (
        ServerThread(create_app(container)) as server,
        httpx.Client(
            base_url=server.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=CLIENT_TIMEOUT_SECONDS,
            trust_env=False,
        ) as client,
    ):
        before = {f"before-{n}": post_payment(client, f"before-{n}").json() for n in range(3)}
        during_keys = [f"during-{n}" for n in range(5)]

        with control.postgres_stopped():
            outage = [post_payment(client, k) for k in during_keys]
            outage.append(post_payment(client, "before-0"))  # a replay needs the database too
            outage.append(client.get(f"/v1/payments/{before['before-0']['id']}"))
            outage.append(client.get("/v1/payments", params={"idempotency_key": "before-1"}))
            ready = client.get("/readyz")
            alive = client.get("/healthz")
            scraped, _ = metrics.render(metrics.Role.API, database_gauges(container.read_only_uow))

        for response in outage:
            _assert_unavailable(response)
        assert ready.status_code == 503
        assert alive.status_code == 200
        # The metrics server still answers, with the process's own series.
        assert b"payorch_payments_accepted_total" in scraped
        assert b"payorch_payment_records" not in scraped  # not sampled: not reported as 0

        # The database is back: the same keys again, as a client honouring Retry-After would.
        retried = {k: post_payment(client, k) for k in during_keys}
        replayed = {k: post_payment(client, k) for k in before}

    assert all(
        r.status_code == 202 and "Idempotent-Replayed" not in r.headers for r in retried.values()
    )
    for k, response in replayed.items():
        assert response.status_code == 202
        assert response.headers["Idempotent-Replayed"] == "true"
        assert response.json()["id"] == before[k]["id"]
    by_key = _records_by_key(container)
    assert {k: len(ids) for k, ids in by_key.items()} == {k: 1 for k in [*before, *during_keys]}

    # Every accepted payment, before and after the outage, completes once a worker runs.
    for record_ids in by_key.values():
        [payment_id] = record_ids
        record = reload(container, payment_id)
        assert process_payment(
            container.runner(), payment_id, record.lease_token, owner="test"
        ) is (ProcessResult.COMPLETED)
        assert reload(container, payment_id).status is PaymentStatus.SUCCEEDED
        assert provider.movements(payment_id) == 1


@contextlib.contextmanager
def _unreachable_port() -> Iterator[int]:
    """A TCP port where connecting hangs (no refusal, no answer), like a database host
    behind a dropped route: a listener whose accept queue is full drops further SYNs."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_an_unreachable_database_is_a_503_bounded_by_the_connect_timeout() -> None:
    with _unreachable_port() as port:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/payorch"
        container = build_container(url, migrate=False, db_pool_timeout_seconds=10)
        try:
            with (
                ServerThread(create_app(container)) as server,
                httpx.Client(
                    base_url=server.url,
                    headers={"Authorization": "Bearer pok_" + "x" * 43},
                    timeout=CLIENT_TIMEOUT_SECONDS,
                    trust_env=False,
                ) as client,
            ):
                # httpx raises ReadTimeout if the API hangs on the connect instead.
                _assert_unavailable(post_payment(client, "unreachable"))
                _assert_unavailable(client.get("/v1/payments/pay_" + "0" * 32))
        finally:
            container.close()


# The worker side ---------------------------------------------------------------------------


def test_a_task_that_cannot_reach_the_database_changes_nothing(
    container: Container, provider: FakeProvider, control: ServiceControl
) -> None:
    merchant = create_client(container.uow, "m", Role.MERCHANT).client
    record = accept(container, merchant, "claim-during-outage")

    with control.postgres_stopped(), pytest.raises(DBAPIError):
        process_payment(container.runner(), record.id, record.lease_token, owner="worker-1")

    after = reload(container, record.id)
    assert after == record  # not claimed, no attempt counted, nothing written
    assert provider.calls == []
    assert process_payment(container.runner(), record.id, record.lease_token, owner="worker-1") is (
        ProcessResult.COMPLETED
    )
    assert provider.movements(record.id) == 1


def test_after_a_database_restart_the_first_statements_get_live_connections(
    container: Container, control: ServiceControl
) -> None:
    """No pre-ping: the pool keeps the connections a restart killed, and the checkout must
    tell them apart without a round trip (their sockets are readable: the server closed
    them), so the first requests after the restart are not the ones that fail."""
    with container.engine.connect() as first, container.engine.connect() as second:
        first.execute(sa.text("SELECT 1"))
        second.execute(sa.text("SELECT 1"))
    assert container.engine.pool.checkedin() == 2  # type: ignore[attr-defined]
    with control.postgres_stopped():
        pass

    with container.engine.connect() as first, container.engine.connect() as second:
        assert first.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert second.execute(sa.text("SELECT 1")).scalar_one() == 1


class _OutageAfterConfirm:
    """A provider whose first confirm succeeds at the provider (money moves), after which
    the database goes down before the worker can record it."""

    def __init__(self, inner: FakeProvider, service_control: ServiceControl) -> None:
        self._inner = inner
        self._control = service_control
        self.name = inner.name
        self.tripped = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def confirm_payment(
        self, provider_payment_id: str, *, record_id: str, attempt: int, **options: Any
    ) -> ProviderPayment:
        intent = self._inner.confirm_payment(
            provider_payment_id, record_id=record_id, attempt=attempt, **options
        )
        if not self.tripped:
            self.tripped = True
            self._control.stop_postgres()
        return intent


def test_a_worker_that_loses_the_database_mid_payment_leaves_it_for_the_sweeper(
    database_url: str, control: ServiceControl
) -> None:
    fake = FakeProvider()
    publisher = RecordingPublisher()
    wrapper = _OutageAfterConfirm(fake, control)
    container = build_container(
        database_url,
        provider=wrapper,
        publisher=publisher,  # type: ignore[arg-type]
    )
    try:
        merchant = create_client(container.uow, "m", Role.MERCHANT).client
        record = accept(container, merchant, "charged-then-outage")

        try:
            with pytest.raises(DBAPIError):
                process_payment(container.runner(), record.id, record.lease_token, owner="worker-1")
        finally:
            control.start_postgres()

        assert wrapper.tripped and fake.movements(record.id) == 1
        stranded = reload(container, record.id)
        # Nothing wrong was written: still processing, the confirm counted (so the next
        # holder queries before confirming), no outcome, no ledger lines.
        assert stranded.status is PaymentStatus.PROCESSING
        assert stranded.recovery_point is RecoveryPoint.INTENT_CREATED
        assert stranded.confirm_attempts == 1
        assert stranded.lease_owner == "worker-1"
        assert _rows(container, payment_outcomes, record.id) == 0
        assert _rows(container, ledger_lines, record.id) == 0

        # The lease runs out; the sweeper takes the record over and re-queues it.
        with container.uow() as uow:
            expired = uow.now() - timedelta(seconds=1)
        force(container, record.id, locked_until=expired)
        report = container.sweeper(name="outage-sweeper").run_once()
        assert report.taken_over == [record.id]
        payment_id, token = [p for p in publisher.published if p[0] == record.id][-1]
        assert token > stranded.lease_token

        assert process_payment(container.runner(), payment_id, token, owner="worker-2") is (
            ProcessResult.COMPLETED
        )
        done = reload(container, record.id)
        assert done.status is PaymentStatus.SUCCEEDED
        assert fake.movements(record.id) == 1
        assert [c.operation for c in fake.calls].count("confirm") == 1  # queried, not resent
        assert _rows(container, payment_outcomes, record.id) == 1
    finally:
        container.close()
