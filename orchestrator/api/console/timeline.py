"""A payment's history as one time-ordered list: what the payment page shows first.

Pure: a ``PaymentDetail`` in, ``TimelineEntry`` values out.  Entries at the same instant
keep a fixed order (lease change, then provider call, then audit, then event), which is the
order in which the worker protocol writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from orchestrator.ops.payment_reads import PaymentDetail

_LEASE_TITLES = {
    "claim": "Worker claimed the lease",
    "takeover": "Lease taken over",
    "defer": "Deferred (long backoff kept in the row)",
    "park": "Parked: needs attention",
    "retry": "Retried by an operator",
    "finish": "Finished",
}


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    kind: str  # created, lease, provider, audit, event, completed
    title: str
    tone: str  # ok, info, warn, bad
    facts: dict[str, str | int | None] = field(default_factory=dict)
    order: int = 0


def build_timeline(detail: PaymentDetail) -> list[TimelineEntry]:
    record = detail.record
    entries = [
        TimelineEntry(
            at=record.created_at,
            kind="created",
            title="Accepted",
            tone="info",
            facts={
                "amount": f"{record.request.amount} {record.request.currency}",
                "client": record.client_id,
            },
        )
    ]
    for change in detail.lease_events:
        tone = {"takeover": "warn", "park": "bad", "finish": "ok", "retry": "warn"}.get(
            change.event, "info"
        )
        entries.append(
            TimelineEntry(
                at=change.created_at,
                kind="lease",
                title=_LEASE_TITLES.get(change.event, change.event),
                tone=tone,
                facts={
                    "owner": change.owner,
                    "token": change.lease_token,
                    "recovery point": change.recovery_point,
                    "status": change.status,
                },
                order=1,
            )
        )
    for call in detail.provider_calls:
        tone = {"ok": "ok", "declined": "bad", "permanent": "bad", "retryable": "warn"}.get(
            call.outcome, "warn"
        )
        # Placed where the call started: a call recorded late (a worker frozen mid-call,
        # answered after a takeover) belongs before the takeover it explains.
        started = call.created_at - timedelta(milliseconds=call.latency_ms)
        entries.append(
            TimelineEntry(
                at=started,
                kind="provider",
                title=f"{call.method} {call.path}",
                tone=tone,
                facts={
                    "outcome": call.outcome,
                    "provider status": call.provider_status,
                    "http": call.http_status,
                    "key": call.idempotency_key,
                    "answered after": f"{call.latency_ms} ms",
                    "error": call.error,
                },
                order=2,
            )
        )
    for audit in detail.audit:
        entries.append(
            TimelineEntry(
                at=audit.created_at,
                kind="audit",
                title=f"Operator {audit.action} by {audit.actor_name}",
                tone="warn",
                facts={
                    "reason": audit.reason,
                    "old token": audit.old_token,
                    "new token": audit.new_token,
                    "audit id": audit.id,
                },
                order=3,
            )
        )
    for event in detail.events:
        entries.append(
            TimelineEntry(
                at=event.created_at,
                kind="event",
                title=f"Event {event.event_type}",
                tone="info",
                facts={"published": "yes" if event.published_at else "not yet"},
                order=4,
            )
        )
    return sorted(entries, key=lambda e: (e.at, e.order))
