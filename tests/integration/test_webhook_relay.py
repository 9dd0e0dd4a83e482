"""The relay in this process against a real receiver on 127.0.0.1, on SQLite and
PostgreSQL: fan-out, signatures the receiver verifies, retries, 410, the failing window,
redeliver, events listing, retention.  The database clock seam moves time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from orchestrator.events.relay import Relay, publish_stats
from tests.integration.hardening_helpers import Api, assert_problem, running_api
from tests.integration.webhook_helpers import (
    MovableClock,
    attempt_rows,
    client_of,
    delivery_rows,
    event_ids,
    finished_payment,
    register,
)
from tests.support.webhook_receiver import Behaviour, WebhookReceiver

FAST = {
    "webhook_allow_private": True,
    "webhook_retry_base_seconds": 1.0,
    "webhook_retry_cap_seconds": 60.0,
    "webhook_connect_timeout_seconds": 1.0,
    "webhook_timeout_seconds": 2.0,
    "webhook_lease_seconds": 10.0,
    "relay_concurrency": 4,
}


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
def api(database_url: str, clock: MovableClock) -> Iterator[Api]:
    with running_api(database_url, clock=clock, **FAST) as running:
        yield running


@pytest.fixture
def relay(api: Api) -> Iterator[Relay]:
    worker = api.container.relay(name="relay-test")
    yield worker
    worker.close()


def drain(relay: Relay, clock: MovableClock, *, passes: int = 50) -> None:
    """Run passes, moving the clock past every backoff, until nothing is left to do."""
    for _ in range(passes):
        report = relay.run_once()
        if not report.did_something:
            return
        clock.advance(seconds=120)
    raise AssertionError("the relay still had work after many passes")


def test_every_event_reaches_the_endpoint_signed_with_its_sequence(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver() as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        paid = finished_payment(api.container, merchant, "wh-1")
        declined = finished_payment(
            api.container, merchant, "wh-2", payment_method="pm_card_chargeDeclined"
        )

        report = relay.run_once()

    assert report.published == 2 and report.deliveries_created == 2 and report.delivered == 2
    assert receiver.unverified() == []
    bodies = {r.body["data"]["object"]["id"]: r.body for r in receiver.received}
    assert bodies[paid]["type"] == "payment.succeeded"
    assert bodies[declined]["type"] == "payment.failed"
    assert bodies[paid]["sequence"] == 1 and bodies[paid]["id"].startswith("evt_")
    assert receiver.delivered_ids() == set(event_ids(api.container))
    assert all(row.status == "delivered" for row in delivery_rows(api.container))


def test_an_endpoint_only_gets_the_types_it_subscribed_to_and_only_its_clients(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    with WebhookReceiver() as mine, WebhookReceiver() as theirs:
        mine.secrets.append(register(api, mine.url, ["payment.failed"])["secret"])
        register(api, theirs.url, ["*"], key=api.key_b)
        merchant = client_of(api.container, api.client_a_id)
        finished_payment(api.container, merchant, "wh-s")
        declined = finished_payment(
            api.container, merchant, "wh-f", payment_method="pm_card_chargeDeclined"
        )
        drain(relay, clock)

    assert [r.body["data"]["object"]["id"] for r in mine.received] == [declined]
    assert theirs.received == []


def test_a_failing_endpoint_is_retried_with_the_same_id_until_it_answers(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver(Behaviour(status=503)) as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        finished_payment(api.container, merchant, "wh-r")
        first = relay.run_once()
        again_too_early = relay.run_once()
        clock.advance(seconds=2)  # past the first ceiling (base 1 s)
        receiver.behaviour.status = 200
        retried = relay.run_once()

    assert first.retrying == 1 and again_too_early.attempted == 0
    assert retried.delivered == 1
    assert [r.status for r in receiver.received] == [503, 200]
    assert len({r.webhook_id for r in receiver.received}) == 1
    attempts = attempt_rows(api.container)
    assert [(a.attempt, a.outcome, a.status_code) for a in attempts] == [
        (1, "http_error", 503),
        (2, "delivered", 200),
    ]
    assert attempts[0].response_body == "ok" and attempts[0].latency_ms >= 0


def test_410_disables_the_endpoint_and_its_deliveries_stop(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver(Behaviour(status=410)) as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        finished_payment(api.container, merchant, "wh-g1")
        report = relay.run_once()
        finished_payment(api.container, merchant, "wh-g2")
        drain(relay, clock)

    assert report.endpoints_disabled == [endpoint["id"]]
    assert len(receiver.received) == 1
    with api.client() as client:
        now = client.get(f"/v1/webhook_endpoints/{endpoint['id']}").json()
    assert now["status"] == "disabled" and "410" in now["disabled_reason"]
    assert publish_stats(api.container.read_only_uow).disabled_endpoints == 1


def test_an_endpoint_failing_for_the_whole_window_is_disabled_and_the_delivery_given_up(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver(Behaviour(status=500)) as receiver:
        endpoint = register(api, receiver.url)
        finished_payment(api.container, merchant, "wh-w")
        relay.run_once()
        clock.advance(hours=71)
        relay.run_once()  # still inside the window: retried later
        clock.advance(hours=2)
        last = relay.run_once()

    assert last.endpoints_disabled == [endpoint["id"]] and last.gave_up == 1
    (delivery,) = delivery_rows(api.container)
    assert delivery.status == "failed" and delivery.attempts == 3
    with api.client() as client:
        now = client.get(f"/v1/webhook_endpoints/{endpoint['id']}").json()
    assert now["status"] == "disabled" and "72 h" in now["disabled_reason"]


def test_a_redirect_is_recorded_as_a_failure_and_not_followed(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    target = WebhookReceiver()
    with target, WebhookReceiver(Behaviour(redirect_to=target.url)) as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        finished_payment(api.container, merchant, "wh-302")
        relay.run_once()
    assert target.received == []
    (attempt,) = attempt_rows(api.container)
    assert attempt.status_code == 302 and "not followed" in attempt.error


def test_an_operator_redelivers_an_event_and_the_deliveries_show_every_attempt(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver() as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        finished_payment(api.container, merchant, "wh-rd")
        relay.run_once()
        (event_id,) = event_ids(api.container)
        with api.client(api.ops_key) as ops:
            no_reason = ops.post(f"/v1/ops/events/{event_id}/redeliver", json={"reason": " "})
            done = ops.post(
                f"/v1/ops/events/{event_id}/redeliver", json={"reason": "merchant lost it"}
            )
            relay.run_once()
            deliveries = ops.get(f"/v1/ops/events/{event_id}/deliveries").json()
            audit = ops.get("/v1/ops/audit").json()["data"]
        with api.client() as merchant_client:
            forbidden = merchant_client.get(f"/v1/ops/events/{event_id}/deliveries")

    assert_problem(no_reason, 400, "invalid-request")
    assert done.status_code == 200 and done.json()["requeued"] == 1
    assert done.json()["audit"]["action"] == "redeliver"
    assert [r.webhook_id for r in receiver.received] == [event_id, event_id]
    assert receiver.unverified() == []
    (delivery,) = deliveries["deliveries"]
    assert delivery["status"] == "delivered" and delivery["attempts"] == 2
    assert [a["outcome"] for a in delivery["attempt_log"]] == ["delivered", "delivered"]
    assert audit[0]["action"] == "redeliver" and "merchant lost it" in audit[0]["reason"]
    assert_problem(forbidden, 403, "forbidden")


def test_after_a_rotation_both_secrets_sign_during_the_grace_period(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver() as receiver:
        endpoint = register(api, receiver.url)
        with api.client() as client:
            rotated = client.post(f"/v1/webhook_endpoints/{endpoint['id']}/rotate_secret").json()
        receiver.secrets.append(endpoint["secret"])  # a receiver not switched yet
        finished_payment(api.container, merchant, "wh-rot1")
        relay.run_once()
        receiver.secrets[:] = [rotated["secret"]]  # switched
        finished_payment(api.container, merchant, "wh-rot2")
        relay.run_once()
        clock.advance(hours=25)  # the grace period is over
        receiver.secrets[:] = [endpoint["secret"]]
        finished_payment(api.container, merchant, "wh-rot3")
        relay.run_once()

    assert [r.verified for r in receiver.received] == [True, True, False]


def test_events_are_listed_oldest_first_by_type_and_after_an_id(api: Api, clock) -> None:
    merchant = client_of(api.container, api.client_a_id)
    for n in range(3):
        finished_payment(api.container, merchant, f"ev-{n}")
    finished_payment(api.container, merchant, "ev-d", payment_method="pm_card_chargeDeclined")
    other = client_of(api.container, api.client_b_id)
    finished_payment(api.container, other, "ev-other")

    with api.client() as client:
        first = client.get("/v1/events", params={"limit": 2}).json()
        rest = client.get("/v1/events", params={"after": first["data"][-1]["id"]}).json()
        failed = client.get("/v1/events", params={"type": "payment.failed"}).json()
        unknown_type = client.get("/v1/events", params={"type": "payment.nope"})
        unknown_after = client.get("/v1/events", params={"after": "evt_" + "0" * 32})
        one = client.get(f"/v1/events/{first['data'][0]['id']}")
    with api.client(api.key_b) as other_client:
        theirs = other_client.get("/v1/events").json()
        not_theirs = other_client.get(f"/v1/events/{first['data'][0]['id']}")

    assert first["has_more"] is True and len(first["data"]) == 2
    assert len(rest["data"]) == 2 and rest["has_more"] is False
    ids = [e["id"] for e in first["data"] + rest["data"]]
    assert len(set(ids)) == 4
    assert [e["type"] for e in failed["data"]] == ["payment.failed"]
    event = one.json()
    assert set(event) == {"id", "type", "created_at", "sequence", "data"}
    assert event["data"]["object"]["object"] == "payment"
    assert_problem(unknown_type, 400, "invalid-request")
    assert_problem(unknown_after, 400, "invalid-request")
    assert len(theirs["data"]) == 1
    assert_problem(not_theirs, 404, "not-found")


def test_retention_forgets_old_delivered_events_but_keeps_each_payments_newest(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    from orchestrator.events.retention import purge_delivered_events

    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver() as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        payment_id = finished_payment(api.container, merchant, "ret-1")
        drain(relay, clock)
        with api.container.uow() as uow:
            # A second event of the same payment (as a refund would write).
            uow.outcomes.add_outbox_event(
                payment_id, "refund.succeeded", {"id": "x"}, now=uow.now()
            )
            uow.commit()
        drain(relay, clock)

    assert (
        purge_delivered_events(api.container.uow, api.container.settings) == 0
    )  # nothing old enough yet
    clock.advance(days=31)
    purged = purge_delivered_events(api.container.uow, api.container.settings)

    assert purged == 2
    with api.container.uow() as uow:
        left = uow.events.for_payment(payment_id)
    assert [(e.event_type, e.sequence) for e in left] == [("refund.succeeded", 2)]
    assert delivery_rows(api.container) == [] and attempt_rows(api.container) == []
    with api.container.uow() as uow:
        uow.outcomes.add_outbox_event(payment_id, "refund.failed", {"id": "y"}, now=uow.now())
        uow.commit()
        assert uow.events.for_payment(payment_id)[-1].sequence == 3


def test_the_relay_role_exports_attempts_backlog_and_disabled_endpoints_and_nothing_else(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    from orchestrator import metrics
    from tests.integration.hardening_helpers import metric_samples

    def sample(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return metric_samples(metrics.render(metrics.Role.RELAY)[0].decode()).get(key, 0.0)

    merchant = client_of(api.container, api.client_a_id)
    before = sample("payorch_webhook_attempts_total", outcome="http_error")
    with WebhookReceiver(Behaviour(status=500)) as receiver:
        register(api, receiver.url)
        finished_payment(api.container, merchant, "wh-m")
        relay.run_once()
    publish_stats(api.container.read_only_uow)

    text = metrics.render(metrics.Role.RELAY)[0].decode()
    assert sample("payorch_webhook_attempts_total", outcome="http_error") == before + 1
    assert sample("payorch_webhook_backlog") == 1
    assert sample("payorch_webhook_oldest_undelivered_age_seconds") >= 0
    assert "payorch_webhook_disabled_endpoints" in text
    assert "payorch_http_requests_total" not in text  # the API's series are not the relay's
    assert "payorch_webhook_backlog" not in metrics.render(metrics.Role.API)[0].decode()


def test_the_ops_payment_detail_lists_each_events_deliveries(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver() as receiver:
        endpoint = register(api, receiver.url)
        receiver.secrets.append(endpoint["secret"])
        payment_id = finished_payment(api.container, merchant, "wh-detail")
        relay.run_once()
    with api.client(api.ops_key) as ops:
        detail = ops.get(f"/v1/ops/payments/{payment_id}").json()
        status = ops.get("/v1/ops/status").json()

    (event,) = detail["events"]
    assert event["event_id"].startswith("evt_") and event["sequence"] == 1
    assert event["deliveries"] == [
        {"endpoint_url": receiver.url, "status": "delivered", "attempts": 1}
    ]
    assert status["webhook_backlog"] == 0 and status["disabled_webhook_endpoints"] == 0


def test_retention_keeps_events_owed_to_live_endpoints_not_to_disabled_ones(
    api: Api, relay: Relay, clock: MovableClock
) -> None:
    from orchestrator.events.retention import purge_delivered_events

    merchant = client_of(api.container, api.client_a_id)
    with WebhookReceiver(Behaviour(status=503)) as receiver:
        endpoint = register(api, receiver.url)
        finished_payment(api.container, merchant, "ret-live-1")
        finished_payment(api.container, merchant, "ret-live-2")
        relay.run_once()  # both pending, retrying
    clock.advance(days=31)
    assert purge_delivered_events(api.container.uow, api.container.settings) == 0

    with api.client() as client:
        client.post(f"/v1/webhook_endpoints/{endpoint['id']}", json={"status": "disabled"})
    # Each payment's newest event stays (its sequence continues); only its deliveries go.
    assert purge_delivered_events(api.container.uow, api.container.settings) == 2
    assert delivery_rows(api.container) == [] and attempt_rows(api.container) == []


def test_the_relay_loop_keeps_delivering_to_others_while_one_endpoint_hangs(
    database_url: str,
) -> None:
    """``payorch relay``'s loop: each thread claims one delivery, so an endpoint that hangs
    holds the threads attempting it and nobody else's deliveries wait for its timeout."""
    import threading

    settings = {**FAST, "webhook_timeout_seconds": 10.0, "webhook_lease_seconds": 30.0}
    with running_api(database_url, **settings) as api:
        merchant = client_of(api.container, api.client_a_id)
        slow_behaviour = Behaviour(hang_share=1.0, hang_seconds=12.0)
        with WebhookReceiver(slow_behaviour) as slow, WebhookReceiver() as fast:
            slow_id = register(api, slow.url)["id"]
            fast_endpoint = register(api, fast.url)
            fast_id = fast_endpoint["id"]
            fast.secrets.append(fast_endpoint["secret"])
            for n in range(3):
                finished_payment(api.container, merchant, f"hol-{n}")
            relay = api.container.relay(name="relay-loop")
            stop = threading.Event()
            loop = threading.Thread(target=relay.run, args=(stop,))
            loop.start()
            try:
                fast.wait_for(lambda r: len(r.delivered_ids()) == 3, timeout=8)
                deadline = time.monotonic() + 8
                while not all_recorded(api, fast_id, 3):
                    assert time.monotonic() < deadline, "the fast deliveries were not recorded"
                    time.sleep(0.05)
                # The slow endpoint's attempts are all still in flight (10 s timeout).
                assert all_recorded(api, slow_id, 0)
                assert slow.received == []
            finally:
                stop.set()
                loop.join(timeout=30)
                relay.close()
        assert not loop.is_alive()
        assert fast.unverified() == []


def all_recorded(api: Api, endpoint_id: str, count: int) -> bool:
    """Exactly ``count`` attempts recorded for the endpoint's deliveries."""
    from orchestrator.db.tables import webhook_deliveries, webhook_delivery_attempts

    a, d = webhook_delivery_attempts.c, webhook_deliveries.c
    with api.container.engine.connect() as conn:
        recorded = conn.execute(
            sa.select(sa.func.count())
            .select_from(webhook_delivery_attempts.join(webhook_deliveries, d.id == a.delivery_id))
            .where(d.endpoint_id == endpoint_id)
        ).scalar_one()
    return bool(recorded == count)


def test_the_relay_loop_logs_its_start_each_failed_attempt_and_true_counts_at_its_stop(
    database_url: str,
) -> None:
    """An operator reading ``payorch relay``'s log sees it start, sees every attempt a
    receiver refused (which endpoint, what it answered, whether it is retried) and, at the
    stop, counts that match the attempts recorded in the database."""
    import logging
    import threading

    import structlog
    from structlog.testing import LogCapture

    from orchestrator.db.tables import webhook_delivery_attempts

    capture = LogCapture()
    with running_api(database_url, **FAST) as api:
        # After the API's start-up, which configures logging for itself.
        saved = structlog.get_config()
        structlog.configure(
            processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
        )
        try:
            merchant = client_of(api.container, api.client_a_id)
            with (
                WebhookReceiver(Behaviour(status=503)) as down,
                WebhookReceiver() as up,
            ):
                down_endpoint = register(api, down.url)
                down.secrets.append(down_endpoint["secret"])
                down_id = down_endpoint["id"]
                up_endpoint = register(api, up.url)
                up.secrets.append(up_endpoint["secret"])
                for n in range(2):
                    finished_payment(api.container, merchant, f"log-{n}")
                relay = api.container.relay(name="relay-logs")
                stop = threading.Event()
                loop = threading.Thread(target=relay.run, args=(stop,))
                loop.start()
                try:
                    deadline = time.monotonic() + 15
                    while not (down.received and len(up.delivered_ids()) >= 2):
                        assert time.monotonic() < deadline, "the relay attempted nothing"
                        time.sleep(0.05)
                finally:
                    stop.set()
                    loop.join(timeout=30)
                    relay.close()
                assert not loop.is_alive()
            with api.container.engine.connect() as conn:
                outcomes = [
                    str(row.outcome)
                    for row in conn.execute(sa.select(webhook_delivery_attempts.c.outcome))
                ]
        finally:
            structlog.configure(**saved)

    events = [entry["event"] for entry in capture.entries]
    assert events.count("relay_started") == 1 and events.count("relay_stopped") == 1
    failed = [e for e in capture.entries if e["event"] == "webhook_attempt_failed"]
    assert failed, events
    assert "relay_delivery_failed" not in events
    assert {e["endpoint"] for e in failed} == {down_id}
    assert all(e["status_code"] == 503 and e["gave_up"] is False for e in failed)
    # True counts: the stop line adds up to what the database recorded.
    stopped = next(e for e in capture.entries if e["event"] == "relay_stopped")
    assert stopped["attempted"] == len(outcomes) > 0
    assert stopped["delivered"] == outcomes.count("delivered") >= 2
    assert stopped["retrying"] == len(failed) == len(outcomes) - outcomes.count("delivered")
    fanned = [e for e in capture.entries if e["event"] == "relay_fan_out"]
    assert fanned and all("attempted" not in e for e in fanned)
