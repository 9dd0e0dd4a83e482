"""The cap on a merchant's webhook endpoints holds when creates race (PostgreSQL, real HTTP).

The race is made certain rather than hoped for.  The test holds a lock that stops every
insert into ``webhook_endpoints`` (SHARE ROW EXCLUSIVE: reads go on), sends several
creates at once with the merchant one below its cap, waits until every one of them waits
on a lock in the database, and lets go.  A create that counted without queueing behind the
others would have read "one below the cap" and inserted; each must instead count the
endpoint committed before it, so exactly the cap exists and the rest are refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.db.tables import webhook_endpoints
from tests.integration.hardening_helpers import Api, assert_problem, running_api
from tests.integration.webhook_helpers import resolver_table

CAP = 4
RACERS = 6
URL = "https://hooks.merchant.example/payorch"
# How long the creates may take to reach their lock waits; only a failure waits this long.
WAITERS_DEADLINE_SECONDS = 60.0


@pytest.fixture
def api(make_postgres_database: Callable[[], str]) -> Iterator[Api]:
    with running_api(make_postgres_database(), webhook_endpoints_per_client=CAP) as running:
        running.container.resolver = resolver_table({"hooks.merchant.example": ["93.184.216.34"]})
        yield running


def _create(api: Api, n: int) -> httpx.Response:
    with api.client() as client:
        return client.post("/v1/webhook_endpoints", json={"url": f"{URL}/{n}", "events": ["*"]})


def _wait_for_lock_waiters(conn: sa.Connection, count: int) -> None:
    waiting = sa.text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + WAITERS_DEADLINE_SECONDS
    while (found := conn.execute(waiting).scalar_one()) < count:
        assert time.monotonic() < deadline, f"{found} of {count} creates waiting on a lock"
        time.sleep(0.05)


def test_creates_racing_at_the_cap_leave_exactly_the_cap(api: Api) -> None:
    with api.client() as client:
        for n in range(CAP - 1):
            assert client.post(
                "/v1/webhook_endpoints", json={"url": f"{URL}/{n}", "events": ["*"]}
            ).is_success

    # A connection of its own (AUTOCOMMIT for the polls; the lock in an explicit transaction).
    with api.container.engine.connect() as holder, api.container.engine.connect() as observer:
        holder.exec_driver_sql("LOCK TABLE webhook_endpoints IN SHARE ROW EXCLUSIVE MODE")
        observer = observer.execution_options(isolation_level="AUTOCOMMIT")
        with ThreadPoolExecutor(max_workers=RACERS) as pool:
            racing = [pool.submit(_create, api, CAP + n) for n in range(RACERS)]
            _wait_for_lock_waiters(observer, RACERS)
            holder.rollback()  # let go: the creates go on from where each one waits
            answers = [future.result() for future in racing]

    with api.container.engine.connect() as conn:
        stored = conn.execute(
            sa.select(sa.func.count())
            .select_from(webhook_endpoints)
            .where(
                webhook_endpoints.c.client_id == api.client_a_id,
                webhook_endpoints.c.deleted_at.is_(None),
            )
        ).scalar_one()
    assert stored == CAP
    assert sorted(answer.status_code for answer in answers) == [201] + [409] * (RACERS - 1)
    for answer in answers:
        if answer.status_code == 409:
            problem = assert_problem(answer, 409, "conflict")
            assert f"{CAP} webhook endpoints" in problem["detail"]
