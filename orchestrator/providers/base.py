"""The provider protocol and our error taxonomy.

Everything the worker needs from a provider is these four operations (create, confirm,
retrieve, list).  Each call either
returns a ``ProviderIntent`` or raises one of::

    ProviderError
    ├── Declined          the provider refused the payment (card errors): a final outcome,
    │                     carries code and decline_code
    ├── Permanent         our request is wrong (invalid request, authentication): retrying
    │                     the same request cannot help; the payment fails
    ├── Retryable         known not to have acted (429 rate limit, 409 idempotency key in
    │                     use): wait ``retry_after`` (if the provider said) and try again
    └── OutcomeUnknown    timeout, connection error, 5xx: the provider MAY have acted.
                          Never resend blindly: query first.

Idempotency keys are derived from our record id (``keys``), never random, so a resend of
the same step after a crash is the same request to the provider.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class PaymentError:
    """The provider's last payment error on an intent (Stripe's ``last_payment_error``)."""

    code: str | None
    decline_code: str | None
    message: str | None
    # The payment method the failed attempt used (Stripe detaches it from a declined intent
    # and names it here instead).
    payment_method: str | None = None


@dataclass(frozen=True)
class ProviderIntent:
    id: str
    # Stripe's PaymentIntent statuses: requires_payment_method, requires_confirmation,
    # requires_action, processing, requires_capture, canceled, succeeded.
    status: str
    amount: int
    currency: str
    metadata: dict[str, str]
    latest_charge: str | None = None
    last_payment_error: PaymentError | None = None
    created: int | None = None
    # What the intent would charge, or charged: compared with the record before any intent
    # is adopted, confirmed or settled (``domain.intent_match``).
    payment_method: str | None = None
    customer: str | None = None
    capture_method: str = "automatic"
    # Money the provider actually received (a succeeded intent): what the ledger books.
    amount_received: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class IntentPage:
    intents: tuple[ProviderIntent, ...]
    has_more: bool


class ProviderError(Exception):
    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status


class Declined(ProviderError):
    def __init__(
        self,
        message: str,
        *,
        code: str,
        decline_code: str | None = None,
        intent_id: str | None = None,
        http_status: int | None = 402,
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.code = code
        self.decline_code = decline_code
        self.intent_id = intent_id


class Permanent(ProviderError):
    def __init__(
        self, message: str, *, code: str | None = None, http_status: int | None = None
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.code = code


class Retryable(ProviderError):
    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        code: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.retry_after = retry_after
        self.code = code


class OutcomeUnknown(ProviderError):
    pass


class PaymentProvider(Protocol):
    """What the worker needs from a provider.  Implementations must not retry: retries
    are the worker's, at one layer."""

    name: str

    def create_intent(
        self,
        *,
        record_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        description: str | None,
        metadata: dict[str, str],
    ) -> ProviderIntent:
        """Create an unconfirmed intent (``confirm=false``, moves no money) with the key
        ``payorch-{record_id}-create`` and ``metadata[payorch_record_id] = record_id``."""

    def confirm_intent(self, intent_id: str, *, record_id: str, attempt: int) -> ProviderIntent:
        """Confirm with the key ``payorch-{record_id}-confirm-{attempt}``."""

    def retrieve_intent(self, intent_id: str) -> ProviderIntent:
        """Strongly consistent read of the intent."""

    def list_intents(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> IntentPage:
        """One page of the intents created in ``[created_gte, created_lte]`` (provider
        timestamps, seconds), newest first, after ``starting_after``.  Listing is strongly
        consistent; the provider's search is not and is never used to prove absence."""
