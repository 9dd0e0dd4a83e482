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


def create_key(record_id: str) -> str:
    return f"payorch-{record_id}-create"


def confirm_key(record_id: str, attempt: int) -> str:
    return f"payorch-{record_id}-confirm-{attempt}"


def capture_key(operation_id: str, attempt: int) -> str:
    return f"payorch-{operation_id}-capture-{attempt}"


def cancel_key(operation_id: str, attempt: int) -> str:
    return f"payorch-{operation_id}-cancel-{attempt}"


def refund_key(operation_id: str, attempt: int) -> str:
    return f"payorch-{operation_id}-refund-{attempt}"
