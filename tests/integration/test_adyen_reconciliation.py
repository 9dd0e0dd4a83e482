"""Reconciliation of an Adyen connector account against the Adyen simulator's Settlement
details reports (decision 0106), on SQLite and PostgreSQL: payments made through the API and
run by the engine, refunds settled by their notifications, discrepancies seeded the way they
arise (an authorisation with our reference payorch failed, a refund made in the Customer
Area, books that disagree on an amount), the batch closed, then the account's run as
``payorch reconcile`` builds it (``Container.reconciliation_targets``), over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import payments, reconciliation_findings
from orchestrator.domain.ids import new_payment_id
from orchestrator.domain.reconciliation import RunStatus
from orchestrator.domain.reconciliation_records import Run
from orchestrator.engine.lease import ProcessResult
from orchestrator.engine.reconcile import Account, Reconciler, SourceUnavailable, Window
from orchestrator.providers.adyen_settlement_source import AdyenSettlementSource
from tests.integration.adyen_simulator_helpers import (
    API_KEY,
    MERCHANT,
    Checkout,
    amount_body,
    card,
)
from tests.integration.adyen_simulator_helpers import payment as payment_body
from tests.integration.test_adyen_payments import Stack, adyen_stack, post, settle


@pytest.fixture
def stack(database_url: str) -> Iterator[Stack]:
    # No stall faults here: a loaded machine's slow answer must not read as a timeout.
    with adyen_stack(database_url, api_keys=(API_KEY,), read_timeout=30.0) as built:
        yield built


def window() -> Window:
    # Generous on both sides: the simulator stamps its books with this machine's clock.
    now = datetime.now(UTC)
    return Window(now - timedelta(hours=1), now + timedelta(hours=1))


def paid(stack: Stack, key: str, **extra: Any) -> dict[str, Any]:
    payment = stack.pay(key, **extra)
    assert stack.run(payment["id"]) is ProcessResult.COMPLETED
    return stack.shown(payment["id"])


def refunded(stack: Stack, payment: dict[str, Any], amount: int) -> str:
    answer = post(
        stack, f"/v1/payments/{payment['id']}/refunds", f"r-{payment['id']}", {"amount": amount}
    )
    assert answer.status_code == 202, answer.text
    refund_id = str(answer.json()["id"])
    settle(stack, refund_id, "REFUND")
    return refund_id


def checkout(stack: Stack) -> Checkout:
    return Checkout(f"{stack.adyen.url}/v71")


def reconcile(stack: Stack, over: Window | None = None, **options: Any) -> Run:
    """The account's run as the command builds it: its target, its source, its account."""
    [target] = stack.container.reconciliation_targets(stack.account)
    assert target.skipped is None, target.skipped
    assert isinstance(target.source, AdyenSettlementSource)
    try:
        return Reconciler(
            stack.container.uow, target.source, target.account, owner="test", **options
        ).run(over or window())
    finally:
        target.source.close()


def findings(stack: Stack) -> list[dict[str, Any]]:
    with stack.container.uow(read_only=True) as uow:
        return [dict(r) for r in uow.session.all(sa.select(reconciliation_findings))]


def test_a_clean_adyen_history_reconciles_to_zero_findings(stack: Stack) -> None:
    first = paid(stack, "clean-1")
    second = paid(stack, "clean-2")
    refunded(stack, first, 700)
    assert stack.adyen.admin.close_batch()["rows"] == 3
    # Paid after the batch closed: in no report yet, so in flight, not missing.
    paid(stack, "clean-3")

    run = reconcile(stack)

    assert run.status is RunStatus.COMPLETED
    assert findings(stack) == []
    assert (run.counts.payments_seen, run.counts.refunds_seen) == (2, 1)
    assert run.counts.matched == 3
    assert run.counts.in_flight == 1
    assert run.ledger_balanced is True
    assert {first["provider"], second["provider"]} == {"adyen"}


def test_seeded_adyen_discrepancies_are_each_found_once_of_the_right_kind(stack: Stack) -> None:
    adyen = checkout(stack)
    # A payment payorch failed, and an authorisation with its reference that captured anyway
    # (someone retried it by hand in the Customer Area).
    failed = stack.pay("declined", payment_method="8415718415172201")
    stack.run(failed["id"])
    assert stack.shown(failed["id"])["status"] == "failed"
    orphan = adyen.pay(payment_body(4200, reference=failed["id"]))
    # Books that disagree: payorch says more was captured than Adyen paid out.
    mismatched = paid(stack, "mismatched")
    with stack.container.uow() as uow:
        uow.session.write(
            payments.update()
            .where(payments.c.id == mismatched["id"])
            .values(amount_captured=payments.c.amount_captured + 100)
        )
        uow.commit()
    # A refund made in the Customer Area, never announced to payorch (no reference of ours).
    refunded_there = paid(stack, "refunded-there")
    unannounced = adyen.modify(
        refunded_there["provider_payment_id"], "refunds", amount_body(500, reference="ticket-9")
    )
    # Another integration's payment on the same merchant account: counted, never a finding.
    adyen.pay(payment_body(999, reference="order-77", method=card()))
    adyen.close()
    stack.adyen.admin.close_batch()

    run = reconcile(stack)

    found = {(f["kind"], f["provider_object_id"]) for f in findings(stack)}
    assert found == {
        ("orphan_at_provider", orphan["pspReference"]),
        ("amount_mismatch", mismatched["provider_payment_id"]),
        ("refund_mismatch", unannounced["pspReference"]),
    }
    assert run.counts.findings_new == 3
    assert run.counts.foreign == 1
    by_kind = {f["kind"]: f for f in findings(stack)}
    assert by_kind["orphan_at_provider"]["payment_id"] == failed["id"]
    assert by_kind["orphan_at_provider"]["ours"]["status"] == "failed"
    assert by_kind["orphan_at_provider"]["theirs"]["status"] == "succeeded"
    amount = by_kind["amount_mismatch"]
    assert (amount["ours"]["amount"], amount["theirs"]["amount"]) == (4300, 4200)
    assert by_kind["refund_mismatch"]["payment_id"] == refunded_there["id"]

    again = reconcile(stack)

    assert again.id != run.id
    assert (again.counts.findings_new, again.counts.findings_seen) == (0, 3)
    assert len(findings(stack)) == 3


def test_a_run_over_several_batches_resumes_from_its_stored_position(stack: Stack) -> None:
    made = [paid(stack, f"b1-{n}") for n in range(3)]
    stack.adyen.admin.close_batch()
    made += [paid(stack, f"b2-{n}") for n in range(2)]
    stack.adyen.admin.close_batch()
    ghost = checkout(stack)
    orphan = ghost.pay(payment_body(1500, reference=new_payment_id()))
    ghost.close()
    stack.adyen.admin.close_batch()

    # One object a page, two pages a call: the run stops part way, its position stored.
    over = window()
    stopped = reconcile(stack, over, page_size=1, max_pages=2)
    assert stopped.status is RunStatus.RUNNING
    assert stopped.counts.payments_seen == 2
    # Resumed by a new source (another process would build one): it skips to the position.
    finished = reconcile(stack, over, page_size=1)

    assert finished.id == stopped.id
    assert finished.status is RunStatus.COMPLETED
    assert finished.counts.payments_seen == 6
    assert finished.counts.matched == 5
    assert [(f["kind"], f["provider_object_id"]) for f in findings(stack)] == [
        ("orphan_at_provider", orphan["pspReference"])
    ]


def test_a_settlement_report_read_with_another_key_stops_the_run_resumable(
    stack: Stack,
) -> None:
    paid(stack, "keyed")
    stack.adyen.admin.close_batch()
    source = AdyenSettlementSource(
        api_key="AQE_someone_elses_key",
        merchant_account=MERCHANT,
        reports_base=f"{stack.adyen.url}/reports/download",
        connect_timeout=5,
        read_timeout=30,
    )
    account = Account(stack.account, stack.account, "adyen")

    with pytest.raises(SourceUnavailable) as raised:
        Reconciler(stack.container.uow, source, account, owner="test").run(window())
    source.close()

    assert raised.value.error.http_status == 401
    assert raised.value.run.status is RunStatus.RUNNING
    assert findings(stack) == []
