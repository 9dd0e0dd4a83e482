"""A provider wrapper that counts calls by operation and outcome and times them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator import metrics
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    PaymentProvider,
    Permanent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
    Retryable,
    optional,
)
from orchestrator.providers.calls_in_progress import PROVIDER_CALLS_IN_PROGRESS

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
        in_progress = PROVIDER_CALLS_IN_PROGRESS.started()
        try:
            result = call()
        except BaseException as error:
            metrics.PROVIDER_CALLS.labels(operation, outcome_label(error)).inc()
            raise
        finally:
            PROVIDER_CALLS_IN_PROGRESS.ended(in_progress)
            metrics.PROVIDER_LATENCY.labels(operation).observe(time.perf_counter() - started)
        metrics.PROVIDER_CALLS.labels(operation, "ok").inc()
        return result

    def create_payment(
        self,
        *,
        record_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        description: str | None,
        metadata: dict[str, str],
        capture_method: str = "automatic",
        customer: str | None = None,
    ) -> ProviderPayment:
        return self._observe(
            "create",
            lambda: self._inner.create_payment(
                record_id=record_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                description=description,
                metadata=metadata,
                **optional(capture_method=(capture_method, "automatic"), customer=(customer, None)),
            ),
        )

    def confirm_payment(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        attempt: int,
        off_session: bool | None = None,
        return_url: str | None = None,
    ) -> ProviderPayment:
        return self._observe(
            "confirm",
            lambda: self._inner.confirm_payment(
                provider_payment_id,
                record_id=record_id,
                attempt=attempt,
                **optional(off_session=(off_session, None), return_url=(return_url, None)),
            ),
        )

    def retrieve_payment(self, provider_payment_id: str) -> ProviderPayment:
        return self._observe("retrieve", lambda: self._inner.retrieve_payment(provider_payment_id))

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        return self._observe(
            "lookup",
            lambda: self._inner.list_payments(
                created_gte=created_gte,
                created_lte=created_lte,
                starting_after=starting_after,
                limit=limit,
            ),
        )

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        return self._observe(
            "capture",
            lambda: self._inner.capture_payment(
                provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                amount_to_capture=amount_to_capture,
            ),
        )

    def cancel_payment(
        self, provider_payment_id: str, *, operation_id: str, attempt: int, reason: str | None
    ) -> ProviderPayment:
        return self._observe(
            "cancel",
            lambda: self._inner.cancel_payment(
                provider_payment_id, operation_id=operation_id, attempt=attempt, reason=reason
            ),
        )

    def create_refund(
        self,
        *,
        provider_payment_id: str,
        operation_id: str,
        attempt: int,
        amount: int,
        reason: str | None,
        metadata: dict[str, str],
    ) -> ProviderRefund:
        return self._observe(
            "refund",
            lambda: self._inner.create_refund(
                provider_payment_id=provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                amount=amount,
                reason=reason,
                metadata=metadata,
            ),
        )

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        return self._observe("retrieve_refund", lambda: self._inner.retrieve_refund(refund_id))

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        return self._observe(
            "list_refunds",
            lambda: self._inner.list_refunds(
                provider_payment_id, starting_after=starting_after, limit=limit
            ),
        )
