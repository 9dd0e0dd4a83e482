"""A provider wrapper that records every call for the operator's payment page: the
request it stands for (method, path), the idempotency key we sent, the outcome, the
provider's status or error, and the latency.

Hazards it must not create:

* the row is written *after* the call returned, by a sink that opens its own short unit of
  work: no transaction is ever open across the network call;
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
    IntentPage,
    PaymentProvider,
    ProviderError,
    ProviderIntent,
)
from orchestrator.providers.instrumented import outcome_label
from orchestrator.providers.keys import confirm_key, create_key

T = TypeVar("T")
CallSink = Callable[[ProviderCallRecord], None]

log = get_logger(__name__)

_INTENTS = "/v1/payment_intents"


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
        intent = result if isinstance(result, ProviderIntent) else None
        self._record(
            operation,
            method,
            path,
            started,
            payment_id=payment_id,
            key=key,
            object_id=intent.id if intent is not None else object_id,
            outcome="ok",
            http_status=200,
            provider_status=intent.status if intent is not None else "not_found",
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
        return self._call(
            "create",
            "POST",
            _INTENTS,
            lambda: self._inner.create_intent(
                record_id=record_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                description=description,
                metadata=metadata,
            ),
            payment_id=record_id,
            key=create_key(record_id),
            object_id=None,
        )

    def confirm_intent(self, intent_id: str, *, record_id: str, attempt: int) -> ProviderIntent:
        return self._call(
            "confirm",
            "POST",
            f"{_INTENTS}/{intent_id}/confirm",
            lambda: self._inner.confirm_intent(intent_id, record_id=record_id, attempt=attempt),
            payment_id=record_id,
            key=confirm_key(record_id, attempt),
            object_id=intent_id,
        )

    def retrieve_intent(self, intent_id: str) -> ProviderIntent:
        return self._call(
            "retrieve",
            "GET",
            f"{_INTENTS}/{intent_id}",
            lambda: self._inner.retrieve_intent(intent_id),
            payment_id=None,
            key=None,
            object_id=intent_id,
        )

    def list_intents(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> IntentPage:
        # Not recorded: a page of the lookup after a lost create names no payment (the
        # lookup filters by metadata afterwards), and a busy account's scan reads many of
        # them.  The payment itself shows the scan's progress (lookup_pages, lookup_cursor).
        return self._inner.list_intents(
            created_gte=created_gte,
            created_lte=created_lte,
            starting_after=starting_after,
            limit=limit,
        )


def _describe(error: BaseException) -> str:
    message = error.message if isinstance(error, ProviderError) else str(error)
    code = getattr(error, "code", None)
    text = f"{type(error).__name__}: {message}"
    return f"{text} ({code})" if code else text
