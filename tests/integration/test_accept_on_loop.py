"""``POST /v1/payments`` on the event loop (orchestrator.db.accept_claims): an active merchant's
new key is answered there, and so is its replay (or 422); everything else by the thread
path with the same answers as before; dead connections are not reused; a request that finds
every connection busy waits for one, for a bounded time, then takes the thread path.  Real
PostgreSQL over real HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db import async_session
from orchestrator.db.tables import payments
from orchestrator.domain.model import Role
from orchestrator.metrics import ACCEPT_LOOP_FALLBACKS
from orchestrator.services.api_keys import create_client, revoke_client
from tests.harness.containers import build_container
from tests.harness.server import ServerThread

BODY = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}


@dataclass
class Recording:
    """Wraps the app's asyncio claim: what each on-loop statement answered."""

    inner: Any
    answers: list[tuple[str | None, bool] | None] = field(default_factory=list)
    replays_read: list[str | None] = field(default_factory=list)  # the records' ids

    def now(self) -> Any:
        return self.inner.now()

    async def __call__(self, key_hash: str, values: dict[str, Any], notify: bool) -> Any:
        answered = await self.inner(key_hash, values, notify)
        if answered is None:
            self.answers.append(None)
        else:
            found, inserted = answered
            self.answers.append((None if found is None else found[0].id, inserted))
        return answered

    async def find_by_key(self, client_id: str, idempotency_key: str) -> Any:
        record = await self.inner.find_by_key(client_id, idempotency_key)
        self.replays_read.append(None if record is None else record.id)
        return record

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class Served:
    container: Container
    url: str
    recording: Recording
    merchant_key: str
    merchant_id: str

    def post(
        self, key: str, api_key: str | None = None, body: dict[str, Any] = BODY
    ) -> httpx.Response:
        headers = {
            "Authorization": f"Bearer {api_key or self.merchant_key}",
            "Idempotency-Key": key,
        }
        with httpx.Client(base_url=self.url, timeout=30, trust_env=False) as client:
            return client.post("/v1/payments", json=body, headers=headers)

    def stored(self, key: str) -> int:
        query = sa.select(sa.func.count()).where(payments.c.idempotency_key == key)
        with self.container.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())


@pytest.fixture
def served(make_postgres_database) -> Iterator[Served]:
    container = build_container(make_postgres_database(), wake_up="notify")
    issued = create_client(container.uow, "merchant", Role.MERCHANT)
    app = create_app(container)
    try:
        with ServerThread(app) as server:
            recording = Recording(app.state.async_claim)
            app.state.async_claim = recording
            yield Served(container, server.url, recording, issued.api_key, issued.client.id)
    finally:
        container.close()


def test_a_new_key_and_its_replays_are_answered_on_the_loop(served: Served) -> None:
    # The first accept may find no fresh sample of the database clock: the thread path
    # answers it and takes one.
    assert served.post("warm").status_code == 202
    served.recording.answers.clear()

    first = served.post("new")
    assert first.status_code == 202 and "Idempotent-Replayed" not in first.headers
    assert served.recording.answers == [(served.merchant_id, True)]
    assert first.json()["idempotency_key"] == "new" and served.stored("new") == 1

    replay = served.post("new")  # taken: the loop inserts nothing and reads the record
    assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert served.recording.answers[-1] == (served.merchant_id, False)
    assert served.recording.replays_read == [first.json()["id"]]

    reused = served.post("new", body={**BODY, "amount": 2500})  # another request's key
    assert reused.status_code == 422, reused.text
    assert reused.headers["content-type"] == "application/problem+json"
    assert served.recording.replays_read == [first.json()["id"]] * 2
    assert served.stored("new") == 1


def test_refused_keys_fall_to_the_thread_path_and_store_nothing(served: Served) -> None:
    ops = create_client(served.container.uow, "ops", Role.OPS)
    revoked = create_client(served.container.uow, "gone", Role.MERCHANT)
    revoke_client(served.container.uow, revoked.client.id)
    assert served.post("warm").status_code == 202
    for api_key, status in [
        (ops.api_key, 403),
        (revoked.api_key, 401),
        ("pok_" + "q" * 43, 401),
    ]:
        answer = served.post(f"refused-{status}-{api_key[-4:]}", api_key)
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert served.stored(f"refused-{status}-{api_key[-4:]}") == 0
    assert all(answer is None or not answer[1] for answer in served.recording.answers[1:])


def test_connections_the_server_closed_are_not_reused(served: Served) -> None:
    assert served.post("warm-1").status_code == 202
    assert served.post("warm-2").status_code == 202
    served.recording.answers.clear()
    with served.container.engine.connect() as connection:
        terminated = connection.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar_one()
        assert terminated >= 1
        # Gone, not only signalled: their sockets are closed before the next request.
        deadline = time.monotonic() + 10
        while connection.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalar_one():
            assert time.monotonic() < deadline, "terminated backends still there"
            connection.rollback()  # pg_stat_activity is a snapshot per transaction
            time.sleep(0.02)
    # Every pooled connection, the loop's and the threads', is dead now: each is told apart
    # at checkout (its socket is readable) and replaced, so no request fails.
    for n in range(3):
        assert served.post(f"after-terminate-{n}").status_code == 202
    assert (served.merchant_id, True) in served.recording.answers


@pytest.fixture
def one_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's loop claim (made when ``served`` starts it) has one connection and waits
    for it as long as a test may take."""
    monkeypatch.setattr(async_session, "CONNECTIONS", 1)
    monkeypatch.setattr(async_session, "SLOT_WAIT_SECONDS", 60.0)


@pytest.fixture
def no_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(async_session, "CONNECTIONS", 0)
    monkeypatch.setattr(async_session, "SLOT_WAIT_SECONDS", 0.0)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_request_that_finds_every_connection_busy_waits_for_one(
    one_connection: None, served: Served
) -> None:
    claim = served.recording.inner
    assert served.post("warm").status_code == 202
    served.recording.answers.clear()
    waiting_on_lock = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        f"AND application_name = '{async_session.APPLICATION_NAME}' AND wait_event_type = 'Lock'"
    )
    with ThreadPoolExecutor(max_workers=2) as clients:
        with served.container.engine.connect() as blocker:
            # The one connection's INSERT waits behind this lock, holding the only slot.
            blocker.execute(sa.text("LOCK TABLE payments IN SHARE MODE"))
            first = clients.submit(served.post, "first")
            with served.container.engine.connect() as watcher:

                def first_blocked() -> bool:
                    watcher.rollback()  # pg_stat_activity is a snapshot per transaction
                    return bool(watcher.execute(waiting_on_lock).scalar_one())

                wait_until(first_blocked, "the first accept never reached the lock")
            second = clients.submit(served.post, "second")
            wait_until(lambda: claim.waiting == 1, "the second accept never queued for a slot")
            blocker.rollback()
        assert first.result().status_code == 202 and second.result().status_code == 202
    # Both on the loop: the second waited for the first's connection.
    assert served.recording.answers == [(served.merchant_id, True)] * 2
    assert served.stored("first") == served.stored("second") == 1


def test_past_the_wait_for_a_connection_the_thread_path_answers(
    no_connection: None, served: Served
) -> None:
    busy = ACCEPT_LOOP_FALLBACKS.labels(reason="busy")
    before = busy._value.get()
    assert served.post("warm").status_code == 202
    answer = served.post("no-connection")
    assert answer.status_code == 202 and served.stored("no-connection") == 1
    assert served.recording.answers and set(served.recording.answers) == {None}
    # Operators see it: one fallback counted for each request the loop handed over.
    assert busy._value.get() - before == len(served.recording.answers)


def test_the_loops_connections_close_when_the_app_stops(make_postgres_database) -> None:
    container = build_container(make_postgres_database(), wake_up="notify")
    issued = create_client(container.uow, "merchant", Role.MERCHANT)
    app = create_app(container)
    loop_backends = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        f"AND application_name = '{async_session.APPLICATION_NAME}'"
    )
    try:
        with ServerThread(app) as server:
            served = Served(container, server.url, Recording(None), issued.api_key, "")
            for n in range(3):
                assert served.post(f"stop-{n}").status_code == 202
            with container.engine.connect() as connection:
                assert connection.execute(loop_backends).scalar_one() >= 1
        deadline = time.monotonic() + 10
        with container.engine.connect() as connection:
            while connection.execute(loop_backends).scalar_one():
                assert time.monotonic() < deadline, "the loop's connections outlived the app"
                connection.rollback()  # pg_stat_activity is a snapshot per transaction
                time.sleep(0.02)
    finally:
        container.close()
