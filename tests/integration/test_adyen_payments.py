"""Payments on an Adyen connector account, end to end in this process on SQLite and
PostgreSQL: the API accepts, the engine runs the published record through the Adyen adapter,
and the Adyen simulator (over real HTTP, every exchange checked against Checkout v71) says
what it authorised.  The property: one authorisation per payment, with our reference and
our derived key, whatever the network did."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator, start_in_thread
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container, StoredEventLog
from orchestrator.db.tables import (
    ledger_lines,
    outbox_events,
    payment_disputes,
    payments,
    provider_events,
)
from orchestrator.domain.model import Role
from orchestrator.domain.operations import OperationStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.providers.adyen_hmac import signed_item
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.captures import ledger_by_account
from tests.harness.containers import build_container
from tests.harness.refunds import reload_operation
from tests.harness.seeds import count_rows, force
from tests.harness.server import ServerThread
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.replay.adyen_schema import AdyenWatch

# Results after which ``Stack.drive`` runs the payment again (a backoff, a wait).
RUN_AGAIN = (ProcessResult.DEFERRED, ProcessResult.WAITING)

BODY = {
    "amount": 4200,
    "currency": "eur",
    "payment_method": "8415718415172200",  # a stored method at Adyen (storedPaymentMethodId)
    # Adyen's shopperReference (the API takes the `cus_` shape for every provider today).
    "customer": "cus_ada",
    "return_url": "https://shop.example/return",
}


@dataclass
class Stack:
    container: Container
    adyen: RunningAdyenSimulator
    publisher: RecordingPublisher
    url: str
    key: str
    account: str = ""

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
            trust_env=False,
        )

    def pay(self, key: str, **extra: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post(
                "/v1/payments",
                json={**BODY, "connector_account": self.account, **extra},
                headers={"Idempotency-Key": key},
            )
        assert response.status_code == 202, response.text
        return dict(response.json())

    def run(self, payment_id: str) -> ProcessResult:
        """Run the payment as a worker would, its backoffs not slept out."""
        [token] = [t for r, t in self.publisher.published if r == payment_id]
        return process_operation(
            self.container.runner(),
            payment_id,
            token,
            owner="test",
            sleep=lambda seconds: None,
            rng=random.Random(3),
        )

    def drive(
        self, payment_id: str, *, rounds: int = 20, until_waiting: bool = False
    ) -> ProcessResult:
        """Run the payment as workers would until it finishes or parks.  Where a worker
        backs off, or the payment waits for a notification, the test waits instead for the
        notifications the simulator has made to be delivered (or dropped): that is what the
        backoff's time is for, and waiting for it rather than for the clock keeps the run
        independent of the machine's speed.  The payment is then made due at once (the
        sweeper's part, or the wake-up's).  ``until_waiting``: stop at the first wait."""
        [token] = [t for r, t in self.publisher.published if r == payment_id]
        for _ in range(rounds):
            result = process_operation(
                self.container.runner(),
                payment_id,
                token,
                owner="test",
                sleep=lambda seconds: self.notifications_settled(),
                rng=random.Random(3),
            )
            again = (ProcessResult.DEFERRED,) if until_waiting else RUN_AGAIN
            if result not in again:
                return result
            self.notifications_settled()
            token = force(
                self.container, payment_id, next_attempt_at=None, locked_until=None
            ).lease_token
        raise AssertionError(f"{payment_id} still deferred or waiting after {rounds} runs")

    def notifications_settled(self) -> None:
        """Every notification the simulator made so far has been delivered or dropped."""

        def settled() -> bool:
            made = len(self.adyen.admin.notification_items())
            final = {
                d["seq"]
                for d in self.adyen.admin.notification_deliveries()
                if d["outcome"] in ("delivered", "dropped")
            }
            return len(final) >= made

        wait_until(settled, self.adyen.admin.notification_deliveries)

    def sent(self, path: str) -> list[str]:
        """The idempotency keys of our requests to ``path``, in order."""
        return [
            r["idempotency_key"] for r in self.adyen.admin.requests() if r["path"].endswith(path)
        ]

    def items(self, event_code: str) -> list[dict[str, Any]]:
        return [i for i in self.adyen.admin.notification_items() if i["eventCode"] == event_code]

    def shown(self, payment_id: str) -> dict[str, Any]:
        with self.client() as client:
            return dict(client.get(f"/v1/payments/{payment_id}").json())

    def notification_url(self, account: str | None = None) -> str:
        return f"{self.url}/v1/providers/adyen/notifications/{account or self.account}"

    def delivered(self, event_code: str, psp: str, *, count: int = 1) -> list[dict[str, Any]]:
        """The simulator's deliveries of that item that payorch answered 2xx, once there
        are ``count`` of them (the simulator sends asynchronously)."""

        def found() -> list[dict[str, Any]]:
            return [
                d
                for d in self.adyen.admin.notification_deliveries()
                if d["eventCode"] == event_code
                and d["pspReference"] == psp
                and d["outcome"] == "delivered"
            ]

        return wait_until(lambda: len(found()) >= count, found)

    def stored_events(self, payment_id: str) -> list[tuple[str, str]]:
        with self.container.engine.connect() as conn:
            rows = conn.execute(
                sa.select(provider_events.c.id, provider_events.c.type).where(
                    provider_events.c.payment_id == payment_id
                )
            )
            return [(r.id, r.type) for r in rows]

    def authorisations(self, payment_id: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.adyen.admin.payments(reference=payment_id)
            if p["status"] in ("authorised", "captured")
        ]


def wait_until(done: Callable[[], bool], value: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached in {timeout}s: {value()!r}")
        time.sleep(0.05)
    return value()


@contextmanager
def adyen_stack(
    database_url: str, *, api_keys: tuple[str, ...] = (), read_timeout: float = 1.0
) -> Iterator[Stack]:
    """The API on a server thread, the engine in this process, the Adyen simulator (its
    Checkout API and its settlement reports), and a merchant with an Adyen connector account
    whose notifications reach the API.  ``api_keys``: the only keys the simulator takes;
    ``read_timeout``: the adapter's (short by default: the stall faults outlast it)."""
    watch = AdyenWatch()
    # The stalled answer outlasts the adapter's read timeout: a timeout after the effect.
    config = AdyenSimulatorConfig(answer_observer=watch, stall_seconds=2.5, api_keys=api_keys)
    with start_in_thread(config) as adyen:
        publisher = RecordingPublisher()
        container = build_container(
            database_url,
            publisher=publisher,
            adyen_api_base=adyen.url,
            adyen_reports_base=f"{adyen.url}/reports/download",
            provider_timeout_seconds=read_timeout,
        )
        merchant = create_client(container.uow, "merchant", Role.MERCHANT)
        try:
            with ServerThread(create_app(container)) as server:
                stack = Stack(container, adyen, publisher, server.url, merchant.api_key)
                with stack.client() as client:
                    created = client.post(
                        "/v1/connector_accounts",
                        json={
                            "name": "Adyen EU",
                            "provider": "adyen",
                            "credentials": {
                                "api_key": API_KEY,
                                "merchant_account": MERCHANT,
                                "hmac_key": HMAC_KEY,
                            },
                        },
                    )
                assert created.status_code == 201, created.text
                stack.account = created.json()["id"]
                adyen.admin.configure_notifications(stack.notification_url(), HMAC_KEY)
                yield stack
        finally:
            container.close()
    watch.assert_clean()


@pytest.fixture
def stack(database_url: str) -> Iterator[Stack]:
    with adyen_stack(database_url) as built:
        yield built


def test_an_eur_payment_is_authorised_at_adyen_once_with_our_reference_and_key(
    stack: Stack,
) -> None:
    payment = stack.pay("adyen-1")

    assert stack.run(payment["id"]) is ProcessResult.COMPLETED

    shown = stack.shown(payment["id"])
    assert shown["status"] == "succeeded"
    assert shown["connector_account"] == stack.account
    # The payment names the provider that moved its money, and its ledger the account.
    assert payment["provider"] == shown["provider"] == "adyen"
    with stack.container.engine.connect() as conn:
        receivable = conn.execute(
            sa.select(ledger_lines.c.account, ledger_lines.c.amount).where(
                ledger_lines.c.payment_id == payment["id"],
                ledger_lines.c.account.like("provider_receivable:%"),
            )
        ).all()
    assert [tuple(line) for line in receivable] == [(f"provider_receivable:{stack.account}", 4200)]
    [authorised] = stack.authorisations(payment["id"])
    assert authorised["amount"] == {"currency": "EUR", "value": 4200}
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert [r["idempotency_key"] for r in sent] == [f"payorch-{payment['id']}-confirm-1"]


def test_a_payment_naming_no_account_runs_on_the_default_adyen_account_and_names_adyen(
    stack: Stack,
) -> None:
    with stack.client() as client:
        response = client.post(
            "/v1/payments", json=BODY, headers={"Idempotency-Key": "adyen-default"}
        )
    assert response.status_code == 202, response.text
    accepted = response.json()
    # The merchant's only account is its default: the record names it and its provider.
    assert (accepted["connector_account"], accepted["provider"]) == (stack.account, "adyen")

    stack.run(accepted["id"])

    assert stack.shown(accepted["id"])["status"] == "succeeded"
    assert len(stack.authorisations(accepted["id"])) == 1


def test_an_authorisation_whose_answer_is_lost_is_resolved_by_replaying_its_key(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:timeout_after_effect:times=1")
    payment = stack.pay("adyen-2")

    stack.run(payment["id"])

    assert stack.shown(payment["id"])["status"] == "succeeded"
    assert len(stack.authorisations(payment["id"])) == 1
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert {r["idempotency_key"] for r in sent} == {f"payorch-{payment['id']}-confirm-1"}
    assert len(sent) >= 2  # the lost one, then its replay


def test_a_5xx_with_no_effect_is_replayed_under_the_same_key_and_authorises_once(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:error_500_before:times=2:status=502")
    payment = stack.pay("adyen-3")

    stack.run(payment["id"])

    assert stack.shown(payment["id"])["status"] == "succeeded"
    assert len(stack.authorisations(payment["id"])) == 1
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert {r["idempotency_key"] for r in sent} == {f"payorch-{payment['id']}-confirm-1"}


def test_the_authorisation_notification_is_stored_once_for_its_payment_even_when_duplicated(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("webhook:duplicate:times=1")
    payment = stack.pay("adyen-n1")
    stack.run(payment["id"])
    [authorised] = stack.authorisations(payment["id"])

    stack.delivered("AUTHORISATION", authorised["pspReference"], count=2)

    assert stack.stored_events(payment["id"]) == [
        (f"adyen:{authorised['pspReference']}:AUTHORISATION:true:", "payment_intent.succeeded")
    ]


def test_the_accounts_stored_notifications_are_read_back_by_psp_reference_and_by_record_id(
    stack: Stack,
) -> None:

    payment = stack.pay("adyen-log1")
    other = stack.pay("adyen-log2")
    stack.run(payment["id"])
    stack.run(other["id"])
    [authorised] = stack.authorisations(payment["id"])
    psp = authorised["pspReference"]
    stack.delivered("AUTHORISATION", psp)
    stack.delivered("AUTHORISATION", stack.authorisations(other["id"])[0]["pspReference"])
    log = StoredEventLog(stack.container.read_only_uow, "adyen")

    by_psp = log.payloads(provider_payment_id=psp)
    by_record = log.payloads(record_id=payment["id"])

    assert [(p["eventCode"], p["pspReference"], p["merchantReference"]) for p in by_psp] == [
        ("AUTHORISATION", psp, payment["id"])
    ]
    assert by_record == by_psp
    assert (
        StoredEventLog(stack.container.read_only_uow, "stripe").payloads(record_id=payment["id"])
        == []
    )
    assert log.payloads() == []


def test_a_chargeback_notification_records_a_dispute_and_tells_the_merchant(
    stack: Stack,
) -> None:
    payment = stack.pay("adyen-n2")
    stack.run(payment["id"])
    [authorised] = stack.authorisations(payment["id"])

    stack.adyen.admin.chargeback(authorised["pspReference"], amount=4200)
    stack.delivered("CHARGEBACK", wait_for_psp(stack, "CHARGEBACK"))

    with stack.container.engine.connect() as conn:
        disputes = conn.execute(
            sa.select(payment_disputes.c.amount, payment_disputes.c.currency).where(
                payment_disputes.c.payment_id == payment["id"]
            )
        ).all()
    assert [tuple(d) for d in disputes] == [(4200, "eur")]
    with stack.container.engine.connect() as conn:
        announced = conn.execute(
            sa.select(outbox_events.c.event_type)
            .where(outbox_events.c.payment_id == payment["id"])
            .order_by(outbox_events.c.id)
        ).scalars()
        assert list(announced) == ["payment.succeeded", "payment.disputed"]


def wait_for_psp(stack: Stack, event_code: str) -> str:
    items = wait_until(
        lambda: any(i["eventCode"] == event_code for i in stack.adyen.admin.notification_items()),
        stack.adyen.admin.notification_items,
    )
    return str(next(i["pspReference"] for i in items if i["eventCode"] == event_code))


def test_a_notification_signed_with_another_key_is_refused_and_nothing_is_stored(
    stack: Stack,
) -> None:
    item = {
        "pspReference": "ZZZZZZZZZZZZZZZZ",
        "merchantAccountCode": MERCHANT,
        "merchantReference": "pay_forged",
        "amount": {"currency": "EUR", "value": 1},
        "eventCode": "AUTHORISATION",
        "success": "true",
        "eventDate": "2026-01-01T00:00:00+00:00",
    }
    forged = {
        "live": "false",
        "notificationItems": [{"NotificationRequestItem": signed_item(item, "ab" * 32)}],
    }

    answer = httpx.post(stack.notification_url(), content=json.dumps(forged), trust_env=False)

    assert answer.status_code == 401
    assert answer.json()["type"].endswith("/invalid-signature")
    with stack.container.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(provider_events)).scalar() == 0


def test_a_notification_url_naming_no_adyen_account_is_404(stack: Stack) -> None:
    answer = httpx.post(
        stack.notification_url("ca_000000000000000000000000"),
        content=b'{"notificationItems": []}',
        trust_env=False,
    )

    assert answer.status_code == 404
    assert "ca_000000000000000000000000" in answer.json()["detail"]


# -- an authorisation whose outcome stays unknown: replay, technical cancel, wait ------------


def test_a_5xx_with_no_effect_then_a_technical_cancel_leaves_no_authorisation_and_a_clear_failure(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:error_500_before:status=503")
    payment = stack.pay("adyen-tc1")

    assert stack.drive(payment["id"]) is ProcessResult.COMPLETED

    confirm_key = f"payorch-{payment['id']}-confirm-1"
    # The confirm and its replays (PAYORCH_ADYEN_TECHNICAL_CANCEL_AFTER = 3), then never again.
    assert stack.sent("/payments") == [confirm_key] * 3
    # Sent once: the worker's wait gave its notification time to arrive.
    assert stack.sent("/cancels") == [f"payorch-{payment['id']}-technical-cancel"]
    [cancelled] = stack.items("TECHNICAL_CANCEL")
    assert cancelled["merchantReference"] == payment["id"]
    assert "originalReference" not in cancelled  # Adyen had no payment with our reference
    # It found the payment though payorch never learnt a pspReference for it.
    assert (
        f"adyen:{cancelled['pspReference']}:TECHNICAL_CANCEL:false:",
        "adyen.technical_cancel",
    ) in stack.stored_events(payment["id"])
    shown = stack.shown(payment["id"])
    assert shown["status"] == "failed"
    assert shown["failure"]["code"] == "provider_unavailable"
    assert f"technical cancel {cancelled['pspReference']}" in shown["failure"]["message"]
    assert "nothing was authorised" in shown["failure"]["message"]
    assert stack.authorisations(payment["id"]) == []
    assert stack.adyen.admin.movements()["authorisations"]["total"] == 0
    assert count_rows(stack.container, ledger_lines, payment["id"]) == 0


def test_an_authorisation_whose_answers_were_all_lost_is_cancelled_and_the_payment_failed(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:error_500_after:status=502")
    payment = stack.pay("adyen-tc2", capture_method="manual")

    assert stack.drive(payment["id"]) is ProcessResult.COMPLETED

    [made] = stack.adyen.admin.payments(reference=payment["id"])
    assert made["status"] == "cancelled"  # authorised once, then undone by the cancel
    movements = stack.adyen.admin.movements()
    assert movements["authorisations"]["total"] == 1
    assert movements["cancels"]["total"] == 1
    assert movements["captures"]["total"] == 0
    shown = stack.shown(payment["id"])
    assert shown["status"] == "failed"
    assert shown["failure"]["code"] == "provider_unavailable"
    assert f"cancelled authorisation {made['pspReference']}" in shown["failure"]["message"]
    assert count_rows(stack.container, ledger_lines, payment["id"]) == 0
    assert set(stack.sent("/payments")) == {f"payorch-{payment['id']}-confirm-1"}


def test_an_automatically_captured_authorisation_the_cancel_cannot_undo_is_read_as_succeeded(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:error_500_after:status=502")
    payment = stack.pay("adyen-tc3")

    assert stack.drive(payment["id"]) is ProcessResult.COMPLETED

    [cancel] = stack.items("TECHNICAL_CANCEL")
    assert cancel["success"] == "false"  # already captured: nothing to cancel
    shown = stack.shown(payment["id"])
    assert shown["status"] == "succeeded"
    assert len(stack.authorisations(payment["id"])) == 1
    assert stack.adyen.admin.movements()["cancels"]["total"] == 0


def test_a_late_technical_cancel_notification_is_waited_for_spending_no_attempt(
    stack: Stack,
) -> None:
    """Adyen accepted the cancel; its answer is a notification that comes when it comes
    (Adyen retries them for days).  The payment waits for it (``processing``, no lease, no
    attempt spent, never parked or failed on a guess), and the notification, delivered late,
    wakes it and settles it."""
    stack.adyen.admin.add_fault("payments:error_500_before:status=503")
    stack.adyen.admin.add_fault("webhook:drop")
    payment = stack.pay("adyen-tc4")

    assert stack.drive(payment["id"], until_waiting=True) is ProcessResult.WAITING

    shown = stack.shown(payment["id"])
    assert (shown["status"], shown["failure"]) == ("processing", None)
    with stack.container.engine.connect() as conn:
        row = conn.execute(
            sa.select(payments.c.waiting_for, payments.c.lease_owner).where(
                payments.c.id == payment["id"]
            )
        ).one()
    assert (row.waiting_for, row.lease_owner) == ("provider", None)
    # Never the confirm's key again once the cancel was sent: no authorisation after it.
    assert stack.sent("/payments") == [f"payorch-{payment['id']}-confirm-1"] * 3
    assert set(stack.sent("/cancels")) == {f"payorch-{payment['id']}-technical-cancel"}
    [cancel] = stack.items("TECHNICAL_CANCEL")
    assert stack.authorisations(payment["id"]) == []

    # Adyen's retry of the notification arrives: it wakes the payment, which reads it.
    late = {
        "live": "false",
        "notificationItems": [{"NotificationRequestItem": signed_item(cancel, HMAC_KEY)}],
    }
    answer = httpx.post(stack.notification_url(), content=json.dumps(late), trust_env=False)
    assert answer.status_code == 200
    token = force(stack.container, payment["id"], locked_until=None).lease_token
    woken = process_operation(
        stack.container.runner(), payment["id"], token, owner="test", sleep=lambda _: None
    )

    assert woken is ProcessResult.COMPLETED
    shown = stack.shown(payment["id"])
    assert shown["status"] == "failed"
    assert shown["failure"]["code"] == "provider_unavailable"
    assert set(stack.sent("/cancels")) == {f"payorch-{payment['id']}-technical-cancel"}
    assert stack.sent("/payments") == [f"payorch-{payment['id']}-confirm-1"] * 3


# -- after the charge: Adyen's asynchronous modifications (decision 0072) -----------------


def post(stack: Stack, path: str, key: str, body: dict[str, Any] | None = None) -> httpx.Response:
    with stack.client() as client:
        return client.post(path, json=body or {}, headers={"Idempotency-Key": key})


def run_operation(stack: Stack, operation_id: str) -> ProcessResult:
    """Run the operation as a worker would, with the lease token it holds now."""
    return process_operation(
        stack.container.runner(),
        operation_id,
        reload_operation(stack.container, operation_id).lease_token,
        owner="test",
        sleep=lambda seconds: None,
        rng=random.Random(3),
    )


def notified(stack: Stack, event_code: str, operation_id: str, *, count: int = 1) -> str:
    """The pspReference of the modification Adyen notified for our operation (its
    ``merchantReference``), once payorch stored ``count`` deliveries of it."""
    items = wait_until(
        lambda: any(
            i["eventCode"] == event_code and i["merchantReference"] == operation_id
            for i in stack.adyen.admin.notification_items()
        ),
        stack.adyen.admin.notification_items,
    )
    psp = next(
        str(i["pspReference"])
        for i in items
        if i["eventCode"] == event_code and i["merchantReference"] == operation_id
    )
    stack.delivered(event_code, psp, count=count)
    return psp


def settle(stack: Stack, operation_id: str, event_code: str, *, count: int = 1) -> str:
    """The operation waits on Adyen's ``received``, its notification arrives (``count``
    deliveries), and the next run settles it from the stored notification."""
    assert run_operation(stack, operation_id) is ProcessResult.WAITING
    psp = notified(stack, event_code, operation_id, count=count)
    assert run_operation(stack, operation_id) is ProcessResult.COMPLETED
    return psp


def manual_payment(stack: Stack, key: str) -> tuple[dict[str, Any], str]:
    payment = stack.pay(key, capture_method="manual")
    assert stack.run(payment["id"]) is ProcessResult.COMPLETED
    assert stack.shown(payment["id"])["status"] == "requires_capture"
    [authorised] = stack.authorisations(payment["id"])
    assert authorised["manualCapture"] is True  # asked per payment (additionalData)
    return payment, str(authorised["pspReference"])


def modification_keys(stack: Stack, psp: str, kind: str) -> list[str]:
    return [
        r["idempotency_key"]
        for r in stack.adyen.admin.requests()
        if r["path"].endswith(f"/payments/{psp}/{kind}")
    ]


def test_a_manual_payment_captured_in_part_and_refunded_in_part_books_each_notification_once(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("webhook:duplicate")  # every notification delivered twice
    payment, psp = manual_payment(stack, "adyen-m1")
    stack.delivered("AUTHORISATION", psp, count=2)

    capture = post(stack, f"/v1/payments/{payment['id']}/capture", "cap-1", {"amount": 1500})
    assert capture.status_code == 202, capture.text
    capture_id = capture.headers["Operation-Id"]
    settle(stack, capture_id, "CAPTURE", count=2)
    captured = stack.shown(payment["id"])
    refund = post(stack, f"/v1/payments/{payment['id']}/refunds", "rfd-1", {"amount": 500})
    assert refund.status_code == 202, refund.text
    refund_id = refund.json()["id"]
    refund_psp = settle(stack, refund_id, "REFUND", count=2)

    assert (captured["status"], captured["amount_captured"]) == ("succeeded", 1500)
    with stack.client() as client:
        shown_refund = client.get(f"/v1/refunds/{refund_id}").json()
    assert (shown_refund["status"], shown_refund["provider_refund_id"]) == ("succeeded", refund_psp)
    moved = stack.adyen.admin.movements()
    assert (moved["captures"]["total"], moved["captures"]["amount"]) == (1, {"EUR": 1500})
    assert (moved["refunds"]["total"], moved["refunds"]["amount"]) == (1, {"EUR": 500})
    assert modification_keys(stack, psp, "captures") == [f"payorch-{capture_id}-capture-1"]
    assert modification_keys(stack, psp, "refunds") == [f"payorch-{refund_id}-refund-1"]
    # Each notification stored once though delivered twice; each step booked once.
    assert sorted(t for _, t in stack.stored_events(payment["id"])) == [
        "adyen.capture",
        "adyen.refund",
        "payment_intent.succeeded",
    ]
    assert ledger_by_account(stack.container, payment["id"]) == {
        "provider_authorized": 0,  # the authorisation released when captured
        "merchant_authorized": 0,
        "provider_receivable": 1000,  # captured 1500, refunded 500
        "merchant_payable": -1000,
    }
    with stack.container.engine.connect() as conn:
        announced = conn.execute(
            sa.select(outbox_events.c.event_type)
            .where(outbox_events.c.payment_id == payment["id"])
            .order_by(outbox_events.c.id)
        ).scalars()
        assert [e for e in announced if e != "payment.requires_capture"] == [
            "payment.captured",
            "payment.succeeded",
            "refund.succeeded",
        ]

    # More than is left (1000): payorch's own 4xx, and nothing reaches Adyen.
    too_much = post(stack, f"/v1/payments/{payment['id']}/refunds", "rfd-2", {"amount": 1001})
    assert too_much.status_code in (400, 409, 422), too_much.text
    assert too_much.headers["content-type"].startswith("application/problem+json")
    assert "1000" in too_much.json()["detail"]
    assert len(modification_keys(stack, psp, "refunds")) == 1


def test_a_capture_whose_answer_is_lost_captures_once_at_adyen(stack: Stack) -> None:
    payment, psp = manual_payment(stack, "adyen-m2")
    stack.adyen.admin.add_fault("capture:timeout_after_effect:times=1")

    capture = post(stack, f"/v1/payments/{payment['id']}/capture", "cap-1")
    capture_id = capture.headers["Operation-Id"]
    first = run_operation(stack, capture_id)
    notified(stack, "CAPTURE", capture_id)
    results = [first]
    while results[-1] is not ProcessResult.COMPLETED and len(results) < 6:
        results.append(run_operation(stack, capture_id))

    assert results[-1] is ProcessResult.COMPLETED, results
    assert stack.shown(payment["id"])["status"] == "succeeded"
    assert stack.adyen.admin.movements()["captures"]["total"] == 1
    # Only ever key 1 (its replay, if the read came before the notification): never capture 2.
    assert set(modification_keys(stack, psp, "captures")) == {f"payorch-{capture_id}-capture-1"}
    assert reload_operation(stack.container, capture_id).unknown_outcomes == 1


def test_a_capture_that_fails_at_the_scheme_fails_with_adyens_reason_and_stays_capturable(
    stack: Stack,
) -> None:
    payment, psp = manual_payment(stack, "adyen-m3")
    stack.adyen.admin.fail_later(psp, "capture")

    capture = post(stack, f"/v1/payments/{payment['id']}/capture", "cap-1")
    capture_id = capture.headers["Operation-Id"]
    assert run_operation(stack, capture_id) is ProcessResult.WAITING
    notified(stack, "CAPTURE_FAILED", capture_id)
    assert run_operation(stack, capture_id) is ProcessResult.COMPLETED

    failed = reload_operation(stack.container, capture_id)
    assert failed.status is OperationStatus.FAILED
    assert (failed.failure_code, failed.failure_message) == (
        "capture_failed",
        "Capture failed at the scheme",
    )
    assert stack.shown(payment["id"])["status"] == "requires_capture"
    assert modification_keys(stack, psp, "captures") == [f"payorch-{capture_id}-capture-1"]
    assert ledger_by_account(stack.container, payment["id"]) == {
        "provider_authorized": 4200,
        "merchant_authorized": -4200,
    }


def test_a_cancel_releases_the_authorisation_at_adyen_once(stack: Stack) -> None:
    payment, psp = manual_payment(stack, "adyen-m4")

    cancel = post(stack, f"/v1/payments/{payment['id']}/cancel", "cnl-1")
    assert cancel.status_code == 202, cancel.text
    cancel_id = cancel.headers["Operation-Id"]
    settle(stack, cancel_id, "CANCELLATION")

    assert stack.shown(payment["id"])["status"] == "canceled"
    assert modification_keys(stack, psp, "cancels") == [f"payorch-{cancel_id}-cancel-1"]
    assert stack.adyen.admin.movements()["cancels"]["total"] == 1
    assert all(v == 0 for v in ledger_by_account(stack.container, payment["id"]).values())


def test_a_refund_that_fails_at_the_scheme_fails_with_adyens_reason_and_releases_its_amount(
    stack: Stack,
) -> None:
    payment = stack.pay("adyen-m5")  # automatic capture: succeeded, 4200 captured
    assert stack.run(payment["id"]) is ProcessResult.COMPLETED
    [authorised] = stack.authorisations(payment["id"])
    stack.adyen.admin.fail_later(authorised["pspReference"], "refund")

    refund = post(stack, f"/v1/payments/{payment['id']}/refunds", "rfd-1", {"amount": 1000})
    refund_id = refund.json()["id"]
    assert run_operation(stack, refund_id) is ProcessResult.WAITING
    notified(stack, "REFUND_FAILED", refund_id)
    assert run_operation(stack, refund_id) is ProcessResult.COMPLETED

    with stack.client() as client:
        shown = client.get(f"/v1/refunds/{refund_id}").json()
        again = post(stack, f"/v1/payments/{payment['id']}/refunds", "rfd-2", {"amount": 4200})
    assert shown["status"] == "failed"
    assert shown["failure"]["code"] == "refund_failed"
    assert shown["failure"]["message"] == "Refund failed at the scheme"
    assert again.status_code == 202, again.text  # the failed refund's 1000 is refundable again
