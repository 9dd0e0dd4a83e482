"""Failover across providers, end to end in this process on PostgreSQL (decision 0086).

A merchant routes every payment Stripe first, then Adyen (or the other way round); the API
accepts, the engine runs each record with the real adapters against both simulators over
real HTTP, and each simulator's own books say where money moved.  Every test asks the same
questions: did money move at most once, at which provider, and was every failover preceded by
a recorded proof at the account it left?
"""

from __future__ import annotations

import html
import importlib
import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import structlog
from structlog.testing import LogCapture

from devtools.adyen_simulator import RunningAdyenSimulator
from devtools.adyen_simulator import start_in_thread as start_adyen
from devtools.simulator import RunningSimulator
from devtools.simulator import start_in_thread as start_stripe
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines, payment_attempts, payments, provider_events
from orchestrator.domain.circuit import Circuit, CircuitState
from orchestrator.domain.model import PaymentRecord, Role
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.refunds import reload_operation
from tests.harness.server import ServerThread
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.integration.console_helpers import sign_in
from tests.integration.lease_helpers import cli_environment, run_payorch, run_payorch_json

pytestmark = pytest.mark.postgres

STRIPE_KEY = "sk_test_merchantOwnKey000000OWN1"
RETURN_URL = "https://shop.example/return"


def adyen_card(holder: str = "John Smith") -> dict[str, str]:
    return {
        "type": "scheme",
        "encryptedCardNumber": "test_4111111111111111",
        "encryptedExpiryMonth": "test_03",
        "encryptedExpiryYear": "test_2030",
        "encryptedSecurityCode": "test_737",
        "holderName": holder,
    }


@dataclass
class Stack:
    container: Container
    stripe: RunningSimulator
    adyen: RunningAdyenSimulator
    publisher: RecordingPublisher
    url: str
    key: str
    stripe_account: str = ""
    adyen_account: str = ""

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def account(self, provider: str, credentials: dict[str, str]) -> str:
        with self.client() as client:
            created = client.post(
                "/v1/connector_accounts",
                json={"provider": provider, "name": provider, "credentials": credentials},
            )
        assert created.status_code == 201, created.text
        return str(created.json()["id"])

    def route(self, *accounts: str) -> None:
        with self.client() as client:
            put = client.put("/v1/routing", json={"rules": [], "default": list(accounts)})
        assert put.status_code == 200, put.text

    def pay(
        self,
        key: str,
        *,
        stripe_method: str,
        adyen_holder: str = "John Smith",
        platform_method: str | None = None,
    ) -> str:
        body: dict[str, Any] = {
            "amount": 4200,
            "currency": "eur",
            "return_url": RETURN_URL,
            "payment_methods": {
                self.stripe_account: stripe_method,
                self.adyen_account: adyen_card(adyen_holder),
            },
        }
        if platform_method is not None:
            body["payment_method"] = platform_method  # what the platform's account is sent
        with self.client() as client:
            response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    def record(self, payment_id: str) -> PaymentRecord:
        with self.container.uow() as uow:
            record = uow.payments.get(payment_id)
        assert record is not None
        return record

    def run(self, payment_id: str) -> ProcessResult:
        """One worker task, carrying the row's token (as the sweeper's re-queue would)."""
        return process_operation(
            self.container.runner(),
            payment_id,
            self.record(payment_id).lease_token,
            owner="test",
            sleep=lambda seconds: None,
            rng=random.Random(5),
        )

    def run_until_settled(self, payment_id: str, *, runs: int = 6) -> list[ProcessResult]:
        results = []
        for _ in range(runs):
            results.append(self.run(payment_id))
            if results[-1] is not ProcessResult.DEFERRED:
                break
        return results

    def shown(self, payment_id: str) -> dict[str, Any]:
        with self.client() as client:
            return dict(client.get(f"/v1/payments/{payment_id}").json())

    def stripe_charges(self, payment_id: str) -> int:
        return int(self.stripe.admin.movements()["by_record"].get(payment_id, 0))

    def adyen_authorised(self, payment_id: str) -> int:
        """Authorisations that stand at Adyen for the payment (its books)."""
        books = self.adyen.admin.movements()["authorisations"]["by_reference"]
        return int(books.get(payment_id, 0))

    def disable(self, account: str) -> None:
        with self.client() as client:
            disabled = client.delete(f"/v1/connector_accounts/{account}")
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["status"] == "disabled"

    def ledger(self, payment_id: str) -> list[tuple[str, int]]:
        """The payment's ledger lines, (account, amount), in the order they were booked."""
        with self.container.engine.connect() as conn:
            rows = conn.execute(
                sa.select(ledger_lines.c.account, ledger_lines.c.amount)
                .where(ledger_lines.c.payment_id == payment_id)
                .order_by(ledger_lines.c.id)
            )
            return [(r.account, int(r.amount)) for r in rows]

    def adyen_requests(self, payment_id: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self.adyen.admin.requests()
            if r["path"].endswith("/payments") and r.get("reference") == payment_id
        ]


@pytest.fixture
def stack(make_postgres_database: Callable[[], str]) -> Iterator[Stack]:
    with start_stripe() as stripe, start_adyen() as adyen:
        publisher = RecordingPublisher()
        container = build_container(
            make_postgres_database(),
            publisher=publisher,
            stripe_api_base=stripe.url,
            adyen_api_base=adyen.url,
            # Backoffs short enough to stay in the task (its sleep is a no-op here), so a
            # payment's unknown outcomes run their course without moving the clock.
            retry_base_seconds=0.001,
            retry_cap_seconds=0.01,
        )
        merchant = create_client(container.uow, "merchant", Role.MERCHANT)
        try:
            with ServerThread(create_app(container)) as server:
                built = Stack(container, stripe, adyen, publisher, server.url, merchant.api_key)
                built.stripe_account = built.account("stripe", {"api_key": STRIPE_KEY})
                built.adyen_account = built.account(
                    "adyen",
                    {"api_key": API_KEY, "merchant_account": MERCHANT, "hmac_key": HMAC_KEY},
                )
                yield built
        finally:
            container.close()


def test_a_provider_decline_at_stripe_fails_over_to_adyen_with_its_proof_and_charges_once(
    stack: Stack,
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("soft", stripe_method="pm_card_chargeDeclinedProcessingError")

    # The first run: Stripe declines with processing_error (class provider).  The proof and
    # the move commit together, and the run hands the lease back before calling Adyen.
    assert stack.run(payment_id) is ProcessResult.DEFERRED
    moved = stack.record(payment_id)
    assert (moved.connector_account_id, moved.provider, moved.failovers) == (
        stack.adyen_account,
        "adyen",
        1,
    )
    assert moved.provider_payment_id is None and moved.confirm_attempts == 0
    assert stack.adyen_requests(payment_id) == []  # B not called yet: the resume point
    with stack.container.uow() as uow:
        [ended] = uow.attempts.for_payment(payment_id)
    assert (ended.connector_account, ended.reason, ended.next_connector_account) == (
        stack.stripe_account,
        "provider_decline",
        stack.adyen_account,
    )
    assert "processing_error" in ended.proof and ended.failure is not None

    # The next run (any worker) resumes at Adyen with the second attempt's keys.
    assert stack.run(payment_id) is ProcessResult.COMPLETED
    shown = stack.shown(payment_id)
    assert shown["status"] == "succeeded"
    assert shown["connector_account"] == stack.adyen_account
    attempts = shown["route_attempts"]
    assert [(a["connector_account"], a["provider"], a["status"]) for a in attempts] == [
        (stack.stripe_account, "stripe", "failed"),
        (stack.adyen_account, "adyen", "succeeded"),
    ]
    assert attempts[0]["failure"]["code"] == "processing_error"
    assert attempts[0]["ended_at"] == attempts[1]["started_at"]
    assert attempts[1]["ended_at"] is not None
    # Money moved once, at Adyen; the Stripe intent was declined, never charged.
    assert stack.stripe_charges(payment_id) == 0
    # Adyen was asked once, under the second attempt's own key.
    sent = stack.adyen_requests(payment_id)
    assert [r["idempotency_key"] for r in sent] == [f"payorch-{payment_id}-a2-confirm-1"]
    assert stack.adyen_authorised(payment_id) == 1
    # The ledger books the money at the account it moved at, Adyen's (decision 0105).
    assert stack.ledger(payment_id) == [
        (f"provider_receivable:{stack.adyen_account}", 4200),
        ("merchant_payable:" + stack.record(payment_id).client_id, -4200),
    ]
    # The ops timeline shows the ended attempt with its proof.
    ops = create_client(stack.container.uow, "ops", Role.OPS)
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {ops.api_key}"}, trust_env=False
    ) as client:
        detail = client.get(f"/v1/ops/payments/{payment_id}").json()
    [shown_ended] = detail["attempts"]
    assert (shown_ended["number"], shown_ended["reason"]) == (1, "provider_decline")
    assert shown_ended["proof"] == ended.proof
    assert "failover" in [e["event"] for e in detail["lease_history"]]
    # The console's payment page shows both attempts, the first with its proof.
    with httpx.Client(base_url=stack.url, timeout=30, trust_env=False) as browser:
        assert sign_in(browser, ops.api_key).status_code == 303
        page = browser.get(f"/ops/payments/{payment_id}")
    assert page.status_code == 200, page.text
    rows = attempt_rows(page.text)
    assert [r[:5] for r in rows] == [
        ["1", stack.stripe_account, "stripe", ended.provider_payment_id or "-", "failed"],
        ["2", stack.adyen_account, "adyen", shown["provider_payment_id"], "succeeded"],
    ]
    first, second = rows
    assert first[5].startswith("processing_error") and first[6] == "provider"
    assert first[7] == f"provider decline \u2192 {stack.adyen_account}"
    assert first[8] == ended.proof
    assert (second[5], second[7], second[8]) == ("-", "-", "-")
    assert first[10] == second[9]  # the second attempt began when the first ended
    assert "-" not in (first[9], first[10], second[10])


def test_a_worker_killed_between_the_failovers_commit_and_the_next_call_is_resumed_at_b(
    stack: Stack,
) -> None:
    """The failover commits the proof and the move; the worker that claims the payment at
    Adyen next dies (kill -9) before calling it, its lease held.  The lease runs out, the
    sweeper takes it over, and the run it hands the payment to resumes at Adyen from the row
    alone: the second attempt's key, once, Stripe never asked again; the dead worker's token
    is fenced."""
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("killed", stripe_method="pm_card_chargeDeclinedProcessingError")
    assert stack.run(payment_id) is ProcessResult.DEFERRED  # proof and move committed
    stripe_calls = len(stack.stripe.admin.requests())
    moved = stack.record(payment_id)
    # The doomed worker's claim (what its first transaction writes), with a lease that has
    # already run out when the sweeper looks: it died before its next statement.
    with stack.container.uow() as uow:
        now = uow.now()
        dead = uow.leases.claim(
            payment_id,
            carried_token=moved.lease_token,
            owner="killed-host:4242",
            now=now,
            lease_until=now - timedelta(seconds=1),
        )
        uow.commit()
    assert dead is not None and (dead.failovers, dead.confirm_attempts) == (1, 0)
    assert stack.adyen_requests(payment_id) == []

    assert payment_id in stack.container.sweeper().run_once().taken_over
    assert stack.run(payment_id) is ProcessResult.COMPLETED

    shown = stack.shown(payment_id)
    assert (shown["status"], shown["connector_account"]) == ("succeeded", stack.adyen_account)
    sent = stack.adyen_requests(payment_id)
    assert [r["idempotency_key"] for r in sent] == [f"payorch-{payment_id}-a2-confirm-1"]
    assert stack.adyen_authorised(payment_id) == 1
    assert len(stack.stripe.admin.requests()) == stripe_calls  # A is never asked again
    assert stack.stripe_charges(payment_id) == 0
    with stack.container.uow() as uow:
        assert len(uow.attempts.for_payment(payment_id)) == 1  # one failover, one proof
        now = uow.now()
        fenced = uow.leases.renew(
            payment_id, token=dead.lease_token, now=now, lease_until=now + timedelta(seconds=60)
        )
    assert fenced is None


def attempt_rows(page: str) -> list[list[str]]:
    """The cells of the console payment page's attempts table, as text."""
    rows = re.findall(r'<tr class="attempt-row"[^>]*>(.*?)</tr>', page, re.S)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in rows
    ]


def test_a_card_decline_fails_the_payment_and_never_reaches_the_next_account(
    stack: Stack,
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("hard", stripe_method="pm_card_chargeDeclinedInsufficientFunds")

    assert stack.run(payment_id) is ProcessResult.COMPLETED
    shown = stack.shown(payment_id)
    assert shown["status"] == "failed"
    assert shown["failure"]["decline_code"] == "insufficient_funds"
    assert [a["connector_account"] for a in shown["route_attempts"]] == [stack.stripe_account]
    assert stack.adyen_requests(payment_id) == []
    with stack.container.uow() as uow:
        assert uow.attempts.for_payment(payment_id) == []


def test_adyen_result_code_error_fails_over_to_stripe_which_charges_once(stack: Stack) -> None:
    stack.route(stack.adyen_account, stack.stripe_account)
    payment_id = stack.pay("error", stripe_method="pm_card_visa", adyen_holder="ERROR")

    results = stack.run_until_settled(payment_id)
    assert results == [ProcessResult.DEFERRED, ProcessResult.COMPLETED]
    shown = stack.shown(payment_id)
    assert shown["status"] == "succeeded"
    assert [(a["provider"], a["status"]) for a in shown["route_attempts"]] == [
        ("adyen", "failed"),
        ("stripe", "succeeded"),
    ]
    assert stack.stripe_charges(payment_id) == 1
    assert stack.adyen_authorised(payment_id) == 0


def test_a_provider_decline_at_the_last_account_fails_the_payment(stack: Stack) -> None:
    stack.route(stack.adyen_account, stack.stripe_account)
    payment_id = stack.pay(
        "both", stripe_method="pm_card_chargeDeclinedProcessingError", adyen_holder="ERROR"
    )

    assert stack.run_until_settled(payment_id) == [
        ProcessResult.DEFERRED,
        ProcessResult.COMPLETED,
    ]
    shown = stack.shown(payment_id)
    assert shown["status"] == "failed"
    assert shown["failure"]["code"] == "processing_error"
    assert [a["status"] for a in shown["route_attempts"]] == ["failed", "failed"]
    assert stack.stripe_charges(payment_id) == 0
    assert stack.adyen_authorised(payment_id) == 0


@contextmanager
def info_lines() -> Iterator[list[dict[str, Any]]]:
    """The log lines at INFO and above, as structlog builds them (the suite logs WARNING)."""
    saved = structlog.get_config()
    capture = LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    )
    try:
        yield capture.entries
    finally:
        structlog.configure(**saved)


def test_a_next_account_disabled_after_the_accept_is_never_called_and_the_decline_fails(
    stack: Stack,
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("disabled", stripe_method="pm_card_chargeDeclinedProcessingError")
    assert stack.record(payment_id).route == (stack.stripe_account, stack.adyen_account)
    stack.disable(stack.adyen_account)  # after the accept: the stored route still names it

    # As a soft decline at the last account: the payment fails with Stripe's decline.
    with info_lines() as lines:
        assert stack.run(payment_id) is ProcessResult.COMPLETED
    shown = stack.shown(payment_id)
    assert shown["status"] == "failed"
    assert shown["failure"]["code"] == "processing_error"
    assert [(a["connector_account"], a["status"]) for a in shown["route_attempts"]] == [
        (stack.stripe_account, "failed")
    ]
    assert stack.record(payment_id).failovers == 0
    with stack.container.uow() as uow:
        assert uow.attempts.for_payment(payment_id) == []
    # Adyen's simulator received nothing for this payment, and Stripe moved no money.
    assert stack.adyen_requests(payment_id) == []
    assert stack.adyen_authorised(payment_id) == 0
    assert stack.stripe_charges(payment_id) == 0
    # The operator's trace of the skip.
    [skipped] = [line for line in lines if line["event"] == "failover_account_skipped"]
    assert (skipped["connector_account"], skipped["reason"]) == (stack.adyen_account, "disabled")
    assert skipped["next_connector_account"] is None and skipped["payment_id"] == payment_id


def test_an_account_disabled_between_the_decision_and_the_move_is_not_moved_to(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("race", stripe_method="pm_card_chargeDeclinedProcessingError")
    stack.disable(stack.adyen_account)
    # The decision's read saw Adyen still enabled (it was disabled just after): the one
    # seam replaced, so the move's own transaction is what must notice.
    stale = frozenset({stack.adyen_account})
    # (By module: the package's ``finish`` name is the function of the same name.)
    settling = importlib.import_module("orchestrator.engine.kinds.charge.finish")
    monkeypatch.setattr(settling, "enabled_following", lambda run: stale)

    assert stack.run(payment_id) is ProcessResult.DEFERRED
    rolled_back = stack.record(payment_id)
    assert (rolled_back.connector_account_id, rolled_back.failovers) == (stack.stripe_account, 0)
    assert "disabled during the failover" in (rolled_back.last_error or "")
    with stack.container.uow() as uow:
        assert uow.attempts.for_payment(payment_id) == []

    # The next run reads Stripe's answer again and decides again, with the truth.
    monkeypatch.undo()
    assert stack.run_until_settled(payment_id) == [ProcessResult.COMPLETED]
    shown = stack.shown(payment_id)
    assert (shown["status"], shown["failure"]["code"]) == ("failed", "processing_error")
    assert stack.adyen_requests(payment_id) == []
    assert stack.stripe_charges(payment_id) == 0


def test_a_disabled_account_on_the_route_is_skipped_for_the_next_enabled_one(
    stack: Stack,
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account, "platform")
    payment_id = stack.pay(
        "skip",
        stripe_method="pm_card_chargeDeclinedProcessingError",
        platform_method="pm_card_visa",
    )
    stack.disable(stack.adyen_account)

    assert stack.run_until_settled(payment_id) == [
        ProcessResult.DEFERRED,
        ProcessResult.COMPLETED,
    ]
    shown = stack.shown(payment_id)
    assert shown["status"] == "succeeded"
    assert [(a["connector_account"], a["status"]) for a in shown["route_attempts"]] == [
        (stack.stripe_account, "failed"),
        ("platform", "succeeded"),
    ]
    # The proof row names where it moved, and the account it passed over.
    with stack.container.uow() as uow:
        [ended] = uow.attempts.for_payment(payment_id)
    assert (ended.connector_account, ended.next_connector_account) == (
        stack.stripe_account,
        "platform",
    )
    assert f"{stack.adyen_account} skipped: disabled" in ended.proof
    assert stack.adyen_requests(payment_id) == []
    assert stack.stripe_charges(payment_id) == 1  # at the platform's account, once


def test_an_unresolved_unknown_outcome_parks_at_its_account_and_never_fails_over(
    stack: Stack,
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("unknown", stripe_method="pm_card_visa")
    # The confirm charges, then its answer is lost; no read ever answers again.
    stack.stripe.admin.add_fault("confirm:error_500_after:times=1")
    stack.stripe.admin.add_fault("retrieve:error_500_before")

    assert stack.run_until_settled(payment_id)[-1] is ProcessResult.PARKED
    parked = stack.record(payment_id)
    assert parked.status.value == "needs_attention"
    assert parked.failovers == 0 and parked.connector_account_id == stack.stripe_account
    assert "500" in (parked.last_error or "")
    # The money Stripe moved is the only money moved: Adyen was never asked.
    assert stack.stripe_charges(payment_id) == 1
    assert stack.adyen_requests(payment_id) == []
    with stack.container.uow() as uow:
        assert uow.attempts.for_payment(payment_id) == []


def test_an_unknown_outcome_resolved_as_a_charge_settles_at_its_account(stack: Stack) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("resolved", stripe_method="pm_card_visa")
    stack.stripe.admin.add_fault("confirm:error_500_after:times=1")

    assert stack.run_until_settled(payment_id)[-1] is ProcessResult.COMPLETED
    shown = stack.shown(payment_id)
    assert shown["status"] == "succeeded"
    assert [a["connector_account"] for a in shown["route_attempts"]] == [stack.stripe_account]
    assert stack.stripe_charges(payment_id) == 1
    assert stack.adyen_requests(payment_id) == []


def test_a_refund_after_a_failover_goes_to_the_account_that_charged_and_books_there(
    stack: Stack,
) -> None:
    notifications = f"{stack.url}/v1/providers/adyen/notifications/{stack.adyen_account}"
    stack.adyen.admin.configure_notifications(notifications, HMAC_KEY)
    stack.route(stack.stripe_account, stack.adyen_account)
    payment_id = stack.pay("refund", stripe_method="pm_card_chargeDeclinedProcessingError")
    assert stack.run_until_settled(payment_id)[-1] is ProcessResult.COMPLETED
    with stack.client() as client:
        refund = client.post(
            f"/v1/payments/{payment_id}/refunds",
            json={"amount": 1000},
            headers={"Idempotency-Key": "refund-1"},
        )
    assert refund.status_code == 202, refund.text
    refund_id = refund.json()["id"]
    [token] = [t for r, t in stack.publisher.published if r == refund_id]
    ran = process_operation(
        stack.container.runner(), refund_id, token, owner="test", sleep=lambda seconds: None
    )
    # Adyen answers a refund "received"; its notification settles it.
    assert ran is ProcessResult.WAITING
    refunds_sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/refunds")]
    assert len(refunds_sent) == 1
    assert [r for r in stack.stripe.admin.requests() if "refunds" in r.get("path", "")] == []
    wait_for_stored_refund_notification(stack, payment_id)
    token = reload_operation(stack.container, refund_id).lease_token
    ran = process_operation(
        stack.container.runner(), refund_id, token, owner="test", sleep=lambda seconds: None
    )
    assert ran is ProcessResult.COMPLETED
    assert stack.shown(payment_id)["amount_refunded"] == 1000
    # Booked where the charge was, Adyen's account; Stripe's holds nothing of it.
    client = "merchant_payable:" + stack.record(payment_id).client_id
    assert stack.ledger(payment_id) == [
        (f"provider_receivable:{stack.adyen_account}", 4200),
        (client, -4200),
        (client, 1000),
        (f"provider_receivable:{stack.adyen_account}", -1000),
    ]


def wait_for_stored_refund_notification(stack: Stack, payment_id: str) -> None:
    """Adyen's REFUND notification for the payment, delivered and stored by payorch (the
    simulator sends it from a thread of its own)."""
    deadline = time.monotonic() + 60
    while True:
        with stack.container.engine.connect() as conn:
            stored = conn.execute(
                sa.select(sa.func.count())
                .select_from(provider_events)
                .where(provider_events.c.payment_id == payment_id)
                .where(provider_events.c.type == "adyen.refund")
            ).scalar_one()
        if stored:
            return
        assert time.monotonic() < deadline, "Adyen's REFUND notification was never stored"
        time.sleep(0.05)


def test_an_open_circuit_with_nothing_sent_there_fails_over_with_the_circuit_as_its_proof(
    stack: Stack,
) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    with stack.container.uow() as uow:
        now = uow.now()
        uow.circuits.lock(stack.stripe_account, now=now)
        opened = Circuit(
            key=stack.stripe_account,
            state=CircuitState.OPEN,
            failures=20,
            since=now,
            opened_at=now,
            next_probe_at=now + timedelta(hours=1),
        )
        uow.circuits.save(opened, now=now)
        uow.commit()
    payment_id = stack.pay("circuit", stripe_method="pm_card_visa")

    assert stack.run_until_settled(payment_id) == [
        ProcessResult.DEFERRED,
        ProcessResult.COMPLETED,
    ]
    shown = stack.shown(payment_id)
    assert shown["status"] == "succeeded"
    assert [(a["provider"], a["status"]) for a in shown["route_attempts"]] == [
        ("stripe", "failed"),
        ("adyen", "succeeded"),
    ]
    assert shown["route_attempts"][0]["failure"]["code"] == "provider_unavailable"
    with stack.container.uow() as uow:
        [ended] = uow.attempts.for_payment(payment_id)
    assert ended.reason == "circuit_open" and "refused the call before it was sent" in ended.proof
    # Nothing reached Stripe for this payment; Adyen charged it once.
    assert stack.stripe.admin.requests(record_id=payment_id) == []
    assert stack.adyen_authorised(payment_id) == 1


# The failover rate of the last hour in the overview (issue 40, decision 0097): the same
# numbers in `payorch status --json` (a subprocess), GET /v1/ops/status and the console.


TWO_HOURS = sa.text("interval '2 hours'")


def overview_in_three_places(stack: Stack, ops_key: str) -> tuple[Any, Any, str]:
    """(the CLI's failover document, the API's, the console overview's HTML)."""
    env = cli_environment(stack.container.settings.database_url, "memory://")
    cli = run_payorch_json("status", env=env)["failover"]
    table = run_payorch("status", env=env)
    assert table.returncode == 0, table.stderr
    rate = f"{cli['failover_rate']:.1%} of {cli['attempts_ended']} attempts ended"
    assert "failovers, last hour" in table.stdout and rate in table.stdout
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {ops_key}"}, trust_env=False
    ) as client:
        answer = client.get("/v1/ops/status")
    assert answer.status_code == 200, answer.text
    with httpx.Client(
        base_url=stack.url, timeout=30, trust_env=False, follow_redirects=False
    ) as browser:
        assert sign_in(browser, ops_key).status_code == 303
        page = browser.get("/ops/")
    assert page.status_code == 200, page.text
    return cli, answer.json()["failover"], page.text


def card_value(page: str, card_id: str) -> str:
    found = re.search(
        rf'id="{card_id}">\s*<div class="label">[^<]*</div>\s*<div class="value">([^<]*)</div>',
        page,
    )
    assert found is not None, f"no card {card_id} on the overview"
    return html.unescape(found.group(1)).strip()


def test_the_overview_counts_the_last_hours_failovers_and_their_rate(stack: Stack) -> None:
    stack.route(stack.stripe_account, stack.adyen_account)
    # Through the real failover path: a soft decline at Stripe moves the payment to Adyen.
    soft = stack.pay("rate-soft", stripe_method="pm_card_chargeDeclinedProcessingError")
    stack.run_until_settled(soft)
    assert stack.shown(soft)["status"] == "succeeded"
    hard = stack.pay("rate-hard", stripe_method="pm_card_chargeDeclinedInsufficientFunds")
    stack.run_until_settled(hard)
    assert stack.shown(hard)["status"] == "failed"
    plain = stack.pay("rate-plain", stripe_method="pm_card_visa")
    stack.run_until_settled(plain)
    assert stack.shown(plain)["status"] == "succeeded"
    # A failover and its payment's finish two hours ago are outside the window.
    old = stack.pay("rate-old", stripe_method="pm_card_chargeDeclinedProcessingError")
    stack.run_until_settled(old)
    with stack.container.uow() as uow:
        uow.session.write(
            sa.update(payment_attempts)
            .where(payment_attempts.c.payment_id == old)
            .values(ended_at=payment_attempts.c.ended_at - TWO_HOURS)
        )
        uow.session.write(
            sa.update(payments)
            .where(payments.c.id == old)
            .values(completed_at=payments.c.completed_at - TWO_HOURS)
        )
        uow.commit()

    ops_key = create_client(stack.container.uow, "ops", Role.OPS).api_key
    cli, api, page = overview_in_three_places(stack, ops_key)

    # Three payments finished in the hour, one failover: 4 attempts ended, 1 failed over.
    expected = {
        "window_seconds": 3600,
        "payments_finished": 3,
        "failovers": 1,
        "attempts_ended": 4,
        "failover_rate": 0.25,
        "top_failovers": [
            {
                "connector_account": stack.stripe_account,
                "reason": "provider_decline",
                "failovers": 1,
            }
        ],
    }
    assert cli == expected
    assert api == expected
    assert card_value(page, "failover-finished") == "3"
    assert card_value(page, "failover-count") == "1"
    assert card_value(page, "failover-rate") == "25.0%"
    pair = re.search(r'<tr class="failover-pair">(.*?)</tr>', page, re.S)
    assert pair is not None
    cells = [html.unescape(c).strip() for c in re.findall(r"<td>(.*?)</td>", pair.group(1))]
    assert cells == [stack.stripe_account, "provider decline", "1"]


def test_the_overview_without_a_failover_shows_zero_and_a_rate_of_zero(stack: Stack) -> None:
    ops_key = create_client(stack.container.uow, "ops", Role.OPS).api_key
    cli, api, page = overview_in_three_places(stack, ops_key)
    nothing = {
        "window_seconds": 3600,
        "payments_finished": 0,
        "failovers": 0,
        "attempts_ended": 0,
        "failover_rate": 0.0,
        "top_failovers": [],
    }
    # No attempt ended at all: a rate of 0, not a division by zero.
    assert cli == nothing and api == nothing
    assert card_value(page, "failover-rate") == "0.0%"
    assert card_value(page, "failover-count") == "0"

    stack.route(stack.stripe_account, stack.adyen_account)
    plain = stack.pay("zero-plain", stripe_method="pm_card_visa")
    stack.run_until_settled(plain)
    cli, api, page = overview_in_three_places(stack, ops_key)
    assert cli == api == {**nothing, "payments_finished": 1, "attempts_ended": 1}
    assert card_value(page, "failover-finished") == "1"
    assert card_value(page, "failover-rate") == "0.0%"
    assert 'class="failover-pair"' not in page
