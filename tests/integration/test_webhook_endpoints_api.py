"""``/v1/webhook_endpoints`` over real HTTP on SQLite and PostgreSQL: secrets shown once,
the SSRF rules at creation, If-Match on changes, problems for every refusal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import webhook_endpoints
from tests.integration.hardening_helpers import Api, assert_problem, running_api
from tests.integration.webhook_helpers import resolver_table


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        running.container.resolver = resolver_table(
            {
                "hooks.merchant.example": ["93.184.216.34"],
                "internal.merchant.example": ["10.20.30.40"],
            }
        )
        yield running


URL = "https://hooks.merchant.example/payorch"


def test_an_endpoint_is_created_with_a_secret_shown_once(api: Api) -> None:
    with api.client() as client:
        created = client.post(
            "/v1/webhook_endpoints",
            json={"url": URL, "events": ["payment.succeeded"], "description": "shop"},
        )
        assert created.status_code == 201, created.text
        body = created.json()
        read = client.get(f"/v1/webhook_endpoints/{body['id']}")
        listed = client.get("/v1/webhook_endpoints")

    assert body["secret"].startswith("whsec_")
    assert body["status"] == "enabled" and body["disabled_reason"] is None
    assert body["events"] == ["payment.succeeded"] and body["url"] == URL
    assert created.headers["location"] == f"/v1/webhook_endpoints/{body['id']}"
    assert read.status_code == 200 and "secret" not in read.json()
    assert read.headers["etag"] == body["etag"]
    assert [e["id"] for e in listed.json()["data"]] == [body["id"]]
    with api.container.engine.connect() as conn:
        stored = conn.execute(sa.select(webhook_endpoints.c.secret_encrypted)).scalar_one()
    assert body["secret"] not in stored and body["secret"][6:] not in stored


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hooks",
        "https://10.0.0.1/hooks",
        "https://169.254.169.254/latest/meta-data/",
        "https://internal.merchant.example/hooks",  # a name resolving to a private address
        "https://localhost.invalid/hooks",  # does not resolve
        "http://hooks.merchant.example/hooks",  # plain http outside dev
        "https://8.8.8.8:25/",  # a port other than 443
        "https://[2002:7f00:1::1]/hooks",  # 6to4 of 127.0.0.1
        "https://[fec0::1]/hooks",  # site-local
    ],
)
def test_urls_that_could_reach_inside_our_network_are_refused_outside_dev(
    api: Api, url: str
) -> None:
    with api.client() as client:
        response = client.post("/v1/webhook_endpoints", json={"url": url, "events": ["*"]})
    problem = assert_problem(response, 400, "invalid-request")
    assert "url" in problem["detail"] or "host" in problem["detail"]
    with api.container.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(webhook_endpoints)).scalar() == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hooks",  # loopback
        "https://[::1]/hooks",
        "https://internal.merchant.example/hooks",  # a name resolving to a private address
        "https://[2002:7f00:1::1]/hooks",  # 6to4 of 127.0.0.1
        "http://hooks.merchant.example/hooks",  # plain http
    ],
)
def test_a_refusal_the_private_flag_would_lift_names_the_flag(api: Api, url: str) -> None:
    """Someone trying payorch locally points a webhook at their laptop: the refusal says
    the setting exists, and that it is not for production."""
    with api.client() as client:
        response = client.post("/v1/webhook_endpoints", json={"url": url, "events": ["*"]})
    detail = assert_problem(response, 400, "invalid-request")["detail"]
    assert "PAYORCH_WEBHOOK_ALLOW_PRIVATE=true" in detail, detail
    assert "never in production" in detail, detail


def test_a_bad_port_names_the_ports_setting_and_a_name_that_does_not_resolve_neither(
    api: Api,
) -> None:
    # The private flag would lift the port rule too, but the setting for a port is the list
    # of ports: naming the flag would send people to the wrong knob.
    with api.client() as client:
        unresolved = client.post(
            "/v1/webhook_endpoints", json={"url": "https://localhost.invalid/h", "events": ["*"]}
        )
        port = client.post(
            "/v1/webhook_endpoints", json={"url": "https://8.8.8.8:25/", "events": ["*"]}
        )
    assert "PAYORCH_" not in assert_problem(unresolved, 400, "invalid-request")["detail"]
    port_detail = assert_problem(port, 400, "invalid-request")["detail"]
    assert "PAYORCH_WEBHOOK_ALLOWED_PORTS" in port_detail, port_detail
    assert "ALLOW_PRIVATE" not in port_detail, port_detail


def test_an_unknown_event_type_is_refused_naming_it(api: Api) -> None:
    with api.client() as client:
        response = client.post(
            "/v1/webhook_endpoints", json={"url": URL, "events": ["payment.suceeded"]}
        )
    problem = assert_problem(response, 400, "invalid-request")
    assert "payment.suceeded" in problem["detail"]


def test_another_merchants_endpoint_does_not_exist_for_you(api: Api) -> None:
    with api.client() as client:
        created = client.post("/v1/webhook_endpoints", json={"url": URL, "events": ["*"]}).json()
    with api.client(api.key_b) as other:
        assert_problem(other.get(f"/v1/webhook_endpoints/{created['id']}"), 404, "not-found")
        assert_problem(other.delete(f"/v1/webhook_endpoints/{created['id']}"), 404, "not-found")
        assert other.get("/v1/webhook_endpoints").json()["data"] == []
    with api.client(api.ops_key) as ops:
        assert_problem(ops.get("/v1/webhook_endpoints"), 403, "forbidden")


def test_rotating_gives_a_new_secret_and_a_stale_if_match_changes_nothing(api: Api) -> None:
    with api.client() as client:
        created = client.post("/v1/webhook_endpoints", json={"url": URL, "events": ["*"]}).json()
        path = f"/v1/webhook_endpoints/{created['id']}"
        rotated = client.post(f"{path}/rotate_secret", headers={"If-Match": created["etag"]})
        assert rotated.status_code == 200, rotated.text
        stale = client.post(f"{path}/rotate_secret", headers={"If-Match": created["etag"]})
        stale_delete = client.delete(path, headers={"If-Match": created["etag"]})
        malformed = client.delete(path, headers={"If-Match": "3"})
        after = client.get(path).json()

    new = rotated.json()
    assert new["secret"].startswith("whsec_") and new["secret"] != created["secret"]
    assert new["etag"] != created["etag"] and new["secret_rotated_at"] is not None
    assert_problem(stale, 412, "precondition-failed")
    assert_problem(stale_delete, 412, "precondition-failed")
    assert_problem(malformed, 400, "invalid-request")
    assert after["etag"] == new["etag"] and after["status"] == "enabled"


def test_a_disabled_endpoint_is_re_enabled_and_a_deleted_one_is_gone(api: Api) -> None:
    with api.client() as client:
        created = client.post("/v1/webhook_endpoints", json={"url": URL, "events": ["*"]}).json()
        path = f"/v1/webhook_endpoints/{created['id']}"
        disabled = client.post(path, json={"status": "disabled"}).json()
        enabled = client.post(
            path,
            json={"status": "enabled", "events": ["payment.failed"]},
            headers={"If-Match": disabled["etag"]},
        ).json()
        refused = client.post(path, json={"url": "https://10.0.0.1/"})
        deleted = client.delete(path, headers={"If-Match": enabled["etag"]})
        gone = client.get(path)

    assert disabled["status"] == "disabled" and disabled["disabled_reason"]
    assert enabled["status"] == "enabled" and enabled["disabled_reason"] is None
    assert enabled["events"] == ["payment.failed"]
    assert_problem(refused, 400, "invalid-request")
    assert deleted.status_code == 204
    assert_problem(gone, 404, "not-found")


def test_a_client_may_have_sixteen_endpoints_and_the_seventeenth_is_refused(api: Api) -> None:
    with api.client() as client:
        made = [
            client.post("/v1/webhook_endpoints", json={"url": f"{URL}/{n}", "events": ["*"]})
            for n in range(16)
        ]
        refused = client.post("/v1/webhook_endpoints", json={"url": URL, "events": ["*"]})
        client.delete(f"/v1/webhook_endpoints/{made[0].json()['id']}")
        after_a_delete = client.post("/v1/webhook_endpoints", json={"url": URL, "events": ["*"]})
    with api.client(api.key_b) as other:
        others_first = other.post("/v1/webhook_endpoints", json={"url": URL, "events": ["*"]})

    assert [m.status_code for m in made] == [201] * 16
    problem = assert_problem(refused, 409, "conflict")
    assert "16 webhook endpoints" in problem["detail"]
    assert after_a_delete.status_code == 201
    assert others_first.status_code == 201  # the limit is per client
