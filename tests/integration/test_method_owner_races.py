"""Concurrent first uses of one customer by two merchants, on PostgreSQL: exactly one
merchant owns it, the other is refused with ``foreign-payment-method`` and has no payment
(the primary key of ``payment_method_owners`` decides; decision 0063)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.db.tables import payment_method_owners
from tests.integration.hardening_helpers import Api, running_api

ROUNDS = 8


@pytest.fixture
def api(make_postgres_database) -> Iterator[Api]:
    with running_api(make_postgres_database()) as running:
        yield running


def _race(api: Api, n: int, customer: str) -> dict[str, httpx.Response]:
    """Merchants a and b post a first payment naming ``customer`` at the same moment."""
    barrier = threading.Barrier(2)
    answers: dict[str, httpx.Response] = {}

    def pay(name: str, key: str) -> None:
        with api.client(key) as client:
            barrier.wait()
            answers[name] = client.post(
                "/v1/payments",
                json={
                    "amount": 1999,
                    "currency": "usd",
                    "payment_method": f"pm_1Saved{n}{name}",
                    "customer": customer,
                },
                headers={"Idempotency-Key": f"race-{n}"},
            )

    threads = [
        threading.Thread(target=pay, args=("a", api.key_a)),
        threading.Thread(target=pay, args=("b", api.key_b)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


def test_two_merchants_racing_for_a_new_customer_leave_exactly_one_owner(api: Api) -> None:
    for n in range(ROUNDS):
        customer = f"cus_Race{n}"
        answers = _race(api, n, customer)

        statuses = sorted(answers[name].status_code for name in ("a", "b"))
        assert statuses == [202, 400], {k: v.text for k, v in answers.items()}
        loser = "a" if answers["a"].status_code == 400 else "b"
        winner_id = api.client_b_id if loser == "a" else api.client_a_id
        assert answers[loser].json()["type"].endswith("/foreign-payment-method")
        with api.container.engine.connect() as conn:
            owner = conn.execute(
                sa.select(payment_method_owners.c.client_id).where(
                    payment_method_owners.c.external_id == customer
                )
            ).scalar_one()
        assert owner == winner_id
    assert api.count() == ROUNDS
