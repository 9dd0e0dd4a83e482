"""What an operator's payment search asks for (the ops API, the console and the CLI build
it; the payment search repository turns it into SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.domain.states import PaymentStatus


@dataclass(frozen=True)
class PaymentFilters:
    status: PaymentStatus | None = None
    client_id: str | None = None
    customer_reference: str | None = None
    idempotency_key: str | None = None
    # Exact match on the idempotency key or the customer reference (the console's box).
    text: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
