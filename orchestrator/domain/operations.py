"""Operations after the charge: capture, cancel, refund, and the refund sync (reading the
provider's refunds of a payment to record those made outside payorch).

An operation row moves through a smaller version of the payment's state machine::

      status            recovery point
      ------            --------------
    processing  ──►  accepted ──(provider answered)──► provider_settled
        │  ▲                                               │
   park │  │ retry                                         │ finish (one fenced transaction)
        ▼  │                                               ▼
    needs_attention                              succeeded | failed  @ completed

The ids carry the kind (``rfd_…`` a refund, ``cap_…`` a capture, ``cnl_…`` a cancel, ``rsy_…``
a refund sync), so an id alone says which rows hold its lease and which steps run it.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from orchestrator.domain.states import RecoveryPoint


class OperationKindName(StrEnum):
    CAPTURE = "capture"
    CANCEL = "cancel"
    REFUND = "refund"
    REFUND_SYNC = "refund_sync"


class OperationStatus(StrEnum):
    PROCESSING = "processing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"

    @property
    def is_final(self) -> bool:
        return self in (OperationStatus.SUCCEEDED, OperationStatus.FAILED)


ID_PREFIXES = {
    OperationKindName.REFUND: "rfd",
    OperationKindName.CAPTURE: "cap",
    OperationKindName.CANCEL: "cnl",
    OperationKindName.REFUND_SYNC: "rsy",
}
_OPERATION_ID = re.compile(r"^(rfd|cap|cnl|rsy)_[0-9a-f]{32}$")
REFUND_ID_PATTERN = "^rfd_[0-9a-f]{32}$"


def new_operation_id(kind: OperationKindName) -> str:
    return f"{ID_PREFIXES[kind]}_{secrets.token_hex(16)}"


def is_operation_id(value: str) -> bool:
    return _OPERATION_ID.fullmatch(value) is not None


def is_refund_id(value: str) -> bool:
    return is_operation_id(value) and value.startswith("rfd_")


def kind_of(operation_id: str) -> OperationKindName | None:
    """The kind an operation id names (None: not an operation id)."""
    if not is_operation_id(operation_id):
        return None
    prefix = operation_id.split("_", 1)[0]
    return next(kind for kind, p in ID_PREFIXES.items() if p == prefix)


@dataclass(frozen=True)
class OperationRecord:
    id: str
    kind: OperationKindName
    payment_id: str
    client_id: str
    status: OperationStatus
    recovery_point: RecoveryPoint
    lease_token: int
    lease_owner: str | None
    locked_until: datetime | None
    next_attempt_at: datetime | None
    attempts: int
    unknown_outcomes: int
    step_attempts: int
    lookup_pending: bool
    last_error: str | None
    amount: int | None
    currency: str
    reason: str | None
    metadata: dict[str, str]
    origin: str
    provider_object_id: str | None
    provider_outcome: str | None
    failure_code: str | None
    failure_message: str | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    idempotency_key: str | None = None
    request_fingerprint: str | None = None
    accepted_response: bytes | None = None
    final_response: bytes | None = None


# Where a refund came from: asked through payorch's API, or made at the provider by someone
# else (the provider's dashboard) and recorded by the refund sync.
ORIGIN_PAYORCH = "payorch"
ORIGIN_PROVIDER = "provider"
