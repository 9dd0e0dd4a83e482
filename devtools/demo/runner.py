"""One demo run: start the embedded stack, send the storm, wait, judge, print."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from devtools.demo.captures import capture_round
from devtools.demo.customer import Customer
from devtools.demo.embedded import EmbeddedOptions, EmbeddedStack
from devtools.demo.failover import failover_round
from devtools.demo.refunds import refund_round
from devtools.demo.report import (
    DemoReport,
    WebhookTally,
    build_report,
    outbox_event_ids,
    sweeper_takeovers,
)
from devtools.demo.storm import LogicalPayment, Storm, plan_payments

# After the clients gave up polling, how long the stack may still take to finish.
SETTLE_SECONDS = 30.0
# Then how long the relay may take to deliver every event (with the receiver's 500s).
WEBHOOK_SETTLE_SECONDS = 60.0
# The failover round's size: a fifth of the storm, within bounds that show both outcomes
# (half its payments meet a soft decline) and keep the round to seconds.
FAILOVER_SHARE = 5
FAILOVER_MIN, FAILOVER_MAX = 4, 24


@dataclass(frozen=True)
class DemoOptions:
    payments: int = 200
    seed: int = 42
    workers: int = 8
    timeout_rate: float = 0.05
    saved_500_rate: float = 0.03
    rate_limit_rate: float = 0.03
    decline_rate: float = 0.10
    crash: bool = True
    directory: Path | None = None


def fault_specs(options: DemoOptions) -> tuple[str, ...]:
    specs = []
    if options.timeout_rate > 0:
        specs.append(f"confirm:timeout_after_effect:{options.timeout_rate}")
    if options.saved_500_rate > 0:
        specs.append(f"confirm:error_500_after:{options.saved_500_rate}")
    if options.rate_limit_rate > 0:
        specs.append(f"confirm:rate_limit:{options.rate_limit_rate}:retry_after=1")
        specs.append(f"create:rate_limit:{options.rate_limit_rate}:retry_after=1")
    return tuple(specs)


def adyen_fault_specs(options: DemoOptions) -> tuple[str, ...]:
    """The Adyen side's faults, at the Stripe side's rates: an authorisation whose answer is
    lost after the effect, one that answers a 5xx after it, one that a 5xx precedes (nothing
    done).  Adyen's 429s are left out: the adapter does not retry them yet."""
    specs = []
    if options.timeout_rate > 0:
        specs.append(f"payments:timeout_after_effect:p={options.timeout_rate}")
    if options.saved_500_rate > 0:
        specs.append(f"payments:error_500_after:p={options.saved_500_rate}")
        specs.append(f"payments:error_500_before:p={options.saved_500_rate}:status=502")
    return tuple(specs)


def run_demo(options: DemoOptions, console: Console | None = None) -> DemoReport:
    console = console or Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="payorch-demo-") as scratch:
        directory = options.directory or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        embedded = EmbeddedOptions(
            directory=directory,
            workers=options.workers,
            seed=options.seed,
            faults=fault_specs(options),
            adyen_faults=adyen_fault_specs(options),
            # Crash once, a little into the storm, on a payment the provider charged.
            crash_after_confirms=max(1, options.payments // 20) if options.crash else None,
        )
        console.print(
            f"[bold]payorch demo[/]: {options.payments} payments, {options.workers} worker "
            f"threads, USD through Stripe (faults: {', '.join(embedded.faults) or 'none'}), "
            f"EUR through Adyen (faults: {', '.join(embedded.adyen_faults) or 'none'}); "
            f"then {failover_payments(options.payments)} EUR payments routed Stripe first, "
            f"Adyen second, half of them soft-declined at Stripe; "
            f"database {directory / 'payorch.sqlite3'}"
        )
        with EmbeddedStack(embedded) as stack:
            assert stack.container is not None and stack.simulator is not None
            assert stack.adyen is not None
            takeovers_before = sweeper_takeovers()
            plan = plan_payments(
                options.payments, seed=options.seed, decline_rate=options.decline_rate
            )
            stats = _storm_with_progress(stack, plan, options, console)
            _settle(stack)
            refunds = refund_round(
                stack.container,
                stack.api_url,
                stack.merchant_key,
                stack.simulator.admin.movements,
                stack.simulator.admin,
            )
            captures = capture_round(
                stack.container,
                stack.api_url,
                stack.merchant_key,
                max(2, options.payments // 8),
                stack.simulator.admin.movements,
                stack.simulator.admin,
            )
            failover = failover_round(
                stack.container,
                stack.api_url,
                stack.adyen_merchant_key,
                stack.adyen_account,
                failover_payments(options.payments),
                stack.simulator.admin,
                stack.adyen.admin,
            )
            webhooks = _settle_webhooks(stack)
            crashed = stack.crasher.crashed_record if stack.crasher else None
            return build_report(
                stack.container,
                plan,
                stats,
                stack.simulator.admin.movements(),
                stack.simulator.admin.requests(),
                crashed,
                takeovers_before,
                webhooks,
                refunds,
                captures,
                stack.adyen.admin.movements(),
                stack.adyen.admin.requests(),
                failover,
            )


def failover_payments(storm_payments: int) -> int:
    return min(FAILOVER_MAX, max(FAILOVER_MIN, storm_payments // FAILOVER_SHARE))


def _storm_with_progress(
    stack: EmbeddedStack, plan: list[LogicalPayment], options: DemoOptions, console: Console
) -> Any:
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("payments final", total=len(plan))

        def advance(_payment: LogicalPayment, _final: dict[str, Any]) -> None:
            progress.advance(task)

        assert stack.simulator is not None
        storm = Storm(
            stack.api_url,
            stack.merchant_key,
            seed=options.seed,
            adyen_key=stack.adyen_merchant_key,
            adyen_account=stack.adyen_account,
            on_final=advance,
        )
        with Customer(stack.simulator.simulator):
            return asyncio.run(storm.run(plan))


def _settle(stack: EmbeddedStack) -> None:
    """Wait until nothing is processing (the clients may have stopped polling early)."""
    assert stack.container is not None
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        with stack.container.uow() as uow:
            counts = uow.payments.count_by_status()
        if counts.get("processing", 0) == 0:  # a 3-D Secure wait is processing too
            return
        time.sleep(0.5)


def _settle_webhooks(stack: EmbeddedStack) -> WebhookTally:
    """Wait until the relay delivered every event (the receiver fails some on purpose),
    then count what the receiver saw, against the outbox."""
    assert stack.container is not None and stack.receiver is not None
    deadline = time.monotonic() + WEBHOOK_SETTLE_SECONDS
    while True:
        events = outbox_event_ids(stack.container)
        if events <= stack.receiver.delivered_ids() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    requests, verified = stack.receiver.counts()
    delivered = events & stack.receiver.delivered_ids()
    return WebhookTally(
        events=len(events),
        delivered=len(delivered),
        requests=requests,
        verified=verified,
        lost=len(events - delivered),
    )


def report_json(report: DemoReport) -> str:
    return json.dumps(report.as_dict(), indent=2, sort_keys=True)
