"""The demo's verdict: what happened, and whether every invariant held.

Everything is checked against the two sources of truth, not against what the clients
believe: the database (records, outcomes, ledger) and each provider's own record of money
movements (the Stripe simulator's charges for the USD payments, the Adyen simulator's
authorisations for the EUR payments on the Adyen connector account; the failover round's
payments, routed across both, against both books: ``devtools.demo.failover``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from prometheus_client import REGISTRY
from rich.table import Table

from devtools.demo.captures import CaptureTally
from devtools.demo.failover import FailoverTally
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


@dataclass(frozen=True)
class AdyenPayment:
    """One of payorch's payments on the Adyen connector account, as its row says."""

    id: str
    status: str
    amount: int
    currency: str


@dataclass
class ProviderTally:
    """One provider's column of the verdict: the storm's payments through it, against the
    provider's own books."""

    payments: int = 0
    succeeded: int = 0
    declined: int = 0
    canceled: int = 0
    money_movements: int = 0  # Stripe: charges; Adyen: authorisations (not released)
    faults_injected: int = 0
    duplicates: int = 0
    stuck: int = 0
    wrong_amounts: int | None = None  # None: not checked (the Stripe simulator's books
    # count charges per record, not their amounts)
    violations: list[str] = field(default_factory=list)


def judge_adyen(
    rows: Iterable[AdyenPayment], movements: dict[str, Any], faults_injected: int = 0
) -> ProviderTally:
    """payorch's payments on the Adyen account against the Adyen simulator's books
    (``admin.movements()``): at most one authorisation per payment (its reference is our
    id), one that stands for each succeeded payment and none (or one released by a
    cancel) for a failed or canceled one, each for the payment's amount in its currency,
    and every payment final."""
    tally = ProviderTally(faults_injected=faults_injected, wrong_amounts=0)
    authorisations: dict[str, list[dict[str, Any]]] = {}
    for item in movements.get("authorisations", {}).get("items", []):
        if not item.get("failed"):
            authorisations.setdefault(str(item["reference"]), []).append(item)
    released: Counter[str] = Counter(
        str(item["reference"])
        for item in movements.get("cancels", {}).get("items", [])
        if not item.get("failed")
    )
    for row in rows:
        tally.payments += 1
        authorised = authorisations.get(row.id, [])
        standing = max(len(authorised) - released[row.id], 0)
        if len(authorised) > 1:
            tally.duplicates += len(authorised) - 1
            tally.violations.append(f"{row.id} was authorised {len(authorised)} times at Adyen")
        for item in authorised:
            amount = item["amount"]
            if (amount["currency"], amount["value"]) != (row.currency.upper(), row.amount):
                tally.wrong_amounts = (tally.wrong_amounts or 0) + 1
                tally.violations.append(
                    f"{row.id} is {row.amount} {row.currency.upper()} but Adyen authorised "
                    f"{amount['value']} {amount['currency']}"
                )
        if row.status == "succeeded":
            tally.succeeded += 1
            tally.money_movements += standing
            if standing != 1:
                tally.violations.append(
                    f"{row.id} succeeded but Adyen holds {standing} authorisations for it"
                )
        elif row.status in ("failed", "canceled"):
            if row.status == "failed":
                tally.declined += 1
            else:
                tally.canceled += 1
            if standing != 0:
                tally.violations.append(
                    f"{row.id} {row.status} but Adyen holds {standing} authorisations for it"
                )
        else:
            tally.stuck += 1
            tally.violations.append(f"{row.id} (Adyen) did not reach a final state: {row.status}")
    return tally


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
    # The storm by provider: USD through Stripe, EUR through the Adyen connector account.
    stripe: ProviderTally | None = None
    adyen: ProviderTally | None = None
    # The failover round: one merchant's route across both providers, soft declines forced.
    failover: FailoverTally | None = None

    @property
    def ok(self) -> bool:
        # The failover round's row is decisive by itself: a report whose counts show money at
        # two providers fails even if no violation was written for it.
        two_providers = self.failover is not None and self.failover.money_at_two_providers > 0
        return not self.violations and not two_providers

    def as_dict(self) -> dict[str, Any]:
        data = {**self.__dict__, "ok": self.ok}
        data["webhooks"] = None if self.webhooks is None else dict(self.webhooks.__dict__)
        data["refunds"] = None if self.refunds is None else dict(self.refunds.__dict__)
        data["captures"] = None if self.captures is None else dict(self.captures.__dict__)
        data["stripe"] = None if self.stripe is None else dict(self.stripe.__dict__)
        data["adyen"] = None if self.adyen is None else dict(self.adyen.__dict__)
        data["failover"] = None if self.failover is None else dict(self.failover.__dict__)
        return data

    def providers_table(self) -> Table:
        """The storm's payments by provider, side by side."""
        table = Table(title="by provider", show_header=True)
        table.add_column("")
        table.add_column("Stripe (USD)", justify="right")
        table.add_column("Adyen (EUR)", justify="right")
        sides = (self.stripe or ProviderTally(), self.adyen or ProviderTally())

        def shown(value: int | None) -> str:
            return "-" if value is None else str(value)

        rows: list[tuple[str, Any]] = [
            ("payments", lambda t: t.payments),
            ("succeeded", lambda t: t.succeeded),
            ("declined", lambda t: t.declined),
            ("canceled", lambda t: t.canceled),
            ("money movements at the provider", lambda t: t.money_movements),
            ("provider faults injected", lambda t: t.faults_injected),
            ("duplicates (must be 0)", lambda t: t.duplicates),
            ("stuck (must be 0)", lambda t: t.stuck),
            ("wrong amounts (must be 0)", lambda t: t.wrong_amounts),
        ]
        for label, value in rows:
            table.add_row(label, *(shown(value(side)) for side in sides))
        return table

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
        if self.failover is not None:
            routed = self.failover
            rows += [
                ("routed payments (Stripe first, then Adyen; EUR)", routed.payments),
                ("soft declines forced at the first account", routed.soft_declines_forced),
                ("failovers made", routed.failovers),
                (
                    "failed over, succeeded at the second account (proof recorded)",
                    routed.failed_over_succeeded,
                ),
                ("succeeded at the first account", routed.succeeded_at_first),
                ("failovers without a recorded proof (must be 0)", routed.failovers_without_proof),
                ("money moved at two providers (must be 0)", routed.money_at_two_providers),
                ("routed payments stuck (must be 0)", routed.stuck),
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
    adyen_movements: dict[str, Any] | None = None,
    adyen_requests: list[dict[str, Any]] | None = None,
    failover: FailoverTally | None = None,
) -> DemoReport:
    violations: list[str] = list(stats.unexpected)
    if refunds is not None:
        violations += refunds.violations
    if captures is not None:
        violations += captures.violations
    if failover is not None:
        violations += failover.violations
    # The failover round's payments are judged by its own tally, against both books.
    routed = set(failover.payment_ids) if failover is not None else set()
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
                payments.c.connector_account_id,
                payments.c.amount,
                payments.c.currency,
            )
        ).all()
        outcome_count = conn.execute(
            sa.select(sa.func.count()).select_from(payment_outcomes)
        ).scalar_one()
        ledger_balance = conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(ledger_lines.c.amount), 0))
        ).scalar_one()
    # The Adyen connector account's payments are judged against the Adyen simulator's books
    # (judge_adyen), the others against the Stripe simulator's.
    on_adyen = [r for r in rows if r.connector_account_id is not None and r.id not in routed]
    adyen_ids = {r.id for r in on_adyen}
    status_by_id = {r.id: r.status for r in rows if r.id not in adyen_ids | routed}
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
    adyen_faults = Counter(str(r["fault"]) for r in adyen_requests or [] if r.get("fault"))
    adyen = judge_adyen(
        (AdyenPayment(r.id, r.status, r.amount, r.currency) for r in on_adyen),
        adyen_movements or {},
        sum(adyen_faults.values()),
    )
    if on_adyen and adyen_movements is None:
        violations.append(f"{len(on_adyen)} payments on Adyen, but no Adyen books to check")
    violations += adyen.violations
    duplicates += adyen.duplicates
    stuck += adyen.stuck
    completed = sum(1 for r in rows if r.status in FINAL_STATUSES)
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
    stripe_storm = [r for r in rows if r.idempotency_key in keys and r.id not in adyen_ids]
    stripe_moved = sum(by_record.get(r.id, 0) for r in stripe_storm)
    stripe = ProviderTally(
        payments=len(stripe_storm),
        succeeded=sum(1 for r in stripe_storm if r.status == "succeeded"),
        declined=sum(1 for r in stripe_storm if r.status == "failed"),
        canceled=sum(1 for r in stripe_storm if r.status == "canceled"),
        money_movements=stripe_moved,
        faults_injected=sum(faults.values()),
        duplicates=duplicates - adyen.duplicates,
        stuck=stuck - adyen.stuck,
    )
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
        money_movements=stripe_moved + adyen.money_movements,
        lease_takeovers=int((takeovers or 0) - takeovers_before),
        faults_injected=dict(faults + Counter({f"adyen:{k}": v for k, v in adyen_faults.items()})),
        crashed_payment=crashed_payment,
        duplicates=duplicates,
        stuck=stuck,
        webhooks=webhooks,
        refunds=refunds,
        captures=captures,
        violations=violations,
        stripe=stripe,
        adyen=adyen,
        failover=failover,
    )


def outbox_event_ids(container: Container) -> set[str]:
    with container.engine.connect() as conn:
        return set(conn.execute(sa.select(outbox_events.c.public_id)).scalars())


def sweeper_takeovers() -> float:
    """The process's takeover counter (the demo reports the difference over its run)."""
    return REGISTRY.get_sample_value("payorch_lease_takeovers_total", {"by": "sweeper"}) or 0.0
