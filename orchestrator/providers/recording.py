"""A provider wrapper that records every call for the operator's payment page: the
request it stands for (method, path), the idempotency key we sent, the outcome, the
provider's status or error, and the latency.

Hazards it must not create:

* the row is written *after* the call returned, by a sink that opens its own short unit of
  work or, inside an engine run, hands it to the run's next fenced write
  (``engine.call_log``): no transaction is ever open across the network call;
* recording is evidence, not protocol: a failed write (database blip) is logged and
  swallowed, so it can never change what the worker does with the provider's answer;
* the provider's exception propagates unchanged (the worker's query-first logic depends
  on its type).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator.domain.history import ProviderCallRecord
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    PaymentProvider,
    ProviderError,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
    optional,
)
from orchestrator.providers.instrumented import outcome_label
from orchestrator.providers.keys import (
    cancel_key,
    capture_key,
    confirm_key,
    create_key,
    refund_key,
)

T = TypeVar("T")
CallSink = Callable[[ProviderCallRecord], None]

log = get_logger(__name__)

_INTENTS = "/v1/payment_intents"
_REFUNDS = "/v1/refunds"


class RecordingProvider:
    def __init__(self, inner: PaymentProvider, sink: CallSink) -> None:
        self._inner = inner
        self._sink = sink
        self.name = inner.name

    def _call(
        self,
        operation: str,
        method: str,
        path: str,
        call: Callable[[], T],
        *,
        payment_id: str | None,
        key: str | None,
        object_id: str | None,
    ) -> T:
        started = time.perf_counter()
        try:
            result = call()
        except BaseException as error:
            self._record(
                operation,
                method,
                path,
                started,
                payment_id=payment_id,
                key=key,
                object_id=object_id,
                outcome=outcome_label(error),
                http_status=error.http_status if isinstance(error, ProviderError) else None,
                provider_status=None,
                error=_describe(error),
            )
            raise
        self._record(
            operation,
            method,
            path,
            started,
            payment_id=payment_id,
            key=key,
            object_id=_object_id(result, object_id),
            outcome="ok",
            http_status=200,
            provider_status=_status(result),
            error=None,
        )
        return result

    def _record(
        self,
        operation: str,
        method: str,
        path: str,
        started: float,
        *,
        payment_id: str | None,
        key: str | None,
        object_id: str | None,
        outcome: str,
        http_status: int | None,
        provider_status: str | None,
        error: str | None,
    ) -> None:
        record = ProviderCallRecord(
            operation=operation,
            method=method,
            path=path,
            payment_id=payment_id,
            idempotency_key=key,
            outcome=outcome,
            http_status=http_status,
            provider_object_id=object_id,
            provider_status=provider_status,
            error=error,
            latency_ms=round((time.perf_counter() - started) * 1000),
        )
        try:
            self._sink(record)
        except Exception as failure:  # evidence only: never change the worker's course
            log.warning(
                "provider_call_not_recorded",
                operation=operation,
                payment_id=payment_id,
                error=type(failure).__name__,
            )

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
        return self._call(
            "create",
            "POST",
            _INTENTS,
            lambda: self._inner.create_payment(
                record_id=record_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                description=description,
                metadata=metadata,
                **optional(capture_method=(capture_method, "automatic"), customer=(customer, None)),
            ),
            payment_id=record_id,
            key=create_key(record_id),
            object_id=None,
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
        return self._call(
            "confirm",
            "POST",
            f"{_INTENTS}/{provider_payment_id}/confirm",
            lambda: self._inner.confirm_payment(
                provider_payment_id,
                record_id=record_id,
                attempt=attempt,
                **optional(off_session=(off_session, None), return_url=(return_url, None)),
            ),
            payment_id=record_id,
            key=confirm_key(record_id, attempt),
            object_id=provider_payment_id,
        )

    def retrieve_payment(self, provider_payment_id: str) -> ProviderPayment:
        return self._call(
            "retrieve",
            "GET",
            f"{_INTENTS}/{provider_payment_id}",
            lambda: self._inner.retrieve_payment(provider_payment_id),
            payment_id=None,
            key=None,
            object_id=provider_payment_id,
        )

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        # Not recorded: a page of the lookup after a lost create names no payment (the
        # lookup filters by metadata afterwards), and a busy account's scan reads many of
        # them.  The payment itself shows the scan's progress (lookup_pages, lookup_cursor).
        return self._inner.list_payments(
            created_gte=created_gte,
            created_lte=created_lte,
            starting_after=starting_after,
            limit=limit,
        )

    # Captures, cancels and refunds name the provider payment, not the payment: like a retrieve, the
    # repository maps the provider payment to its payment (``provider_payment_id``).  A refund's row
    # carries the provider payment too, so the payment page lists it; its own id is in the path.

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        return self._call(
            "capture",
            "POST",
            f"{_INTENTS}/{provider_payment_id}/capture",
            lambda: self._inner.capture_payment(
                provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                amount_to_capture=amount_to_capture,
            ),
            payment_id=None,
            key=capture_key(operation_id, attempt),
            object_id=provider_payment_id,
        )

    def cancel_payment(
        self, provider_payment_id: str, *, operation_id: str, attempt: int, reason: str | None
    ) -> ProviderPayment:
        return self._call(
            "cancel",
            "POST",
            f"{_INTENTS}/{provider_payment_id}/cancel",
            lambda: self._inner.cancel_payment(
                provider_payment_id, operation_id=operation_id, attempt=attempt, reason=reason
            ),
            payment_id=None,
            key=cancel_key(operation_id, attempt),
            object_id=provider_payment_id,
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
        return self._call(
            "refund",
            "POST",
            _REFUNDS,
            lambda: self._inner.create_refund(
                provider_payment_id=provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                amount=amount,
                reason=reason,
                metadata=metadata,
            ),
            payment_id=None,
            key=refund_key(operation_id, attempt),
            object_id=provider_payment_id,
        )

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        return self._call(
            "retrieve_refund",
            "GET",
            f"{_REFUNDS}/{refund_id}",
            lambda: self._inner.retrieve_refund(refund_id),
            payment_id=None,
            key=None,
            object_id=None,
        )

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        return self._call(
            "list_refunds",
            "GET",
            f"{_REFUNDS}?payment_intent={provider_payment_id}",
            lambda: self._inner.list_refunds(
                provider_payment_id, starting_after=starting_after, limit=limit
            ),
            payment_id=None,
            key=None,
            object_id=provider_payment_id,
        )


def _object_id(result: object, requested: str | None) -> str | None:
    """The provider payment a successful call is about (what maps the row to its payment)."""
    if isinstance(result, ProviderPayment):
        return result.id
    if isinstance(result, ProviderRefund):
        return result.provider_payment_id or requested
    return requested


def _status(result: object) -> str:
    if isinstance(result, ProviderPayment | ProviderRefund):
        return result.status
    if isinstance(result, RefundPage):
        return f"{len(result.refunds)} refunds" + (", more" if result.has_more else "")
    return "not_found"


def _describe(error: BaseException) -> str:
    message = error.message if isinstance(error, ProviderError) else str(error)
    code = getattr(error, "code", None)
    text = f"{type(error).__name__}: {message}"
    return f"{text} ({code})" if code else text
