"""Idempotency keys we forward to the provider, derived from our record id.

Deterministic on purpose: after a crash, the same step re-sent by another worker is the
same request to the provider, so the provider's own idempotency collapses it.
"""

from __future__ import annotations

RECORD_ID_METADATA_KEY = "payorch_record_id"


def create_key(record_id: str) -> str:
    return f"payorch-{record_id}-create"


def confirm_key(record_id: str, attempt: int) -> str:
    return f"payorch-{record_id}-confirm-{attempt}"
