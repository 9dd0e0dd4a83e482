"""A provider wrapper that counts calls by operation and outcome and times them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator import metrics
from orchestrator.providers.base import (
    Declined,
    IntentPage,
    OutcomeUnknown,
    PaymentProvider,
    Permanent,
    ProviderIntent,
    Retryable,
)

T = TypeVar("T")


def outcome_label(error: BaseException) -> str:
    if isinstance(error, Declined):
        return "declined"
    if isinstance(error, Permanent):
        return "permanent"
    if isinstance(error, Retryable):
        return "retryable"
    if isinstance(error, OutcomeUnknown):
        return "unknown"
    return "error"


class InstrumentedProvider:
    def __init__(self, inner: PaymentProvider) -> None:
        self._inner = inner
        self.name = inner.name

    def _observe(self, operation: str, call: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            result = call()
        except BaseException as error:
            metrics.PROVIDER_CALLS.labels(operation, outcome_label(error)).inc()
            raise
        finally:
            metrics.PROVIDER_LATENCY.labels(operation).observe(time.perf_counter() - started)
        metrics.PROVIDER_CALLS.labels(operation, "ok").inc()
        return result

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
        return self._observe(
            "create",
            lambda: self._inner.create_intent(
                record_id=record_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                description=description,
                metadata=metadata,
            ),
        )

    def confirm_intent(self, intent_id: str, *, record_id: str, attempt: int) -> ProviderIntent:
        return self._observe(
            "confirm",
            lambda: self._inner.confirm_intent(intent_id, record_id=record_id, attempt=attempt),
        )

    def retrieve_intent(self, intent_id: str) -> ProviderIntent:
        return self._observe("retrieve", lambda: self._inner.retrieve_intent(intent_id))

    def list_intents(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> IntentPage:
        return self._observe(
            "lookup",
            lambda: self._inner.list_intents(
                created_gte=created_gte,
                created_lte=created_lte,
                starting_after=starting_after,
                limit=limit,
            ),
        )
