"""Prometheus metrics (issues 7 and 16): every series the contract names is exposed from
the start by the process role that moves it, and by no other; each one moves with the
traffic that should move it.

The API's ``/metrics`` is read over real HTTP around real requests and an operator
takeover; the worker's and the sweeper's series are read through the same exposition their
metrics ports serve (``metrics.render(Role...)``), in this process, around worker protocol
runs and a sweep.  A real ``payorch worker --metrics-port`` (prefork pool, so the tasks run
in child processes) shows the provider calls its children made, and no API series.

Counters are process-wide, so the in-process tests assert exact *differences* around
traffic they alone send.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest

from devtools.simulator import start_in_thread
from orchestrator import metrics
from orchestrator.broker import CeleryPublisher
from orchestrator.domain.model import Role
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.ops.metrics_server import database_gauges
from orchestrator.ops.status import get_status
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force, reload
from tests.integration.hardening_helpers import (
    BODY,
    Api,
    metric,
    payorch_environment,
    post_payment,
    running_api,
    sqlite_url,
)
from tests.support.processes import ProcessManager, free_port, wait_for_http
from workers.celery_app import create_celery_app

API_EXPOSED = [
    ("payorch_payments_accepted_total", {}),
    ("payorch_idempotent_replays_total", {"state": "processing"}),
    ("payorch_idempotent_replays_total", {"state": "succeeded"}),
    ("payorch_idempotency_key_reuse_conflicts_total", {}),
    ("payorch_accept_loop_fallbacks_total", {"reason": "busy"}),
    ("payorch_accept_loop_fallbacks_total", {"reason": "connect_failed"}),
    ("payorch_lease_takeovers_total", {"by": "operator"}),
    ("payorch_payment_records", {"status": "processing"}),
    ("payorch_payment_records", {"status": "needs_attention"}),
    ("payorch_oldest_processing_age_seconds", {}),
    ("payorch_task_publish_failures_total", {}),
]
WORKER_EXPOSED = [
    ("payorch_provider_calls_total", {"operation": "create", "outcome": "ok"}),
    ("payorch_provider_calls_total", {"operation": "confirm", "outcome": "declined"}),
    ("payorch_provider_calls_total", {"operation": "retrieve", "outcome": "unknown"}),
    ("payorch_provider_call_seconds_count", {"operation": "confirm"}),
    ("payorch_provider_call_seconds_bucket", {"operation": "confirm", "le": "0.1"}),
    ("payorch_payments_finished_total", {"status": "succeeded"}),
    ("payorch_fenced_writes_total", {}),
    ("payorch_lease_takeovers_total", {"by": "sweeper"}),  # a beat-driven sweep
]
SWEEPER_EXPOSED = [
    ("payorch_lease_takeovers_total", {"by": "sweeper"}),
    ("payorch_wakeups_dispatched_total", {}),  # the dispatcher the sweeper hosts
    ("payorch_task_publish_failures_total", {}),
    ("payorch_payments_needs_attention_total", {}),
    ("payorch_idempotency_keys_purged_total", {}),
]
WORKER_ONLY = ["payorch_provider_calls", "payorch_provider_call_seconds",
               "payorch_fenced_writes", "payorch_payments_finished"]  # fmt: skip
API_ONLY = ["payorch_payments_accepted", "payorch_http_requests", "payorch_payment_records",
            "payorch_idempotent_replays"]  # fmt: skip


def families(text: str) -> set[str]:
    """The metric family names of an exposition (``# TYPE name kind`` lines)."""
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def role_text(role: metrics.Role) -> Callable[[], str]:
    """What ``role``'s metrics port serves, read in this process."""
    return lambda: metrics.render(role)[0].decode()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path_factory.mktemp("metrics"))
    else:
        url = request.getfixturevalue("make_postgres_database")()
    with running_api(url) as running:
        yield running


def scrape(api: Api) -> str:
    """What ``payorch api --metrics-port`` serves, with the API's database gauges, read in
    this process (``test_cli_terminal`` scrapes a real ``payorch api``'s metrics port)."""
    body, content_type = metrics.render(
        metrics.Role.API, database_gauges(api.container.read_only_uow)
    )
    assert content_type.startswith("text/plain")
    return body.decode()


class Delta:
    """Metric values before and after some traffic, from the API or a role's exposition."""

    def __init__(self, source: Api | Callable[[], str]) -> None:
        self._read = (lambda: scrape(source)) if isinstance(source, Api) else source
        self.before = self._read()
        self.after = ""

    def take(self) -> None:
        self.after = self._read()

    def __call__(self, name: str, **labels: str) -> float:
        try:
            before = metric(self.before, name, **labels)
        except KeyError:  # a label set seen for the first time (HTTP routes and statuses)
            before = 0.0
        return metric(self.after, name, **labels) - before


@pytest.mark.parametrize(("name", "labels"), API_EXPOSED)
def test_every_api_series_is_exposed_before_any_traffic(
    api: Api, name: str, labels: dict[str, str]
) -> None:
    metric(scrape(api), name, **labels)  # KeyError when absent


@pytest.mark.parametrize(
    ("role", "name", "labels"),
    [(metrics.Role.WORKER, name, labels) for name, labels in WORKER_EXPOSED]
    + [(metrics.Role.SWEEPER, name, labels) for name, labels in SWEEPER_EXPOSED],
)
def test_every_worker_and_sweeper_series_is_exposed_before_any_traffic(
    role: metrics.Role, name: str, labels: dict[str, str]
) -> None:
    metric(role_text(role)(), name, **labels)


def test_each_role_exports_only_its_own_series_and_no_created_series(api: Api) -> None:
    api_families = families(scrape(api))
    worker_families = families(role_text(metrics.Role.WORKER)())
    sweeper_families = families(role_text(metrics.Role.SWEEPER)())

    assert not api_families & set(WORKER_ONLY)  # no reassuring zeros for worker work
    assert not worker_families & set(API_ONLY)
    assert not sweeper_families & set(WORKER_ONLY + API_ONLY)
    for text in (scrape(api), role_text(metrics.Role.WORKER)()):
        assert "_created" not in text


def test_http_requests_are_counted_by_route_template_method_and_status(api: Api) -> None:
    delta = Delta(api)
    with api.client() as client:
        paid = post_payment(client, "metrics-http").json()
        assert client.get(f"/v1/payments/{paid['id']}").status_code == 200
        assert client.get("/v1/payments/pay_" + "f" * 32).status_code == 404
        assert client.get("/no/such/route").status_code == 404
    delta.take()
    route = "/v1/payments/{payment_id}"
    assert (
        delta("payorch_http_requests_total", method="POST", route="/v1/payments", status="202") == 1
    )
    assert delta("payorch_http_requests_total", method="GET", route=route, status="200") == 1
    assert delta("payorch_http_requests_total", method="GET", route=route, status="404") == 1
    assert delta("payorch_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert delta("payorch_http_request_duration_seconds_count", method="GET", route=route) == 2
    assert paid["id"] not in delta.after  # never the raw path as a label


def test_accepts_replays_and_key_reuse_move_their_counters(api: Api) -> None:
    delta = Delta(api)
    with api.client() as client:
        first = post_payment(client, "metrics-accept")
        post_payment(client, "metrics-accept")  # replay while processing
        post_payment(client, "metrics-accept")
        post_payment(client, "metrics-accept", {**BODY, "amount": 7000})  # 422
        process_payment(api.container.runner(), first.json()["id"], 1, owner="metrics-test")
        finished = post_payment(client, "metrics-accept")  # replay of a finished payment
        post_payment(client, "metrics-invalid", {**BODY, "amount": -1})  # 400: counts nothing
    assert finished.status_code == 200
    delta.take()
    assert delta("payorch_payments_accepted_total") == 1
    assert delta("payorch_idempotent_replays_total", state="processing") == 2
    assert delta("payorch_idempotent_replays_total", state="succeeded") == 1
    assert delta("payorch_idempotency_key_reuse_conflicts_total") == 1


def test_provider_calls_are_counted_by_operation_and_outcome_with_latency(api: Api) -> None:
    delta = Delta(role_text(metrics.Role.WORKER))
    with api.client() as client:
        paid = post_payment(client, "metrics-paid").json()
        declined = post_payment(
            client, "metrics-declined", {**BODY, "payment_method": "pm_card_chargeDeclined"}
        ).json()
    # The next confirm (the paid one's) charges, then times out: the worker must query.
    confirms_so_far = sum(1 for call in api.provider.calls if call.operation == "confirm")
    api.provider.fail("confirm", confirms_so_far + 1, "unknown_after_effect")
    process_payment(
        api.container.runner(), paid["id"], 1, owner="metrics-test", sleep=lambda _s: None
    )
    process_payment(api.container.runner(), declined["id"], 1, owner="metrics-test")
    delta.take()
    # paid: create ok, confirm unknown (timed out after charging), retrieve ok (query first)
    assert delta("payorch_provider_calls_total", operation="create", outcome="ok") == 2
    assert delta("payorch_provider_calls_total", operation="confirm", outcome="unknown") == 1
    assert delta("payorch_provider_calls_total", operation="retrieve", outcome="ok") == 1
    assert delta("payorch_provider_calls_total", operation="confirm", outcome="declined") == 1
    assert delta("payorch_provider_call_seconds_count", operation="confirm") == 2
    assert delta("payorch_provider_call_seconds_count", operation="create") == 2
    assert delta("payorch_payments_finished_total", status="succeeded") == 1
    assert delta("payorch_payments_finished_total", status="failed") == 1
    assert reload(api.container, paid["id"]).status.value == "succeeded"
    assert api.provider.movements(paid["id"]) == 1


def test_takeovers_are_counted_by_sweeper_and_by_operator(api: Api) -> None:
    with api.client() as client:
        lost = post_payment(client, "metrics-lost-publish").json()
        stuck = post_payment(client, "metrics-stuck").json()
    with api.container.uow() as uow:
        past = uow.now() - timedelta(minutes=5)
    force(api.container, lost["id"], locked_until=past)
    delta = Delta(api)
    swept = Delta(role_text(metrics.Role.SWEEPER))
    report = api.container.sweeper(name="metrics-sweeper").run_once()
    with api.client(api.ops_key) as ops:
        taken = ops.post(
            f"/v1/ops/payments/{stuck['id']}/takeover",
            json={"reason": "metrics test", "force": True},
        )
    delta.take()
    swept.take()
    assert lost["id"] in report.taken_over
    assert taken.status_code == 200, taken.text
    assert swept("payorch_lease_takeovers_total", by="sweeper") == len(report.taken_over)
    assert delta("payorch_lease_takeovers_total", by="operator") == 1


def test_unfinished_records_by_status_and_oldest_processing_age_follow_the_database(
    api: Api,
) -> None:
    with api.client(api.key_b) as client:
        old = post_payment(client, "metrics-old").json()
    with api.container.uow() as uow:
        an_hour_ago = uow.now() - timedelta(hours=1)
        counts = uow.payments.count_by_status()
    force(api.container, old["id"], created_at=an_hour_ago)
    text = scrape(api)
    for status in metrics.UNFINISHED_STATUSES:
        assert metric(text, "payorch_payment_records", status=status) == counts[status]
    assert metric(text, "payorch_oldest_processing_age_seconds") >= 3600
    # Finished records are the table's whole history: never counted at a scrape.
    with pytest.raises(KeyError):
        metric(text, "payorch_payment_records", status="succeeded")

    process_payment(api.container.runner(), old["id"], 1, owner="metrics-test")
    force(api.container, old["id"], created_at=an_hour_ago)  # finished now: not counted
    after = scrape(api)
    assert metric(after, "payorch_payment_records", status="processing") == (
        counts["processing"] - 1
    )
    assert metric(after, "payorch_oldest_processing_age_seconds") < 3600


def test_oldest_processing_age_leaves_out_payments_waiting_for_their_customer(
    api: Api,
) -> None:
    """As payorch status does: a payment waiting for its customer is requires_action, and
    its age beside "processing 0" read as a stuck payment."""
    with api.client(api.key_b) as client:
        waiting = post_payment(client, "metrics-waiting").json()
        fresh = post_payment(client, "metrics-fresh").json()
    with api.container.uow() as uow:
        two_hours_ago = uow.now() - timedelta(hours=2)
    force(api.container, waiting["id"], created_at=two_hours_ago, waiting_for="customer")
    force(api.container, fresh["id"], created_at=two_hours_ago + timedelta(minutes=90))

    age = metric(scrape(api), "payorch_oldest_processing_age_seconds")
    settings = api.container.settings
    shown = get_status(api.container.read_only_uow, settings).oldest_processing_age_seconds
    # The fresh one (30 minutes old) is the oldest processing payment, for both readers.
    assert 1800 <= age < 3600, age
    assert shown is not None and abs(shown - age) < 60, (shown, age)


def test_the_api_port_does_not_serve_metrics(api: Api) -> None:
    with httpx.Client(base_url=api.url, trust_env=False) as client:
        assert client.get("/metrics").status_code == 404


# A real worker process ---------------------------------------------------------------------


def test_a_prefork_worker_serves_its_childrens_metrics_on_its_own_port(
    make_postgres_database, broker_url: str, processes: ProcessManager
) -> None:
    database_url = make_postgres_database()
    with start_in_thread() as simulator:
        env = payorch_environment(
            database_url,
            PAYORCH_BROKER_URL=broker_url,
            PAYORCH_STRIPE_API_BASE=simulator.url,
        )
        container = build_container(database_url, broker_url=broker_url)
        container.publisher = CeleryPublisher(create_celery_app(container.settings))
        try:
            merchant = create_client(container.uow, "metrics-worker", Role.MERCHANT).client
            port = free_port()
            worker = processes.payorch(
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                "2",
                "--metrics-port",
                str(port),
                env=env,
            )
            before = wait_for_http(f"http://127.0.0.1:{port}/metrics", process=worker).text
            assert (
                metric(before, "payorch_provider_calls_total", operation="confirm", outcome="ok")
                == 0
            )

            ids = [accept(container, merchant, f"worker-metrics-{n}").id for n in range(3)]
            deadline = time.monotonic() + 60
            while any(reload(container, i).status.value == "processing" for i in ids):
                assert worker.running, worker.tail()
                assert time.monotonic() < deadline, worker.tail()
                time.sleep(0.2)
        finally:
            container.close()

        after = httpx.get(f"http://127.0.0.1:{port}/metrics", trust_env=False).text
    assert metric(after, "payorch_provider_calls_total", operation="create", outcome="ok") == 3
    assert metric(after, "payorch_provider_calls_total", operation="confirm", outcome="ok") == 3
    assert metric(after, "payorch_payments_finished_total", status="succeeded") == 3
    assert metric(after, "payorch_provider_call_seconds_count", operation="confirm") == 3
    assert not families(after) & set(API_ONLY)


def test_a_threads_worker_takes_fewer_messages_while_the_provider_answers_at_once(
    make_postgres_database, broker_url: str, processes: ProcessManager
) -> None:
    """The default pool's prefetch limit (workers.prefetch_limit) on a real broker: a worker
    that starts on a backlog holds its whole window (32), and with a provider that answers
    at once the limit it sends RabbitMQ falls toward the floor while every payment still
    finishes."""
    database_url = make_postgres_database()
    with start_in_thread() as simulator:
        env = payorch_environment(
            database_url,
            PAYORCH_BROKER_URL=broker_url,
            PAYORCH_STRIPE_API_BASE=simulator.url,
        )
        container = build_container(database_url, broker_url=broker_url)
        container.publisher = CeleryPublisher(create_celery_app(container.settings))
        try:
            merchant = create_client(container.uow, "prefetch-worker", Role.MERCHANT).client
            ids = [accept(container, merchant, f"prefetch-{n}").id for n in range(400)]
            port = free_port()
            worker = processes.payorch(
                "worker",
                "--processes",
                "1",
                "--concurrency",
                "32",
                "--metrics-port",
                str(port),
                env=env,
            )
            wait_for_http(f"http://127.0.0.1:{port}/metrics", process=worker)
            limits: list[float] = []  # as scraped, once the step has set one
            deadline = time.monotonic() + 60
            while not limits or limits[-1] >= 32:  # the backlog lasts a few seconds
                assert worker.running, worker.tail()
                assert time.monotonic() < deadline, (limits, worker.tail())
                scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", trust_env=False).text
                limit = metric(scrape, "payorch_worker_prefetch_limit")
                if limit and (not limits or limits[-1] != limit):
                    limits.append(limit)
                time.sleep(0.05)
            while any(reload(container, i).status.value == "processing" for i in ids):
                assert worker.running, worker.tail()
                assert time.monotonic() < deadline, worker.tail()
                time.sleep(0.2)
        finally:
            container.close()
    assert limits[0] == 32, limits  # the whole window at the start, as a fixed prefetch
    assert min(limits) < 32, limits  # then fewer, the provider being fast
    assert min(limits) >= 8, limits  # never below the floor
