"""Reconciliation against the real Stripe simulator, on SQLite and PostgreSQL: payments made
through the API and run by the engine (``process_operation``), discrepancies seeded the way
they arise (a failed payment whose intent someone else confirmed, a payment whose intent the
provider does not have, books that disagree on an amount, a Dashboard refund), then
``Reconciler`` runs over the window.  Every simulator answer is checked against Stripe's
OpenAPI subset (``AnswerWatch``), the new refunds-by-``created`` list included."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container, ReconcileTarget
from orchestrator.cli.reconcile_job import reconcile_if_due
from orchestrator.db.tables import audit_log, ledger_lines, payments, reconciliation_findings
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.model import Role
from orchestrator.domain.reconciliation import Phase, RunStatus
from orchestrator.domain.reconciliation_records import Run
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.reconcile import Account, Reconciler, SourceUnavailable, Window
from orchestrator.providers.adyen_settlement_source import AdyenSettlementSource
from orchestrator.providers.base import (
    BalanceMovementPage,
    OutcomeUnknown,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
)
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.server import ServerThread
from tests.integration.console_helpers import csrf_token, post_form, sign_in
from tests.replay.stripe_schema import AnswerWatch, schema_errors
from tests.support.processes import payorch_command, process_environment

PLATFORM_KEY = "sk_test_platformKey00000000PLAT"
PLATFORM = Account(PLATFORM_CIRCUIT_KEY, None, "stripe")


@dataclass
class Stack:
    container: Container
    simulator: RunningSimulator
    publisher: RecordingPublisher
    url: str
    merchant_key: str
    ops_key: str
    done: int = 0
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    sources: list[StripeProvider] = field(default_factory=list)

    def client(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key or self.merchant_key}"},
            timeout=30,
            trust_env=False,
        )

    def run_published(self) -> None:
        while self.done < len(self.publisher.published):
            record_id, token = self.publisher.published[self.done]
            self.done += 1
            process_operation(self.container.runner(), record_id, token, owner="test")

    def pay(self, key: str, *, payment_method: str = "pm_card_visa", amount: int = 2500) -> dict:
        body = {"amount": amount, "currency": "usd", "payment_method": payment_method}
        with self.client() as client:
            response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
        assert response.status_code == 202, response.text
        self.run_published()
        with self.client() as client:
            return dict(client.get(f"/v1/payments/{response.json()['id']}").json())

    def refund(self, payment_id: str, amount: int) -> None:
        with self.client() as client:
            response = client.post(
                f"/v1/payments/{payment_id}/refunds",
                json={"amount": amount},
                headers={"Idempotency-Key": f"refund-{payment_id}"},
            )
        assert response.status_code == 202, response.text
        self.run_published()

    def window(self) -> Window:
        # Generous on both sides: the simulator stamps objects with this machine's clock.
        return Window(self.started - timedelta(minutes=5), datetime.now(UTC) + timedelta(minutes=5))

    def source(self) -> StripeProvider:
        made = StripeProvider(
            api_key=PLATFORM_KEY, api_base=self.simulator.url, connect_timeout=5, read_timeout=30
        )
        self.sources.append(made)
        return made

    def reconcile(self, **options: Any) -> Run:
        return Reconciler(self.container.uow, self.source(), PLATFORM, owner="test", **options).run(
            self.window()
        )

    def findings(self) -> list[dict[str, Any]]:
        with self.container.uow(read_only=True) as uow:
            rows = uow.session.all(sa.select(reconciliation_findings))
        return [dict(r) for r in rows]


@pytest.fixture(scope="module")
def simulator() -> Iterator[RunningSimulator]:
    watch = AnswerWatch()
    with start_in_thread(SimulatorConfig(answer_observer=watch)) as running:
        yield running
    # Every answer these tests saw must be one the real Stripe could send.
    watch.assert_clean()
    assert watch.checked > 0


@pytest.fixture
def stack(database_url: str, simulator: RunningSimulator) -> Iterator[Stack]:
    simulator.admin.reset()
    publisher = RecordingPublisher()
    container = build_container(
        database_url,
        publisher=publisher,
        stripe_api_base=simulator.url,
        stripe_api_key=PLATFORM_KEY,
    )
    merchant = create_client(container.uow, "merchant", Role.MERCHANT)
    ops = create_client(container.uow, "night-shift", Role.OPS)
    try:
        with ServerThread(create_app(container)) as server:
            made = Stack(container, simulator, publisher, server.url, merchant.api_key, ops.api_key)
            yield made
            for source in made.sources:
                source.close()
    finally:
        container.close()


def _confirmed_intent(stack: Stack, metadata: dict[str, str]) -> str:
    """An intent made and confirmed outside payorch on the same account (the Dashboard,
    another integration, or a create of ours that was lost and confirmed later)."""
    intent_id = stack.simulator.simulator.seed_intent(amount=1800, metadata=metadata)
    stack.source().sdk.v1.payment_intents.confirm(intent_id)
    return intent_id


def _clean_history(stack: Stack) -> dict[str, Any]:
    paid = stack.pay("clean-1")
    stack.pay("clean-2", amount=990)
    stack.refund(paid["id"], 700)
    declined = stack.pay("clean-declined", payment_method="pm_card_chargeDeclined")
    assert declined["status"] == "failed"
    return paid


def test_a_clean_history_reconciles_to_zero_findings(stack: Stack) -> None:
    _clean_history(stack)

    run = stack.reconcile()

    assert run.status is RunStatus.COMPLETED
    assert run.phase is Phase.DONE
    assert run.counts.payments_seen == 3
    assert run.counts.refunds_seen == 1
    # 3 intents, 1 refund, and the balance: 2 charges and 1 refund (decision 0108).
    assert run.counts.matched == 7
    assert run.counts.foreign == 0
    assert run.counts.findings_new == 0
    assert stack.findings() == []
    assert run.ledger_balanced is True
    assert run.ledger_sums is not None and set(run.ledger_sums.values()) == {0}


def test_seeded_discrepancies_are_each_found_once_of_the_right_kind(stack: Stack) -> None:
    # A succeeded payment whose intent the provider does not have (the simulator forgets it).
    missing = stack.pay("missing")
    stack.simulator.admin.reset()
    # A failed payment whose intent, carrying our reference, moved money anyway.
    failed = stack.pay("failed", payment_method="pm_card_chargeDeclined")
    assert failed["status"] == "failed"
    orphan_intent = _confirmed_intent(stack, {RECORD_ID_METADATA_KEY: failed["id"]})
    # Books that disagree: payorch says more was captured than the provider received.
    mismatched = stack.pay("mismatched")
    with stack.container.uow() as uow:
        uow.session.write(
            payments.update()
            .where(payments.c.id == mismatched["id"])
            .values(amount_captured=payments.c.amount_captured + 100)
        )
        uow.commit()
    # A refund made in the Dashboard, never announced to payorch.
    refunded = stack.pay("refunded")
    dashboard = stack.simulator.admin.dashboard_refund(refunded["provider_payment_id"], amount=500)
    # Someone else's payment on the same account: counted, never a finding.
    _confirmed_intent(stack, {"order": "not-ours"})

    run = stack.reconcile()

    found = {(f["kind"], f["provider_object_id"]) for f in stack.findings()}
    assert found == {
        ("missing_at_provider", missing["provider_payment_id"]),
        ("orphan_at_provider", orphan_intent),
        ("amount_mismatch", mismatched["provider_payment_id"]),
        ("refund_mismatch", dashboard["id"]),
    }
    assert run.counts.findings_new == 4
    # Someone else's intent and its charge's balance transaction.
    assert run.counts.foreign == 2
    orphan = next(f for f in stack.findings() if f["kind"] == "orphan_at_provider")
    assert orphan["payment_id"] == failed["id"]
    assert orphan["ours"]["status"] == "failed"
    assert orphan["theirs"]["status"] == "succeeded"
    amount = next(f for f in stack.findings() if f["kind"] == "amount_mismatch")
    assert (amount["ours"]["amount"], amount["theirs"]["amount"]) == (2600, 2500)


def test_a_second_run_adds_no_finding_and_a_resolved_one_stays_resolved(stack: Stack) -> None:
    refunded = stack.pay("refunded")
    stack.simulator.admin.dashboard_refund(refunded["provider_payment_id"], amount=300)
    first = stack.reconcile()
    assert first.counts.findings_new == 1
    (finding,) = stack.findings()

    with stack.client(stack.ops_key) as ops:
        explained = ops.post(
            f"/v1/ops/reconciliation/findings/{finding['id']}/explain",
            json={"reason": "goodwill refund by support, ticket 4411"},
        )
    assert explained.status_code == 200, explained.text
    second = stack.reconcile()

    assert second.id != first.id
    assert (second.counts.findings_new, second.counts.findings_seen) == (0, 1)
    (again,) = stack.findings()
    assert again["id"] == finding["id"]
    assert again["last_run_id"] == second.id
    assert again["resolution"] == "resolved"
    assert again["resolved_reason"] == "goodwill refund by support, ticket 4411"
    with stack.container.uow(read_only=True) as uow:
        audited = uow.session.all(
            sa.select(audit_log).where(audit_log.c.action == "reconciliation_explained")
        )
    assert [(a["payment_id"], a["actor_name"]) for a in audited] == [
        (refunded["id"], "night-shift")
    ]


def test_the_simulators_balance_transactions_are_stripe_shaped(stack: Stack) -> None:
    """The subset has Stripe's ``balance_transaction`` schema but no path for the list, so
    each listed object is validated against the schema (and the module's answer watch does
    the same for every list the runs read); a broken object is caught."""
    paid = _clean_history(stack)
    listed = stack.source().sdk.raw_request(
        "get", "/v1/balance_transactions", limit=100, expand=["data.source"]
    )
    body = listed.data
    assert isinstance(body, dict)
    assert [t["type"] for t in body["data"]] == ["refund", "charge", "charge"]
    assert body["data"][0]["amount"] == -700
    assert body["data"][2]["source"]["metadata"] == {RECORD_ID_METADATA_KEY: paid["id"]}
    assert schema_errors("GET", "/v1/balance_transactions", 200, body) == []
    broken = {**body, "data": [{**body["data"][0], "type": "refund_of_sorts"}]}
    assert schema_errors("GET", "/v1/balance_transactions", 200, broken) != []


def _adjusted(stack: Stack, source: str, amount: int) -> str:
    """The provider's balance now says another amount for a charge or refund than its own
    objects (and payorch) do: visible only in the balance transactions."""
    return str(stack.simulator.admin.adjust_balance(source, amount)["id"])


def test_a_discrepancy_only_the_balance_shows_is_exactly_that_finding_once(
    stack: Stack,
) -> None:
    paid = _clean_history(stack)
    clean = stack.reconcile()
    assert clean.counts.findings_new == 0
    with stack.container.uow(read_only=True) as uow:
        (charge,) = uow.session.all(
            sa.select(payments.c.provider_charge_id).where(payments.c.id == paid["id"])
        )
    charge_txn = _adjusted(stack, charge["provider_charge_id"], 2400)
    (refund,) = (
        stack.source()
        .list_refunds(paid["provider_payment_id"], starting_after=None, limit=10)
        .refunds
    )
    refund_txn = _adjusted(stack, refund.id, -650)

    first = stack.reconcile()
    second = stack.reconcile()

    found = {
        (f["kind"], f["provider_object_id"], f["theirs"]["id"], f["theirs"]["amount"])
        for f in stack.findings()
    }
    assert found == {
        ("amount_mismatch", paid["provider_payment_id"], charge_txn, 2400),
        ("refund_mismatch", refund.id, refund_txn, -650),
    }
    assert first.counts.findings_new == 2
    assert (second.counts.findings_new, second.counts.findings_seen) == (0, 2)
    assert len(stack.findings()) == 2


def _unbalance_the_books(stack: Stack, payment_id: str, amount: int) -> None:
    """One ledger line no entry balances, written past the writer's check and, on
    PostgreSQL, past the deferred trigger (a session in replica role fires no trigger): what
    a hand-written fix or a bug outside the one writer would leave."""
    with stack.container.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            ledger_lines.insert().values(
                payment_id=payment_id,
                account="provider_receivable:stripe",
                amount=amount,
                currency="usd",
                created_at=datetime.now(UTC),
            )
        )


def test_a_payment_whose_ledger_does_not_balance_is_a_ledger_imbalance_finding(
    stack: Stack,
) -> None:
    over, under = stack.pay("books-over"), stack.pay("books-under")
    # Out by opposite sums: the currency's total is still zero, each payment is not.
    _unbalance_the_books(stack, over["id"], 100)
    _unbalance_the_books(stack, under["id"], -100)

    run = stack.reconcile()

    found = {f["provider_object_id"]: f for f in stack.findings()}
    assert set(found) == {f"{over['id']}/usd", f"{under['id']}/usd"}
    finding = found[f"{over['id']}/usd"]
    assert (finding["kind"], finding["object_type"], finding["payment_id"]) == (
        "ledger_imbalance",
        "ledger",
        over["id"],
    )
    assert finding["ours"] == {
        "id": over["id"],
        "status": "unbalanced",
        "amount": 100,
        "currency": "usd",
    }
    assert finding["theirs"] is None
    assert found[f"{under['id']}/usd"]["ours"]["amount"] == -100
    assert run.counts.findings_new == 2
    assert run.ledger_sums == {"usd": 0}
    assert run.ledger_balanced is False

    again = stack.reconcile()
    assert (again.counts.findings_new, again.counts.findings_seen) == (0, 2)
    assert again.ledger_balanced is False

    with stack.client(stack.ops_key) as ops:
        shown = ops.get(f"/v1/ops/reconciliation/runs/{again.id}")
    assert shown.status_code == 200, shown.text
    assert {(f["kind"], f["object_type"]) for f in shown.json()["findings"]} == {
        ("ledger_imbalance", "ledger")
    }
    with httpx.Client(base_url=stack.url, timeout=30, trust_env=False) as client:
        assert sign_in(client, stack.ops_key).status_code == 303
        page = client.get(f"/ops/reconciliation/{again.id}")
    assert page.status_code == 200
    assert "ledger_imbalance" in page.text and "none: payorch's own ledger" in page.text
    assert "unbalanced 100 usd" in page.text and "unbalanced -100 usd" in page.text
    assert "UNBALANCED" in page.text


class FailingSecondPage:
    """The real Stripe source, except that its second list call times out: the provider
    stopped answering mid-run."""

    name = "stripe"

    def __init__(self, inner: StripeProvider) -> None:
        self.inner = inner
        self.lists = 0

    def list_payments(self, **kwargs: Any) -> ProviderPaymentPage:
        self.lists += 1
        if self.lists == 2:
            raise OutcomeUnknown("read timed out (test)")
        return self.inner.list_payments(**kwargs)

    def list_refunds_created(self, **kwargs: Any) -> RefundPage:
        return self.inner.list_refunds_created(**kwargs)

    def list_balance_movements(self, **kwargs: Any) -> BalanceMovementPage:
        return self.inner.list_balance_movements(**kwargs)

    def retrieve_payment(self, provider_payment_id: str) -> ProviderPayment:
        return self.inner.retrieve_payment(provider_payment_id)

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        return self.inner.retrieve_refund(refund_id)

    def close(self) -> None:
        self.inner.close()


def test_an_interrupted_run_resumes_from_its_cursor_and_counts_each_object_once(
    stack: Stack,
) -> None:
    for n in range(5):
        stack.pay(f"many-{n}", amount=1000 + n)
    window = stack.window()
    failing = FailingSecondPage(stack.source())

    with pytest.raises(SourceUnavailable) as stopped:
        Reconciler(stack.container.uow, failing, PLATFORM, owner="first", page_size=2).run(window)

    interrupted = stopped.value.run
    assert interrupted.status is RunStatus.RUNNING
    assert interrupted.phase is Phase.PAYMENTS
    assert interrupted.cursor is not None
    assert interrupted.counts.payments_seen == 2
    resumed = Reconciler(
        stack.container.uow, stack.source(), PLATFORM, owner="second", page_size=2
    ).run(window)
    assert resumed.id == interrupted.id
    assert resumed.status is RunStatus.COMPLETED
    assert resumed.counts.payments_seen == 5
    # 5 intents and their 5 charges' balance transactions, read 2 a page, each once.
    assert resumed.counts.matched == 10
    assert stack.findings() == []


class FailingSecondBalancePage(FailingSecondPage):
    """The real Stripe source, except that its second balance transactions call times out."""

    def __init__(self, inner: StripeProvider) -> None:
        super().__init__(inner)
        self.balance_lists = 0

    def list_payments(self, **kwargs: Any) -> ProviderPaymentPage:
        return self.inner.list_payments(**kwargs)

    def list_balance_movements(self, **kwargs: Any) -> BalanceMovementPage:
        self.balance_lists += 1
        if self.balance_lists == 2:
            raise OutcomeUnknown("read timed out (test)")
        return self.inner.list_balance_movements(**kwargs)


def test_a_run_interrupted_in_the_balance_resumes_from_its_cursor(stack: Stack) -> None:
    for n in range(5):
        stack.pay(f"balance-{n}", amount=1000 + n)
    window = stack.window()
    failing = FailingSecondBalancePage(stack.source())

    with pytest.raises(SourceUnavailable) as stopped:
        Reconciler(stack.container.uow, failing, PLATFORM, owner="first", page_size=2).run(window)

    interrupted = stopped.value.run
    assert interrupted.phase is Phase.BALANCE
    assert interrupted.cursor is not None and interrupted.cursor.startswith("txn_")
    # 5 intents, then the first page of 2 balance transactions.
    assert interrupted.counts.matched == 7
    resumed = Reconciler(
        stack.container.uow, stack.source(), PLATFORM, owner="second", page_size=2
    ).run(window)
    assert resumed.id == interrupted.id
    assert resumed.status is RunStatus.COMPLETED
    assert resumed.counts.matched == 10
    assert stack.findings() == []


def test_a_page_budget_leaves_the_run_resumable_at_once(stack: Stack) -> None:
    for n in range(3):
        stack.pay(f"budget-{n}")
    window = stack.window()

    paused = Reconciler(
        stack.container.uow, stack.source(), PLATFORM, owner="a", page_size=1, max_pages=2
    ).run(window)
    finished = Reconciler(
        stack.container.uow, stack.source(), PLATFORM, owner="b", page_size=1
    ).run(window)

    assert paused.status is RunStatus.RUNNING
    assert paused.counts.payments_seen == 2
    assert finished.id == paused.id
    assert finished.status is RunStatus.COMPLETED
    assert finished.counts.payments_seen == 3


def test_the_runs_are_for_ops_only_and_documented_as_problems(stack: Stack) -> None:
    paid = stack.pay("api")
    stack.simulator.admin.dashboard_refund(paid["provider_payment_id"], amount=100)
    run = stack.reconcile()

    with stack.client() as merchant:
        refused = merchant.get("/v1/ops/reconciliation/runs")
    with stack.client(stack.ops_key) as ops:
        listed = ops.get("/v1/ops/reconciliation/runs")
        detail = ops.get(f"/v1/ops/reconciliation/runs/{run.id}")
        unknown = ops.get("/v1/ops/reconciliation/runs/rcn_000000000000000000000000")
        finding_id = detail.json()["findings"][0]["id"]
        no_reason = ops.post(
            f"/v1/ops/reconciliation/findings/{finding_id}/explain", json={"reason": " "}
        )
        first = ops.post(
            f"/v1/ops/reconciliation/findings/{finding_id}/explain", json={"reason": "known"}
        )
        twice = ops.post(
            f"/v1/ops/reconciliation/findings/{finding_id}/explain", json={"reason": "again"}
        )

    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert [r["id"] for r in listed.json()["data"]] == [run.id]
    body = detail.json()
    assert body["counts"]["refunds_seen"] == 1
    assert body["window"]["since"] and body["ledger_balanced"] is True
    assert [f["kind"] for f in body["findings"]] == ["refund_mismatch"]
    assert body["findings"][0]["theirs"]["amount"] == 100
    assert body["findings"][0]["ours"] is None
    assert unknown.status_code == 404
    assert no_reason.status_code == 400
    assert "reason" in no_reason.json()["detail"].lower()
    assert first.status_code == 200
    assert first.json()["resolution"]["by"] == "night-shift"
    assert twice.status_code == 409


def test_targets_give_each_account_its_providers_source(stack: Stack) -> None:
    with stack.client() as merchant:
        made = merchant.post(
            "/v1/connector_accounts",
            json={
                "name": "eu",
                "provider": "adyen",
                "credentials": {
                    "api_key": "AQE_test_key_0000000000",
                    "merchant_account": "ShopEU",
                    "hmac_key": "00" * 32,
                },
            },
        )
    assert made.status_code == 201, made.text

    targets: list[ReconcileTarget] = stack.container.reconciliation_targets()

    by_key = {t.account.key: t for t in targets}
    assert by_key[PLATFORM_CIRCUIT_KEY].source is not None
    adyen = by_key[made.json()["id"]]
    # An Adyen account is read from its settlement details reports (decision 0106).
    assert isinstance(adyen.source, AdyenSettlementSource)
    assert adyen.skipped is None
    for target in targets:
        if target.source is not None:
            target.source.close()


def test_the_scheduled_job_runs_when_the_last_run_is_older_than_its_period(
    stack: Stack,
) -> None:
    stack.pay("scheduled")
    owner = "sweeper-test"

    first = reconcile_if_due(stack.container, owner=owner)
    second = reconcile_if_due(stack.container, owner=owner)

    assert first is not None
    (platform,) = [o for o in first if o.account == PLATFORM_CIRCUIT_KEY]
    assert platform.view is not None
    assert platform.view.run.status is RunStatus.COMPLETED
    assert second is None  # the run just completed is younger than the period


def test_the_scheduled_job_is_off_at_zero(database_url: str) -> None:
    container = build_container(database_url, reconcile_every_seconds=0)
    try:
        assert reconcile_if_due(container, owner="sweeper-test") is None
        with container.uow(read_only=True) as uow:
            assert uow.reconciliation.runs() == []
    finally:
        container.close()


def _cli(stack: Stack, *args: str, api_base: str | None = None) -> subprocess.CompletedProcess[str]:
    env = process_environment(
        {
            "PAYORCH_ENV": "test",
            "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
            "PAYORCH_DATABASE_URL": stack.container.settings.database_url,
            "PAYORCH_LOG_LEVEL": "WARNING",
            "PAYORCH_STRIPE_API_BASE": api_base or stack.simulator.url,
            "PAYORCH_STRIPE_API_KEY": PLATFORM_KEY,
            "PAYORCH_PROVIDER_TIMEOUT_SECONDS": "5",
            "COLUMNS": "80",
        }
    )
    return subprocess.run(
        payorch_command("reconcile", *args),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _window_args(stack: Stack) -> list[str]:
    window = stack.window()
    return ["--since", window.start.isoformat(), "--until", window.end.isoformat()]


def test_the_command_exits_1_on_findings_and_0_when_clean_in_80_columns(stack: Stack) -> None:
    clean = stack.pay("cli-clean")
    first = _cli(stack, *_window_args(stack))
    stack.simulator.admin.dashboard_refund(clean["provider_payment_id"], amount=100)
    second = _cli(stack, *_window_args(stack))

    assert first.returncode == 0, first.stderr
    assert second.returncode == 1, second.stderr
    for result in (first, second):
        assert "Traceback" not in result.stderr
        assert PLATFORM_CIRCUIT_KEY in result.stdout
        assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_the_command_refuses_a_time_without_a_zone_and_exits_69_when_unreachable(
    stack: Stack,
) -> None:
    no_zone = _cli(stack, "--since", "2026-12-01T00:00:00")
    no_utc = _cli(stack, "--since", "0001-01-01T00:00:00+01:00")
    unreachable = _cli(stack, *_window_args(stack), api_base="http://127.0.0.1:9")

    assert no_zone.returncode == 2
    assert "zone" in no_zone.stderr
    assert no_utc.returncode == 2, no_utc.stderr
    assert "--since" in no_utc.stderr and "out of range" in no_utc.stderr
    assert unreachable.returncode == 69, unreachable.stderr
    assert "run again" in unreachable.stderr
    for result in (no_zone, no_utc, unreachable):
        assert "Traceback" not in result.stderr
    with stack.container.uow(read_only=True) as uow:
        (left,) = uow.reconciliation.runs()
    assert left.status is RunStatus.RUNNING  # resumable


def test_the_console_shows_a_run_and_marks_a_finding_explained(stack: Stack) -> None:
    paid = stack.pay("console")
    refund = stack.simulator.admin.dashboard_refund(paid["provider_payment_id"], amount=200)
    run = stack.reconcile()
    (finding,) = stack.findings()
    explain = f"/ops/reconciliation/{run.id}/findings/{finding['id']}/explain"

    with httpx.Client(
        base_url=stack.url, timeout=30, trust_env=False, follow_redirects=False
    ) as client:
        assert sign_in(client, stack.ops_key).status_code == 303
        listing = client.get("/ops/reconciliation")
        page = client.get(f"/ops/reconciliation/{run.id}")
        token = csrf_token(page.text)
        no_reason = post_form(client, explain, csrf_token=token, reason=" ")
        done = post_form(client, explain, csrf_token=token, reason="support refund, ticket 9")
        after = client.get(f"/ops/reconciliation/{run.id}")
        unknown = client.get("/ops/reconciliation/rcn_000000000000000000000000")

    assert listing.status_code == 200 and run.id in listing.text
    assert page.status_code == 200
    assert "refund_mismatch" in page.text and refund["id"] in page.text
    assert no_reason.status_code == 400
    assert done.status_code == 303
    assert "resolved by night-shift: support refund, ticket 9" in after.text
    assert unknown.status_code == 404
