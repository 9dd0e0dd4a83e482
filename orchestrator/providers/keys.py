"""Idempotency keys we forward to the provider, derived from our own ids.

Deterministic on purpose: after a crash, the same step re-sent by another worker is the
same request to the provider, so the provider's own idempotency collapses it.  The shape is
``payorch-{id}-{step}[-{attempt}]``: a new attempt (after a proven non-effect) gets a new key,
because the provider replays a saved answer -- even a 500 -- for as long as it keeps the key.
"""

from __future__ import annotations

RECORD_ID_METADATA_KEY = "payorch_record_id"
# On every refund we create: a lookup after an unknown outcome matches refunds by it.
REFUND_ID_METADATA_KEY = "payorch_refund_id"


def _root(record_id: str, route_attempt: int) -> str:
    """The keys of a payment's attempt at one account of its route (decision 0086).  The
    first attempt keeps the keys payorch always sent; attempt k > 1 (after a failover) gets
    ``payorch-{id}-a{k}-…``, so the next account's idempotency never meets the last one's
    (two accounts of one provider may share a key space: two Adyen merchant accounts of one
    company do)."""
    return record_id if route_attempt <= 1 else f"{record_id}-a{route_attempt}"


def create_key(record_id: str, route_attempt: int = 1) -> str:
    return f"payorch-{_root(record_id, route_attempt)}-create"


def confirm_key(record_id: str, attempt: int, route_attempt: int = 1) -> str:
    return f"payorch-{_root(record_id, route_attempt)}-confirm-{attempt}"


def details_key(record_id: str, attempt: int, route_attempt: int = 1) -> str:
    """The forward of the customer's authentication result ``attempt`` (``ActionResult``)."""
    return f"payorch-{_root(record_id, route_attempt)}-details-{attempt}"


def capture_key(operation_id: str, attempt: int) -> str:
    return f"payorch-{operation_id}-capture-{attempt}"


def cancel_key(operation_id: str, attempt: int) -> str:
    return f"payorch-{operation_id}-cancel-{attempt}"


def refund_key(operation_id: str, attempt: int) -> str:
    return f"payorch-{operation_id}-refund-{attempt}"


def technical_cancel_key(record_id: str, route_attempt: int = 1) -> str:
    """One key per attempt, never numbered: a technical cancel is re-sent only as the same
    request (a cancel moves no money, and its outcome arrives by notification)."""
    return f"payorch-{_root(record_id, route_attempt)}-technical-cancel"
