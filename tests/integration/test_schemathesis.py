"""The API against its own OpenAPI document (issue 7): schemathesis generates requests for
every operation in ``/openapi.json`` (valid ones and invalid ones), sends them over real
HTTP with a valid merchant key (an ops key for ``/v1/ops``), and checks every answer:
no 5xx, only documented status codes, documented content types and headers, and bodies
that match the documented schemas.

Bounded and deterministic: ``MAX_EXAMPLES`` per operation, derandomized, no example
database; on PostgreSQL and SQLite.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.integration.hardening_helpers import Api, running_api, sqlite_url

MAX_EXAMPLES = 40


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path_factory.mktemp("schemathesis"))
    else:
        url = request.getfixturevalue("make_postgres_database")()
    with running_api(url, stripe_webhook_secret="whsec_schemathesis") as running:
        yield running


# Generated requests reuse Idempotency-Keys (a short key like "0" comes up again with
# another body), and the contract's answer to a reused key is 422 even for a schema-valid
# request.  Otherwise schemathesis's own defaults.
# The ops payment list's cursor is opaque: a schema-valid string this API never handed out is
# refused with 400 (not silently read as "from the start"), so 400 is an expected answer there.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
        "operations": [
            {
                "include-path": "/v1/ops/payments",
                "include-method": "GET",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
            # The merchant's payment list: starting_after / ending_before must name one of
            # the caller's own payments (decision 0089), which no schema can say.
            {
                "include-path": "/v1/payments",
                "include-method": "GET",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
            # Webhook URLs must pass the SSRF rules (no schema can say "resolves to a public
            # address"), and 'after' must name an existing event: a schema-valid value can
            # still be a 400.
            {
                "include-path-regex": "^/v1/webhook_endpoints",
                "include-method": "POST",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
            {
                "include-path": "/v1/events",
                "include-method": "GET",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
            # Routing rules must name the merchant's own enabled accounts, and a payment body
            # the provider's minimum amount: a schema-valid value can still be a 400.
            {
                "include-path-regex": "^/v1/routing",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
            # A bulk retry's 'since' is any RFC 3339 time to the schema; one Python cannot
            # read (a leap second) is refused with 400 rather than guessed.
            {
                "include-path": "/v1/ops/payments/retry",
                "include-method": "POST",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
            # A schema-valid event is still refused without Stripe's signature over its bytes.
            {
                "include-path": "/v1/providers/stripe/webhooks",
                "include-method": "POST",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            },
        ],
    }
)


def _operations(api: Api) -> list[schemathesis.APIOperation]:
    loaded = schemathesis.openapi.from_url(f"{api.url}/openapi.json", config=CONFIG)
    return [result.ok() for result in loaded.get_all_operations()]


def test_the_document_covers_every_route(api: Api) -> None:
    labels = {operation.label for operation in _operations(api)}
    assert {
        "POST /v1/payments",
        "GET /v1/payments",
        "GET /v1/payments/{payment_id}",
        "GET /v1/ops/leases",
        "POST /v1/ops/payments/{payment_id}/takeover",
        "POST /v1/ops/payments/{payment_id}/retry",
        "POST /v1/ops/payments/retry",
        "GET /v1/ops/payments/{payment_id}",
        "GET /v1/ops/payments",
        "GET /v1/ops/status",
        "POST /v1/webhook_endpoints",
        "GET /v1/webhook_endpoints",
        "GET /v1/webhook_endpoints/{endpoint_id}",
        "POST /v1/webhook_endpoints/{endpoint_id}",
        "DELETE /v1/webhook_endpoints/{endpoint_id}",
        "POST /v1/webhook_endpoints/{endpoint_id}/rotate_secret",
        "GET /v1/events",
        "GET /v1/events/{event_id}",
        "GET /v1/ops/events/{event_id}/deliveries",
        "POST /v1/ops/events/{event_id}/redeliver",
        "POST /v1/providers/stripe/webhooks",
        "GET /v1/routing",
        "PUT /v1/routing",
        "POST /v1/routing/evaluate",
        "GET /v1/ops/clients/{client_id}/routing",
    } <= labels


def test_every_answer_matches_the_openapi_document(api: Api, subtests: pytest.Subtests) -> None:
    seen: dict[str, Counter[int]] = defaultdict(Counter)
    for operation in _operations(api):

        @given(case=operation.as_strategy())
        @settings(
            max_examples=MAX_EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        def conforms(case: schemathesis.Case) -> None:
            key = api.ops_key if case.path.startswith("/v1/ops/") else api.key_a
            headers = {"Authorization": f"Bearer {key}"}
            response = case.call_and_validate(base_url=api.url, headers=headers)
            seen[case.operation.label][response.status_code] += 1

        with subtests.test(operation.label):
            conforms()

    # The keys worked: authenticated paths were exercised, not only refused.
    assert seen["POST /v1/payments"][202] > 0, seen
    assert seen["GET /v1/payments"][200] > 0, seen
    assert seen["GET /v1/ops/leases"][200] > 0, seen
    assert seen["GET /v1/ops/audit"][200] > 0, seen
    assert seen["GET /v1/ops/payments"][200] > 0, seen
    assert seen["GET /v1/ops/status"][200] > 0, seen
