"""The demo's verdict: what happened, and whether every invariant held.

Everything is checked against the two sources of truth, not against what the clients
believe: the database (records, outcomes, ledger) and the provider's own record of money
movements.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from prometheus_client import REGISTRY
from rich.table import Table

from devtools.demo.captures import CaptureTally
from devtools.demo.refunds import RefundTally
from devtools.demo.storm import LogicalPayment, StormStats
from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines, outbox_events, payment_outcomes, payments

FINAL_STATUSES = ("succeeded", "failed", "canceled")


@dataclass(frozen=True)
class WebhookTally:
    """What the demo's receiver saw, against the outbox."""

    events: int  # events written (the outbox)
    delivered: int  # events the receiver answered 2xx with a verified signature
    requests: int  # webhook requests received (retries included)
    verified: int  # requests whose signature verified (must be all)
    lost: int  # events never delivered (must be 0)


@dataclass
class DemoReport:
    logical_payments: int
    posts: int
    accepted: int
    replays: int
    retried_sends: int
    succeeded: int
    declined: int
    money_movements: int
    lease_takeovers: int
    faults_injected: dict[str, int]
    crashed_payment: str | None
    duplicates: int
    stuck: int
    webhooks: WebhookTally | None = None
    refunds: RefundTally | None = None
    captures: CaptureTally | None = None
    violations: list[str] = field(default_factory=list)
    # 3-D Secure: payments whose customer authenticated (succeeded), and those abandoned
    # (canceled / authentication_timeout, the intent canceled at the provider).
    three_ds_authenticated: int = 0
    three_ds_abandoned: int = 0
    canceled: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        data = {**self.__dict__, "ok": self.ok}
        data["webhooks"] = None if self.webhooks is None else dict(self.webhooks.__dict__)
        data["refunds"] = None if self.refunds is None else dict(self.refunds.__dict__)
        data["captures"] = None if self.captures is None else dict(self.captures.__dict__)
        return data

    def table(self) -> Table:
        table = Table(title="payorch demo", show_header=True)
        table.add_column("")
        table.add_column("count", justify="right")
        rows: list[tuple[str, object]] = [
            ("logical payments", self.logical_payments),
            ("requests sent (with duplicates and retries)", self.posts),
            ("accepted (new records)", self.accepted),
            ("replays answered", self.replays),
            ("succeeded", self.succeeded),
            ("declined", self.declined),
            ("3-D Secure: authenticated, succeeded", self.three_ds_authenticated),
            ("3-D Secure: abandoned, canceled (authentication_timeout)", self.three_ds_abandoned),
            ("canceled", self.canceled),
            ("provider money movements", self.money_movements),
            ("provider faults injected", sum(self.faults_injected.values())),
            ("worker crashes (after the charge)", 1 if self.crashed_payment else 0),
            ("lease takeovers", self.lease_takeovers),
            ("duplicates (must be 0)", self.duplicates),
            ("stuck (must be 0)", self.stuck),
        ]
        if self.webhooks is not None:
            hooks = self.webhooks
            rows += [
                ("events written (outbox)", hooks.events),
                ("webhook requests (with retries)", hooks.requests),
                ("events delivered", hooks.delivered),
                ("signatures verified (must be all)", f"{hooks.verified} / {hooks.requests}"),
                ("events lost (must be 0)", hooks.lost),
            ]
        if self.refunds is not None:
            refunds = self.refunds
            rows += [
                ("refunds requested (3 x 40 % of some payments, at once)", refunds.requested),
                ("refunds refused (409 refund-exceeds-captured)", refunds.refused),
                ("refunds issued (succeeded)", refunds.succeeded),
                ("double refunds (must be 0)", refunds.double_refunds),
                ("over-refunds (must be 0)", refunds.over_refunds),
                ("refunds stuck (must be 0)", refunds.stuck),
            ]
        if self.captures is not None:
            captures = self.captures
            rows += [
                ("manual payments authorised (requires_capture)", captures.authorized),
                ("captures / cancels sent (doubled, raced by another key)", captures.requested),
                ("refused (409: the race's loser)", captures.refused),
                ("captured (70 % of the authorisation)", captures.captured),
                ("canceled (authorisation released)", captures.canceled),
                ("double captures (must be 0)", captures.double_captures),
                ("wrong capture amounts (must be 0)", captures.wrong_amounts),
                ("captures stuck (must be 0)", captures.stuck),
            ]
        for label, value in rows:
            table.add_row(label, str(value))
        return table


def build_report(
    container: Container,
    plan: list[LogicalPayment],
    stats: StormStats,
    movements: dict[str, Any],
    provider_requests: list[dict[str, Any]],
    crashed_payment: str | None,
    takeovers_before: float,
    webhooks: WebhookTally | None = None,
    refunds: RefundTally | None = None,
    captures: CaptureTally | None = None,
) -> DemoReport:
    violations: list[str] = list(stats.unexpected)
    if refunds is not None:
        violations += refunds.violations
    if captures is not None:
        violations += captures.violations
    if webhooks is not None:
        if webhooks.lost:
            violations.append(f"{webhooks.lost} events never reached the webhook receiver")
        if webhooks.verified != webhooks.requests:
            bad = webhooks.requests - webhooks.verified
            violations.append(f"{bad} webhook requests failed signature verification")
    keys = {p.key for p in plan}
    with container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                payments.c.id,
                payments.c.idempotency_key,
                payments.c.status,
                payments.c.failure_code,
                payments.c.capture_method,
            )
        ).all()
        outcome_count = conn.execute(
            sa.select(sa.func.count()).select_from(payment_outcomes)
        ).scalar_one()
        ledger_balance = conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(ledger_lines.c.amount), 0))
        ).scalar_one()
    status_by_id = {r.id: r.status for r in rows}
    records_per_key = Counter(r.idempotency_key for r in rows if r.idempotency_key in keys)
    by_record: dict[str, int] = movements.get("by_record", {})
    # Under manual capture a charge only authorises: the money moves with the capture.
    captured_by_record: dict[str, int] = movements.get("captures", {}).get("by_record", {})
    manual = {r.id for r in rows if r.capture_method == "manual"}

    duplicates = 0
    for key in keys:
        if records_per_key[key] != 1:
            duplicates += max(records_per_key[key] - 1, 0)
            violations.append(f"key {key} has {records_per_key[key]} records")
    for payment_id, status in status_by_id.items():
        moved = by_record.get(payment_id, 0)
        if payment_id in manual:
            if moved > 1:
                violations.append(f"{payment_id} was authorised {moved} times")
            moved = captured_by_record.get(payment_id, 0)
        if moved > 1:
            duplicates += moved - 1
            violations.append(f"{payment_id} was charged {moved} times")
        if status == "succeeded" and moved != 1:
            violations.append(f"{payment_id} succeeded but the provider moved money {moved}x")
        if status in ("failed", "canceled") and moved != 0:
            violations.append(f"{payment_id} {status} but the provider moved money {moved}x")
    stuck = sum(1 for status in status_by_id.values() if status not in FINAL_STATUSES)
    if stuck:
        violations.append(f"{stuck} payments did not reach a final state")
    completed = sum(1 for s in status_by_id.values() if s in FINAL_STATUSES)
    by_key = {r.idempotency_key: r for r in rows}
    authenticated = abandoned = 0
    for logical in plan:
        row = by_key.get(logical.key)
        if logical.three_ds is None or row is None:
            continue
        if logical.three_ds == "authenticate" and row.status == "succeeded":
            authenticated += 1
        elif logical.three_ds == "abandon" and (row.status, row.failure_code) == (
            "canceled",
            "authentication_timeout",
        ):
            abandoned += 1
        else:
            violations.append(
                f"3-D Secure payment {logical.key} ({logical.three_ds}) ended "
                f"{row.status} / {row.failure_code}"
            )
    if outcome_count != completed:
        violations.append(f"{outcome_count} outcome rows for {completed} completed payments")
    if ledger_balance != 0:
        violations.append(f"the ledger is off balance by {ledger_balance}")
    if stats.server_errors:
        violations.append(f"the API answered {stats.server_errors} server errors")

    faults = Counter(str(r["fault"]) for r in provider_requests if r.get("fault"))
    storm_statuses = [r.status for r in rows if r.idempotency_key in keys]
    takeovers = sweeper_takeovers()
    return DemoReport(
        logical_payments=len(plan),
        posts=stats.posts,
        accepted=stats.accepted,
        replays=stats.replays,
        retried_sends=stats.retried_sends,
        # The storm's payments (the capture round's are in its own tally).
        succeeded=sum(1 for s in storm_statuses if s == "succeeded"),
        declined=sum(1 for s in storm_statuses if s == "failed"),
        canceled=sum(1 for s in storm_statuses if s == "canceled"),
        three_ds_authenticated=authenticated,
        three_ds_abandoned=abandoned,
        money_movements=sum(by_record.get(r.id, 0) for r in rows if r.idempotency_key in keys),
        lease_takeovers=int((takeovers or 0) - takeovers_before),
        faults_injected=dict(faults),
        crashed_payment=crashed_payment,
        duplicates=duplicates,
        stuck=stuck,
        webhooks=webhooks,
        refunds=refunds,
        captures=captures,
        violations=violations,
    )


def outbox_event_ids(container: Container) -> set[str]:
    with container.engine.connect() as conn:
        return set(conn.execute(sa.select(outbox_events.c.public_id)).scalars())


def sweeper_takeovers() -> float:
    """The process's takeover counter (the demo reports the difference over its run)."""
    return REGISTRY.get_sample_value("payorch_lease_takeovers_total", {"by": "sweeper"}) or 0.0
