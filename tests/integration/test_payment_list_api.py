"""``GET /v1/payments``: a merchant lists its own payments, newest first, paged by payment id
like Stripe's lists (issue 44, decision 0089), over real HTTP on SQLite and PostgreSQL.

The payments' creation times are set by the tests, so the expected order is known
independently of the code under test: it is the order the test wrote.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.db.tables import payments
from orchestrator.domain.model import ApiClient
from tests.harness.seeds import accept, force
from tests.integration.hardening_helpers import Api, assert_problem, running_api

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _merchant(api: Api, client_id: str) -> ApiClient:
    with api.container.uow() as uow:
        client = uow.clients.get(client_id)
    assert client is not None
    return client


def _seed(api: Api, client_id: str, count: int, *, prefix: str, start: datetime = T0) -> list[str]:
    """``count`` payments created one minute apart from ``start``; their ids, newest first."""
    merchant = _merchant(api, client_id)
    ids = []
    for i in range(count):
        record = accept(api.container, merchant, f"{prefix}-{i}")
        force(api.container, record.id, created_at=start + timedelta(minutes=i))
        ids.append(record.id)
    return list(reversed(ids))


def _list(client: httpx.Client, **params: Any) -> dict[str, Any]:
    response = client.get("/v1/payments", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _ids(page: dict[str, Any]) -> list[str]:
    return [p["id"] for p in page["data"]]


def test_without_parameters_the_newest_ten_are_listed(api: Api) -> None:
    newest_first = _seed(api, api.client_a_id, 12, prefix="plain")
    with api.client(api.key_a) as client:
        page = _list(client)

    assert _ids(page) == newest_first[:10]
    assert page["has_more"] is True
    assert page["data"][0]["amount"] == 1000 and page["data"][0]["status"] == "processing"


def test_pages_forward_with_starting_after_and_back_with_ending_before(api: Api) -> None:
    newest_first = _seed(api, api.client_a_id, 25, prefix="page")
    _seed(api, api.client_b_id, 5, prefix="other", start=T0 + timedelta(seconds=30))

    with api.client(api.key_a) as client:
        first = _list(client, limit=10)
        second = _list(client, limit=10, starting_after=_ids(first)[-1])
        third = _list(client, limit=10, starting_after=_ids(second)[-1])
        back_to_second = _list(client, limit=10, ending_before=_ids(third)[0])
        back_to_first = _list(client, limit=10, ending_before=_ids(second)[0])

    assert _ids(first) == newest_first[:10] and first["has_more"] is True
    assert _ids(second) == newest_first[10:20] and second["has_more"] is True
    assert _ids(third) == newest_first[20:] and third["has_more"] is False
    assert _ids(back_to_second) == newest_first[10:20] and back_to_second["has_more"] is True
    assert _ids(back_to_first) == newest_first[:10] and back_to_first["has_more"] is False


def test_payments_created_at_the_same_instant_are_each_listed_once(api: Api) -> None:
    merchant = _merchant(api, api.client_a_id)
    ids = []
    for i in range(7):
        record = accept(api.container, merchant, f"tie-{i}")
        force(api.container, record.id, created_at=T0)
        ids.append(record.id)
    expected = sorted(ids, reverse=True)  # the same time: by id, descending

    seen: list[str] = []
    with api.client(api.key_a) as client:
        page = _list(client, limit=2)
        seen += _ids(page)
        while page["has_more"]:
            page = _list(client, limit=2, starting_after=seen[-1])
            seen += _ids(page)
        back = _list(client, limit=3, ending_before=expected[4])

    assert seen == expected
    assert _ids(back) == expected[1:4] and back["has_more"] is True


def test_status_and_creation_time_filter_and_combine_with_paging(api: Api) -> None:
    newest_first = _seed(api, api.client_a_id, 10, prefix="filter")
    oldest_first = list(reversed(newest_first))  # oldest_first[i] was created at T0 + i min
    for payment_id in oldest_first[::2]:
        force(api.container, payment_id, status="succeeded")
    force(api.container, oldest_first[1], waiting_for="customer")  # shown requires_action

    with api.client(api.key_a) as client:
        succeeded = _list(client, status="succeeded")
        requires_action = _list(client, status="requires_action")
        processing = _list(client, status="processing")
        window = _list(
            client,
            **{
                "created[gte]": (T0 + timedelta(minutes=3)).isoformat(),
                "created[lt]": (T0 + timedelta(minutes=7)).isoformat(),
            },
        )
        unix = _list(client, **{"created[gte]": str(int((T0 + timedelta(minutes=8)).timestamp()))})
        succeeded_page_2 = _list(
            client, status="succeeded", limit=2, starting_after=oldest_first[6]
        )

    assert _ids(succeeded) == [oldest_first[i] for i in (8, 6, 4, 2, 0)]
    assert {p["status"] for p in succeeded["data"]} == {"succeeded"}
    assert _ids(requires_action) == [oldest_first[1]]
    assert requires_action["data"][0]["status"] == "requires_action"
    assert _ids(processing) == [oldest_first[i] for i in (9, 7, 5, 3)]
    assert _ids(window) == [oldest_first[i] for i in (6, 5, 4, 3)]
    assert _ids(unix) == [oldest_first[9], oldest_first[8]]
    assert _ids(succeeded_page_2) == [oldest_first[4], oldest_first[2]]
    assert succeeded_page_2["has_more"] is True


def test_another_merchants_payments_are_never_listed_nor_a_position(api: Api) -> None:
    mine = _seed(api, api.client_a_id, 3, prefix="mine")
    theirs = _seed(api, api.client_b_id, 3, prefix="theirs", start=T0 + timedelta(seconds=10))

    with api.client(api.key_a) as a, api.client(api.key_b) as b:
        listed_by_a = _list(a, limit=100)
        listed_by_b = _list(b, limit=100)
        by_key = _list(b, idempotency_key="mine-0")
        foreign_position = a.get("/v1/payments", params={"starting_after": theirs[0]})
        missing_position = a.get("/v1/payments", params={"ending_before": "pay_" + "0" * 32})

    assert _ids(listed_by_a) == mine
    assert _ids(listed_by_b) == theirs
    assert by_key == {"data": [], "has_more": False}
    foreign = assert_problem(foreign_position, 400, "invalid-request")
    missing = assert_problem(missing_position, 400, "invalid-request")
    # Another merchant's payment and no payment at all are one answer: nothing leaks.
    assert foreign["errors"] == [
        {"field": "query.starting_after", "message": "not one of your payments"}
    ]
    assert missing["errors"] == [
        {"field": "query.ending_before", "message": "not one of your payments"}
    ]
    assert theirs[0] not in foreign_position.text


def test_the_idempotency_key_lookup_is_a_filter_of_the_list(api: Api) -> None:
    [payment_id] = _seed(api, api.client_a_id, 1, prefix="lookup")
    with api.client(api.key_a) as client:
        found = _list(client, idempotency_key="lookup-0")
        absent = _list(client, idempotency_key="lookup-0", status="succeeded")

    assert _ids(found) == [payment_id] and found["has_more"] is False
    assert absent == {"data": [], "has_more": False}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "query.limit"),
        ({"limit": "101"}, "query.limit"),
        ({"limit": "ten"}, "query.limit"),
        ({"status": "paid"}, "query.status"),
        ({"created[gte]": "yesterday"}, "query.created[gte]"),
        ({"created[lt]": "2026-12-01T09:00:00"}, "query.created[lt]"),
        ({"created[gte]": "0001-01-01T00:00:00+01:00"}, "query.created[gte]"),
        ({"created[lt]": "9999-12-31T23:59:59-05:00"}, "query.created[lt]"),
        ({"starting_after": "not-a-payment"}, "query.starting_after"),
        ({"starting_after": ""}, "query.starting_after"),
        ({"ending_before": "pay_" + "f" * 32}, "query.ending_before"),
        ({"statuss": "succeeded"}, "query.statuss"),
        ({"created_after": "2026-12-01T09:00:00Z"}, "query.created_after"),
    ],
)
def test_every_bad_parameter_is_a_400_problem_naming_it(
    api: Api, params: dict[str, str], field: str
) -> None:
    with api.client(api.key_a) as client:
        problem = assert_problem(client.get("/v1/payments", params=params), 400, "invalid-request")

    assert field in [e["field"] for e in problem["errors"]], problem
    assert field.removeprefix("query.") in problem["detail"], problem


def test_starting_after_and_ending_before_together_are_refused(api: Api) -> None:
    newest_first = _seed(api, api.client_a_id, 3, prefix="both")
    with api.client(api.key_a) as client:
        response = client.get(
            "/v1/payments",
            params={"starting_after": newest_first[0], "ending_before": newest_first[2]},
        )
    problem = assert_problem(response, 400, "invalid-request")
    assert {e["field"] for e in problem["errors"]} == {
        "query.starting_after",
        "query.ending_before",
    }


def test_listing_needs_a_merchant_key(api: Api) -> None:
    with api.client(api.ops_key) as ops:
        assert_problem(ops.get("/v1/payments"), 403, "forbidden")
    with api.client("") as anonymous:
        response = anonymous.get("/v1/payments", headers={"Authorization": ""})
    assert_problem(response, 401, "unauthorized")


@pytest.mark.postgres
def test_ten_thousand_payments_page_through_once_each_both_ways(
    make_postgres_database: Any,
) -> None:
    with running_api(make_postgres_database()) as api:
        [template] = _seed(api, api.client_a_id, 1, prefix="template")
        # Copies of one accepted payment, three to a creation instant (ties by id), with
        # ids and keys of their own: 10,000 rows in one statement.
        columns = [c.name for c in payments.columns if c.name not in ("id", "idempotency_key")]
        copied = ", ".join(c for c in columns if c != "created_at")
        with api.container.engine.begin() as connection:
            connection.execute(
                sa.text(
                    f"INSERT INTO payments (id, idempotency_key, created_at, {copied}) "
                    "SELECT 'pay_' || md5(g::text), 'bulk-' || g, "
                    "  :t0 + make_interval(secs => g / 3), "
                    f"  {copied} FROM payments, generate_series(1, 9999) AS g "
                    "WHERE payments.id = :template"
                ),
                {"t0": T0 + timedelta(days=1), "template": template},
            )
            expected = [
                row[0]
                for row in connection.execute(
                    sa.select(payments.c.id)
                    .where(payments.c.client_id == api.client_a_id)
                    .order_by(payments.c.created_at.desc(), payments.c.id.desc())
                )
            ]
        assert len(expected) == 10_000

        forward: list[str] = []
        backward: list[str] = []
        with api.client(api.key_a) as client:
            page = _list(client, limit=100)
            forward += _ids(page)
            while page["has_more"]:
                page = _list(client, limit=100, starting_after=forward[-1])
                forward += _ids(page)
            page = _list(client, limit=100, ending_before=forward[-1])
            backward = [*_ids(page), forward[-1]]
            while page["has_more"]:
                page = _list(client, limit=100, ending_before=backward[0])
                backward = [*_ids(page), *backward]

    assert forward == expected
    assert backward == expected
