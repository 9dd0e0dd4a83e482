"""The wake-up channel: PostgreSQL NOTIFY from the accept's statement to the dispatcher.

A notification is a hint, never the truth: PostgreSQL delivers it only to sessions
LISTENing at commit time, drops it when nobody listens, and a dispatcher can die between
hearing it and publishing.  The committed row under its dispatch lease is the durable
signal; the sweeper re-queues any payment whose wake-up was lost once that lease expires.
"""

from __future__ import annotations

WAKE_CHANNEL = "payorch_wake"


def wake_payload(payment_id: str, lease_token: int) -> str:
    return f"{payment_id}:{lease_token}"


def parse_wake_payload(payload: str) -> tuple[str, int] | None:
    """``(payment id, lease token)``, or None for a payload this version does not read."""
    payment_id, _, token = payload.rpartition(":")
    if not payment_id or not token.isdigit():
        return None
    return payment_id, int(token)
