"""``payorch demo`` end to end with a small storm (issue 6), USD through Stripe beside EUR
through an Adyen connector account (issue 39), and a round routed across both with soft
declines forced at the first account (issue 40)."""

from __future__ import annotations

import json
import subprocess

from devtools.demo.runner import DemoOptions, run_demo
from tests.support.processes import payorch_command, process_environment


def test_the_demo_survives_faults_and_a_crash_with_every_invariant_intact(tmp_path):
    report = run_demo(DemoOptions(payments=40, seed=7, directory=tmp_path))

    assert report.violations == []
    assert report.ok
    assert report.logical_payments == 40
    assert report.accepted == 40
    assert report.replays == report.posts - report.accepted - report.retried_sends
    assert report.succeeded + report.declined + report.canceled == 40
    # 3-D Secure: some customers authenticated, the others abandoned (canceled).
    assert report.three_ds_authenticated >= 1 and report.three_ds_abandoned >= 1
    assert report.canceled == report.three_ds_abandoned
    assert report.money_movements == report.succeeded
    assert report.crashed_payment is not None
    assert report.lease_takeovers >= 1  # the crashed run's lease, taken over by the sweeper
    assert sum(report.faults_injected.values()) > 0
    assert report.duplicates == 0 and report.stuck == 0
    # The two providers side by side: every fourth payment (3-D Secure ones aside) is EUR on
    # the second merchant's Adyen account, each authorised there exactly once, at its amount
    # (the verdict's Adyen rows are unit-tested failing in tests/unit/test_demo_adyen_verdict).
    stripe, adyen = report.stripe, report.adyen
    assert stripe is not None and adyen is not None
    assert adyen.payments == 9 and stripe.payments == 31
    # A stored card the simulator authorises: all succeed unless a loaded machine outlasted
    # every retry (then the payment fails with its authorisation released, which the
    # verdict checks), so only the sum is exact.
    assert adyen.succeeded >= 1
    assert adyen.succeeded + adyen.declined + adyen.canceled == adyen.payments
    assert adyen.money_movements == adyen.succeeded
    assert adyen.duplicates == 0 and adyen.stuck == 0 and adyen.wrong_amounts == 0
    assert stripe.duplicates == 0 and stripe.stuck == 0
    assert stripe.money_movements == stripe.succeeded
    assert stripe.succeeded + adyen.succeeded == report.succeeded
    assert stripe.faults_injected > 0
    # Every final payment's event reached the demo's receiver, signed (verified there).
    hooks = report.webhooks
    assert hooks is not None
    # Refunds: the round over-asks, so some are refused; none twice, none past the capture.
    refunds = report.refunds
    assert refunds is not None
    assert refunds.succeeded >= 1 and refunds.refused >= 1
    assert refunds.double_refunds == 0 and refunds.over_refunds == 0 and refunds.stuck == 0
    # Captures: each raced by another key, under faults; none twice, each at its amount.
    captures = report.captures
    assert captures is not None
    assert captures.authorized == 5 and captures.captured >= 1 and captures.canceled >= 1
    assert captures.captured + captures.canceled == captures.authorized
    assert captures.refused >= captures.captured  # every race had a loser
    assert captures.double_captures == 0 and captures.wrong_amounts == 0
    assert captures.stuck == 0
    # The failover round: 8 EUR payments routed Stripe first, Adyen second, every second one
    # soft-declined at Stripe.  Each of those fails over with its proof recorded and succeeds
    # at Adyen; the others succeed at Stripe; no payment has money at both simulators (the
    # verdict's rows are unit-tested failing in tests/unit/test_demo_failover_verdict).
    failover = report.failover
    assert failover is not None
    assert failover.payments == 8 and failover.soft_declines_forced == 4
    # A failover other than the forced ones is legitimate only with its proof (the first
    # account's circuit opened by the round's own timeouts), so the forced ones are a floor.
    assert failover.failovers >= failover.soft_declines_forced
    assert failover.failed_over_succeeded == failover.failovers
    assert failover.failed_over_succeeded + failover.succeeded_at_first == failover.payments
    assert failover.money_at_two_providers == 0
    assert failover.failovers_without_proof == 0 and failover.stuck == 0
    # One final event per payment, one per finished refund, the capture round's
    # (requires_capture, then captured and succeeded, or canceled), and a
    # payment.requires_action for each abandoned 3-D Secure payment.  An authenticated one
    # shows requires_action too unless its customer finished before payorch read the
    # challenge: the demo's customer acts the moment the provider asks, and when the
    # confirm's answer was lost (a timeout after the effect) the retrieve that follows
    # already finds the payment succeeded.
    finished_refunds = refunds.succeeded + refunds.failed
    assert captures.events == 3 * captures.captured + 2 * captures.canceled
    assert failover.events == failover.payments  # a failover itself is no merchant event
    always = 40 + finished_refunds + captures.events + failover.events + report.three_ds_abandoned
    assert always <= hooks.events <= always + report.three_ds_authenticated
    assert hooks.delivered == hooks.events
    assert hooks.lost == 0
    assert hooks.verified == hooks.requests
    assert hooks.requests > hooks.events  # the receiver's 500s were retried


def test_the_demo_command_prints_its_report_and_exits_zero(tmp_path):
    completed = subprocess.run(
        [*payorch_command("demo", "--payments", "15", "--seed", "3", "--json")],
        env=process_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert report["ok"] is True
    assert report["logical_payments"] == 15
    assert report["duplicates"] == 0 and report["stuck"] == 0
    assert report["webhooks"]["lost"] == 0
    assert report["webhooks"]["delivered"] == report["webhooks"]["events"] >= 15
    assert report["refunds"]["over_refunds"] == 0 and report["refunds"]["double_refunds"] == 0
    assert report["captures"]["double_captures"] == 0 and report["captures"]["stuck"] == 0
    adyen = report["adyen"]
    assert adyen["payments"] == 4 and adyen["succeeded"] >= 1
    assert adyen["duplicates"] == 0 and adyen["stuck"] == 0 and adyen["wrong_amounts"] == 0
    assert report["stripe"]["payments"] + adyen["payments"] == 15
    failover = report["failover"]
    assert failover["payments"] == 4 and failover["soft_declines_forced"] == 2
    assert failover["failovers"] >= 2 and failover["money_at_two_providers"] == 0
