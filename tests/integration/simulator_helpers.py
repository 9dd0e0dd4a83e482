"""Helpers for the simulator contract tests (the fixtures are in ``simulator_fixtures``)."""

from __future__ import annotations

import time
import uuid

from orchestrator.providers.base import ProviderPayment
from orchestrator.providers.stripe_adapter import StripeProvider

# The patient client's read timeout: longer than any latency fault these tests inject.
READ_TIMEOUT_SECONDS = 3.0
# The impatient client's read timeout, and how long the simulator stalls: the stall must
# outlast the timeout or "timeout after effect" would just be a slow success.
SHORT_READ_TIMEOUT_SECONDS = 0.3
STALL_SECONDS = 1.5
# Search lags this much in the shared simulator, i.e. never catches up during a test.
SEARCH_LAG_SECONDS = 60.0


def record_id() -> str:
    return f"rec-{uuid.uuid4().hex[:12]}"


def make_provider(url: str, *, read_timeout: float = READ_TIMEOUT_SECONDS) -> StripeProvider:
    return StripeProvider(
        api_key="sk_test_contract", api_base=url, connect_timeout=1.0, read_timeout=read_timeout
    )


def create_payment(
    provider: StripeProvider,
    record: str,
    *,
    amount: int = 1000,
    payment_method: str = "pm_card_visa",
) -> ProviderPayment:
    return provider.create_payment(
        record_id=record,
        amount=amount,
        currency="usd",
        payment_method=payment_method,
        description=None,
        metadata={},
    )


def find_listed(provider: StripeProvider, record: str) -> ProviderPayment | None:
    """The intent naming ``record`` on the first page of the last five minutes' list."""
    now = int(time.time())
    page = provider.list_payments(
        created_gte=now - 300, created_lte=now + 60, starting_after=None, limit=100
    )
    found = page.provider_payments
    return next((i for i in found if i.metadata.get("payorch_record_id") == record), None)
