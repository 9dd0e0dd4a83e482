"""API keys and tenant isolation (issue 7), over real HTTP.

* Keys are ``pok_`` + 256 random bits; only their SHA-256 is stored; a revoked key gets
  401 on its very next request, whether revoked in-process or by ``payorch clients revoke``
  running as its own process against the same database.
* Client B cannot read, replay or take over client A's payments, whatever key or id it
  guesses: another client's payment is indistinguishable from one that does not exist.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.db.tables import api_clients, api_keys, audit_log, payments
from orchestrator.domain.model import Role
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.services.api_keys import create_client, revoke_client
from tests.integration.hardening_helpers import (
    BODY,
    Api,
    assert_problem,
    payorch_environment,
    post_payment,
    running_api,
    sqlite_url,
)
from tests.support.processes import payorch_command, process_environment

KEY_SHAPE = re.compile(r"pok_[A-Za-z0-9_-]{43}")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path_factory.mktemp("security"))
    else:
        url = request.getfixturevalue("make_postgres_database")()
    with running_api(url) as running:
        yield running


@pytest.fixture(scope="module")
def postgres_api(make_postgres_database) -> Iterator[Api]:  # type: ignore[no-untyped-def]
    with running_api(make_postgres_database()) as running:
        yield running


def _payorch(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        payorch_command(*args),
        env=process_environment(payorch_environment(database_url)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# API keys ----------------------------------------------------------------------------------


def test_keys_are_random_256_bit_tokens_stored_only_as_sha256(api: Api) -> None:
    issued = [create_client(api.container.uow, f"shape-{n}", Role.MERCHANT) for n in range(3)]
    keys = [i.api_key for i in issued]
    assert all(KEY_SHAPE.fullmatch(key) for key in keys), keys
    assert len(set(keys)) == 3
    with api.container.engine.connect() as conn:
        rows = conn.execute(sa.select(api_keys)).mappings().all()
        clients = conn.execute(sa.select(api_clients)).mappings().all()
    stored = json.dumps([dict(row) for row in [*rows, *clients]], default=str)
    for issue in issued:
        assert issue.api_key not in stored
        assert issue.api_key[len("pok_") :] not in stored
        row = next(r for r in rows if r["client_id"] == issue.client.id)
        assert row["key_hash"] == hashlib.sha256(issue.api_key.encode()).hexdigest()


def test_a_revoked_key_gets_401_on_its_next_request(api: Api) -> None:
    issued = create_client(api.container.uow, "short-lived", Role.MERCHANT)
    with api.client(issued.api_key) as client:
        created = post_payment(client, "before-revocation")
        assert created.status_code == 202
        assert client.get(f"/v1/payments/{created.json()['id']}").status_code == 200

        revoke_client(api.container.uow, issued.client.id)

        assert_problem(client.get(f"/v1/payments/{created.json()['id']}"), 401, "unauthorized")
        assert_problem(post_payment(client, "before-revocation"), 401, "unauthorized")
        assert_problem(post_payment(client, "after-revocation"), 401, "unauthorized")
    assert api.count(idempotency_key="after-revocation") == 0


def test_a_second_key_works_beside_the_first_until_one_is_revoked_through_the_ops_api(
    api: Api,
) -> None:
    issued = create_client(api.container.uow, "rotating", Role.MERCHANT)
    ops = {"Authorization": f"Bearer {api.ops_key}"}
    keys_url = f"/v1/ops/clients/{issued.client.id}/keys"
    with api.client(api.ops_key) as operator:
        added = operator.post(keys_url, json={"reason": "yearly rotation"}, headers=ops)
        assert added.status_code == 201, added.text
        assert added.headers["cache-control"] == "no-store"
        new_key = added.json()["api_key"]
        assert KEY_SHAPE.fullmatch(new_key) and new_key != issued.api_key
        assert added.json()["audit"]["action"] == "issue_api_key"
        listed = operator.get(keys_url).json()["data"]
        assert issued.api_key not in json.dumps(listed) and new_key not in json.dumps(listed)
        old_id = next(k["id"] for k in listed if issued.api_key.startswith(k["key_prefix"]))
        assert [k["revoked_at"] for k in listed] == [None, None]

        with api.client(issued.api_key) as old, api.client(new_key) as new:
            assert post_payment(old, "rotation-old").status_code == 202
            assert post_payment(new, "rotation-new").status_code == 202
            # Both keys are the same client: each sees the other's payments.
            assert new.get("/v1/payments?idempotency_key=rotation-old").status_code == 200

            revoked = operator.post(f"{keys_url}/{old_id}/revoke", json={"reason": "switched"})
            assert revoked.status_code == 200, revoked.text
            assert revoked.json()["audit"]["action"] == "revoke_api_key"
            again = operator.post(f"{keys_url}/{old_id}/revoke", json={"reason": "twice"})
            assert again.status_code == 200 and again.json()["audit"] is None

            assert_problem(post_payment(old, "rotation-after"), 401, "unauthorized")
            assert_problem(
                old.get("/v1/payments?idempotency_key=rotation-old"), 401, "unauthorized"
            )
            assert post_payment(new, "rotation-after").status_code == 202
        assert api.count(idempotency_key="rotation-after") == 1

        assert_problem(
            operator.post(f"{keys_url}/{old_id}/revoke", json={}), 400, "invalid-request"
        )
        other = f"/v1/ops/clients/{api.client_a_id}/keys/{old_id}/revoke"
        assert_problem(operator.post(other, json={"reason": "x"}), 404, "not-found")
        assert_problem(operator.get("/v1/ops/clients/cli_nope/keys"), 404, "not-found")
    with api.client() as merchant:  # a merchant key is not an operator's
        assert merchant.get(keys_url).status_code == 403


def test_keys_rotated_by_the_cli_are_audited_under_the_operator(postgres_api: Api) -> None:
    url = postgres_api.container.settings.database_url
    issued = create_client(postgres_api.container.uow, "cli-rotating", Role.MERCHANT)
    client_id = issued.client.id

    added = _payorch(
        url,
        "clients",
        "keys",
        "add",
        client_id,
        "--reason",
        "leak",
        "--operator",
        "alice",
        "--json",
    )
    assert added.returncode == 0, added.stderr
    new_key = json.loads(added.stdout)["api_key"]
    listed = _payorch(url, "clients", "keys", "list", client_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert new_key not in listed.stdout and issued.api_key not in listed.stdout
    old_id = next(
        k["id"] for k in json.loads(listed.stdout) if k["id"] != json.loads(added.stdout)["id"]
    )
    revoked = _payorch(
        url,
        "clients",
        "keys",
        "revoke",
        client_id,
        old_id,
        "--reason",
        "leaked",
        "--operator",
        "alice",
    )
    assert revoked.returncode == 0, revoked.stderr

    with postgres_api.client(issued.api_key) as old, postgres_api.client(new_key) as new:
        assert_problem(post_payment(old, "cli-rotated"), 401, "unauthorized")
        assert post_payment(new, "cli-rotated").status_code == 202
    with postgres_api.container.engine.connect() as conn:
        actions = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.actor_name, audit_log.c.reason).where(
                audit_log.c.payment_id.in_([old_id, json.loads(added.stdout)["id"]])
            )
        ).all()
    assert sorted(tuple(a) for a in actions) == [
        ("issue_api_key", "alice", "leak"),
        ("revoke_api_key", "alice", "leaked"),
    ]
    unknown = _payorch(url, "clients", "keys", "revoke", client_id, "key_nope", "--reason", "x")
    assert unknown.returncode == 1 and "key_nope" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_a_key_that_differs_in_one_character_is_401(api: Api) -> None:
    near_miss = api.key_a[:-1] + ("A" if api.key_a[-1] != "A" else "B")
    with api.client(near_miss) as client:
        assert_problem(post_payment(client, "near-miss"), 401, "unauthorized")
    assert api.count(idempotency_key="near-miss") == 0


def test_clients_made_and_revoked_by_the_cli_take_effect_at_once(postgres_api: Api) -> None:
    url = postgres_api.container.settings.database_url
    made = _payorch(url, "clients", "create", "cli-merchant", "--role", "merchant", "--json")
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert KEY_SHAPE.fullmatch(created["api_key"])
    with postgres_api.client(created["api_key"]) as client:
        assert post_payment(client, "cli-made").status_code == 202

        listed = _payorch(url, "clients", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert created["api_key"] not in listed.stdout
        [row] = [c for c in json.loads(listed.stdout) if c["id"] == created["id"]]
        assert row["revoked_at"] is None

        revoked = _payorch(url, "clients", "revoke", created["id"], "--json")
        assert revoked.returncode == 0, revoked.stderr
        assert json.loads(revoked.stdout)["revoked_at"] is not None

        # The very next request, through the API process that authenticated the key before.
        assert_problem(post_payment(client, "cli-made"), 401, "unauthorized")
        assert_problem(client.get("/v1/payments?idempotency_key=cli-made"), 401, "unauthorized")


def test_revoking_an_unknown_client_fails_clearly(postgres_api: Api) -> None:
    result = _payorch(postgres_api.container.settings.database_url, "clients", "revoke", "cli_nope")
    assert result.returncode != 0
    assert "cli_nope" in result.stderr
    assert "Traceback" not in result.stderr


# Tenant isolation --------------------------------------------------------------------------


def _without_instance(problem: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in problem.items() if k != "instance"}


def test_another_clients_payment_looks_exactly_like_a_missing_one(api: Api) -> None:
    with api.client(api.key_a) as a:
        theirs = post_payment(a, "a-private").json()
    missing = "pay_" + "0" * 32
    with api.client(api.key_b) as b:
        foreign = assert_problem(b.get(f"/v1/payments/{theirs['id']}"), 404, "not-found")
        absent = assert_problem(b.get(f"/v1/payments/{missing}"), 404, "not-found")
        assert _without_instance(foreign) == _without_instance(absent)
        assert b.get("/v1/payments", params={"idempotency_key": "a-private"}).json() == {
            "data": [],
            "has_more": False,
        }


def test_reusing_another_clients_key_makes_an_independent_payment(api: Api) -> None:
    with api.client(api.key_a) as a:
        original = post_payment(a, "a-order-1").json()
    with api.client(api.key_b) as b:
        same_body = post_payment(b, "a-order-1")
        # A different body under A's key is not a 422 for B: nothing tells B the key is used.
        other_body = post_payment(b, "a-order-2", {**BODY, "amount": 2000})
    with api.client(api.key_a) as a:
        a_other = post_payment(a, "a-order-2")
    assert same_body.status_code == 202
    assert "Idempotent-Replayed" not in same_body.headers
    assert same_body.json()["id"] != original["id"]
    assert other_body.status_code == 202
    assert a_other.status_code == 202 and "Idempotent-Replayed" not in a_other.headers
    with api.client(api.key_a) as a:
        assert a.get(f"/v1/payments/{original['id']}").json()["amount"] == BODY["amount"]
    assert api.count(idempotency_key="a-order-1", client_id=api.client_a_id) == 1
    assert api.count(idempotency_key="a-order-1", client_id=api.client_b_id) == 1


def test_a_finished_payment_replays_only_to_its_own_client(api: Api) -> None:
    with api.client(api.key_a) as a:
        created = post_payment(a, "a-finished").json()
        process_payment(api.container.runner(), created["id"], 1, owner="test")
        assert post_payment(a, "a-finished").status_code == 200
    with api.client(api.key_b) as b:
        replay = post_payment(b, "a-finished")
    assert replay.status_code == 202
    assert replay.json()["id"] != created["id"]
    assert replay.json()["status"] == "processing"
    assert "Idempotent-Replayed" not in replay.headers


def test_a_merchant_key_is_forbidden_on_every_ops_route(api: Api) -> None:
    with api.client(api.key_a) as a:
        victim = post_payment(a, "a-takeover-target").json()
    with api.container.engine.connect() as conn:
        token_before = conn.execute(
            sa.select(payments.c.lease_token).where(payments.c.id == victim["id"])
        ).scalar_one()
    for key in (api.key_a, api.key_b):
        with api.client(key) as merchant:
            attempts = [
                merchant.get("/v1/ops/leases"),
                merchant.get("/v1/ops/leases", params={"state": "active"}),
                merchant.get("/v1/ops/audit"),
                merchant.post(
                    f"/v1/ops/payments/{victim['id']}/takeover",
                    json={"reason": "mine now", "force": True},
                ),
                merchant.post(f"/v1/ops/payments/{victim['id']}/retry", json={"reason": "again"}),
                merchant.post(
                    "/v1/ops/payments/retry",
                    json={"status": "needs_attention", "reason": "all of them"},
                ),
                merchant.post(
                    "/v1/ops/payments/pay_" + "1" * 32 + "/takeover",
                    json={"reason": "guess", "force": True},
                ),
            ]
        for response in attempts:
            assert_problem(response, 403, "forbidden")
    with api.container.engine.connect() as conn:
        token_after = conn.execute(
            sa.select(payments.c.lease_token).where(payments.c.id == victim["id"])
        ).scalar_one()
        audits = conn.execute(
            sa.select(sa.func.count())
            .select_from(audit_log)
            .where(audit_log.c.payment_id == victim["id"])
        ).scalar_one()
    assert token_after == token_before
    assert audits == 0


def test_an_ops_key_cannot_use_merchant_routes(api: Api) -> None:
    with api.client(api.key_a) as a:
        theirs = post_payment(a, "a-for-ops").json()
    with api.client(api.ops_key) as ops:
        assert_problem(ops.get(f"/v1/payments/{theirs['id']}"), 403, "forbidden")
        assert_problem(
            ops.get("/v1/payments", params={"idempotency_key": "a-for-ops"}), 403, "forbidden"
        )
        assert_problem(post_payment(ops, "a-for-ops"), 403, "forbidden")


def test_an_ops_key_may_take_over_any_clients_payment(api: Api) -> None:
    """The counterpart of the 403s above: the ops route works, so they are not vacuous."""
    with api.client(api.key_b) as b:
        victim = post_payment(b, "b-ops-takeover").json()
    with api.client(api.ops_key) as ops:
        response = ops.post(
            f"/v1/ops/payments/{victim['id']}/takeover",
            json={"reason": "security test", "force": True},
        )
    assert response.status_code == 200, response.text
    assert response.json()["new_token"] > response.json()["old_token"]


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Basic cG9rXzE6",
        "bearer pok_" + "x" * 43,
        "Bearer pok_" + "x" * 43,
        "Bearer " + "x" * 47,
        "Bearer pok_" + "x" * 300,
    ],
)
def test_missing_or_unknown_keys_are_401_everywhere(api: Api, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    with httpx.Client(base_url=api.url, headers=headers, trust_env=False) as client:
        answers = [
            post_payment(client, "anonymous"),
            client.get("/v1/payments/pay_" + "0" * 32),
            client.get("/v1/payments", params={"idempotency_key": "anonymous"}),
            client.get("/v1/ops/leases"),
            client.post("/v1/ops/payments/pay_" + "0" * 32 + "/takeover", json={"reason": "x"}),
        ]
    for response in answers:
        problem = assert_problem(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "pok_" not in json.dumps(problem)
    assert api.count(idempotency_key="anonymous") == 0
