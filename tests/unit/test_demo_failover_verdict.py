"""The demo's failover verdict (``devtools.demo.failover.judge_failover``) against fabricated
books of both simulators, and ``payorch demo`` exiting 1 when the counts show money at two
providers (the report fabricated; the command is the real one)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import devtools.demo.runner as demo_runner
from devtools.demo.failover import FailoverTally, RecordedAttempt, RoutedPayment, judge_failover
from devtools.demo.report import DemoReport
from orchestrator.cli.demo import demo

STRIPE = "ca_stripe"
ADYEN = "ca_adyen"
PROOF = "stripe declined processing_error (class provider): no charge at ca_stripe"


def stripe_books(**charges: int) -> dict[str, Any]:
    return {"by_record": charges}


def adyen_books(*references: str, failed: tuple[str, ...] = ()) -> dict[str, Any]:
    items = [{"reference": r, "failed": False} for r in references]
    items += [{"reference": r, "failed": True} for r in failed]
    return {"authorisations": {"items": items}}


def moved(payment_id: str, proof: str = PROOF) -> RecordedAttempt:
    return RecordedAttempt(payment_id, STRIPE, ADYEN, proof)


def judge(
    rows: list[RoutedPayment],
    attempts: list[RecordedAttempt],
    stripe: dict[str, Any],
    adyen: dict[str, Any],
) -> FailoverTally:
    return judge_failover(rows, attempts, stripe, adyen, first_account=STRIPE, second_account=ADYEN)


def test_a_failover_with_its_proof_and_a_payment_kept_at_the_first_account_are_clean() -> None:
    rows = [
        RoutedPayment("pay_soft", "succeeded", ADYEN, 1, soft_decline=True),
        RoutedPayment("pay_plain", "succeeded", STRIPE, 0, soft_decline=False),
    ]

    tally = judge(
        rows,
        [moved("pay_soft")],
        stripe_books(pay_plain=1),
        # A refused authorisation at Adyen moved nothing.
        adyen_books("pay_soft", failed=("pay_plain",)),
    )

    assert tally.violations == []
    assert (tally.payments, tally.soft_declines_forced, tally.failovers) == (2, 1, 1)
    assert (tally.failed_over_succeeded, tally.succeeded_at_first) == (1, 1)
    assert tally.money_at_two_providers == 0 and tally.failovers_without_proof == 0
    assert tally.payment_ids == ["pay_soft", "pay_plain"]


def test_money_at_both_providers_for_one_payment_is_counted_and_a_violation() -> None:
    rows = [RoutedPayment("pay_soft", "succeeded", ADYEN, 1, soft_decline=True)]

    tally = judge(rows, [moved("pay_soft")], stripe_books(pay_soft=1), adyen_books("pay_soft"))

    assert tally.money_at_two_providers == 1
    assert tally.failed_over_succeeded == 0
    assert any("money moved at two providers" in v for v in tally.violations)


def test_an_authorisation_released_later_still_counts_as_money_at_that_provider() -> None:
    # Adyen authorised (a hold on the card), then something released it; Stripe charged.
    rows = [RoutedPayment("pay_a", "succeeded", STRIPE, 0, soft_decline=False)]

    tally = judge(rows, [], stripe_books(pay_a=1), adyen_books("pay_a"))

    assert tally.money_at_two_providers == 1


def test_a_failover_without_a_recorded_proof_is_a_violation() -> None:
    rows = [
        RoutedPayment("pay_none", "succeeded", ADYEN, 1, soft_decline=True),
        RoutedPayment("pay_blank", "succeeded", ADYEN, 1, soft_decline=True),
    ]

    tally = judge(
        rows, [moved("pay_blank", proof="  ")], stripe_books(), adyen_books("pay_none", "pay_blank")
    )

    assert tally.failovers_without_proof == 2
    assert tally.failed_over_succeeded == 0
    assert len([v for v in tally.violations if "recorded proofs" in v]) == 2


def test_a_failed_over_payment_that_did_not_succeed_at_the_second_account_is_a_violation() -> None:
    rows = [RoutedPayment("pay_soft", "failed", ADYEN, 1, soft_decline=True)]

    tally = judge(rows, [moved("pay_soft")], stripe_books(), adyen_books())

    assert tally.failed_over_succeeded == 0
    assert tally.violations == [
        "pay_soft failed over but ended failed at ca_adyen (Stripe charged 0x, Adyen authorised 0x)"
    ]


def test_a_soft_decline_that_never_failed_over_and_a_stuck_payment_are_violations() -> None:
    rows = [
        RoutedPayment("pay_soft", "failed", STRIPE, 0, soft_decline=True),
        RoutedPayment("pay_stuck", "processing", STRIPE, 0, soft_decline=False),
    ]

    tally = judge(rows, [], stripe_books(), adyen_books())

    assert tally.stuck == 1
    assert any("pay_soft met a soft decline" in v for v in tally.violations)
    assert any("pay_stuck (routed) did not reach a final state" in v for v in tally.violations)


def fabricated_report(failover: FailoverTally) -> DemoReport:
    return DemoReport(
        logical_payments=1,
        posts=1,
        accepted=1,
        replays=0,
        retried_sends=0,
        succeeded=1,
        declined=0,
        money_movements=1,
        lease_takeovers=0,
        faults_injected={},
        crashed_payment=None,
        duplicates=0,
        stuck=0,
        failover=failover,
    )


def test_a_report_whose_counts_show_money_at_two_providers_fails() -> None:
    clean = fabricated_report(FailoverTally(payments=4, failovers=2, failed_over_succeeded=2))
    assert clean.ok

    # No violation written: the count alone fails the verdict.
    doubled = fabricated_report(FailoverTally(payments=4, failovers=2, money_at_two_providers=1))
    assert doubled.violations == []
    assert not doubled.ok


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("demo")(demo)
    app.command("noop")(lambda: None)  # two commands, so "demo" is a subcommand
    return app


def test_the_demo_command_exits_1_and_shows_the_row_when_money_moved_at_two_providers(
    cli: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = fabricated_report(FailoverTally(payments=4, failovers=2, money_at_two_providers=1))
    # The stack is not started: the fabricated report stands in for a run.
    monkeypatch.setattr(demo_runner, "run_demo", lambda options, console: report)

    shown = CliRunner().invoke(cli, ["demo"], env={"COLUMNS": "200"})
    as_json = CliRunner().invoke(cli, ["demo", "--json"])

    assert shown.exit_code == 1
    assert "money moved at two providers (must be 0)" in shown.output
    assert "FAILED" in shown.output
    assert as_json.exit_code == 1
    document = json.loads(as_json.output)
    assert document["ok"] is False
    assert document["failover"]["money_at_two_providers"] == 1
