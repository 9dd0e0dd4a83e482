"""The one wrapper around the provider: every call is measured and, when a sink is given,
recorded, once.

Measured (``orchestrator.metrics``): calls by operation and outcome, their latency, and the
slow calls in progress (``calls_in_progress``, read by the worker's prefetch limit).

Recorded: a ``ProviderCallRecord`` per call for the operator's payment page: the request it
stands for (method, path), the idempotency key we sent, the outcome, the provider's status
or error, and the latency.

Hazards it must not create:

* the row is written *after* the call returned, by a sink that opens its own short unit of
  work or, inside an engine run, hands it to the run's next fenced write
  (``engine.call_log``): no transaction is ever open across the network call;
* recording is evidence, not protocol: a failed write (database blip) is logged and
  swallowed, so it can never change what the worker does with the provider's answer;
* the provider's exception propagates unchanged (the worker's query-first logic depends
  on its type).

Guarded (``gate``, decision 0082): with a ``CallGate`` (the connector account's circuit,
``engine.circuits``), a call is first admitted by the circuit (``CircuitOpen`` when it is
open: no call is made, nothing is measured or recorded), and how it ended is reported to
it.  Only a provider's answer or failure is reported: an interruption or a bug in the
middle of a call says nothing about the provider.

Traced (``orchestrator.tracing.provider_call``): while traces are on, each call admitted is a
span named by its operation, with the provider's name and our payment's id; never a key.

Each protocol method is written here once: it names its call (``Call``) and forwards its
arguments; ``_observe`` does the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from orchestrator import metrics, tracing
from orchestrator.domain.history import ProviderCallRecord
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    ActionResult,
    Declined,
    OutcomeUnknown,
    PaymentOrder,
    PaymentProvider,
    PendingCall,
    Permanent,
    ProviderError,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
    Retryable,
    accepts_action_result,
    optional,
)
from orchestrator.providers.calls_in_progress import PROVIDER_CALLS_IN_PROGRESS
from orchestrator.providers.circuit import CallGate, counts_against_circuit
from orchestrator.providers.keys import (
    cancel_key,
    capture_key,
    confirm_key,
    create_key,
    details_key,
    refund_key,
)

T = TypeVar("T")
CallSink = Callable[[ProviderCallRecord], None]

log = get_logger(__name__)

# The request each call stands for, as the operator's page shows it: ``{id}`` is the object
# the call names.  An adapter whose requests differ declares its own ``request_paths``
# (Adyen's); these are Stripe's, which the test doubles with Stripe's semantics share.
DEFAULT_REQUEST_PATHS: dict[str, tuple[str, str]] = {
    "create": ("POST", "/v1/payment_intents"),
    "confirm": ("POST", "/v1/payment_intents/{id}/confirm"),
    "retrieve": ("GET", "/v1/payment_intents/{id}"),
    "details": ("-", "(not taken: the customer authenticates at the provider)"),
    "lookup": ("GET", "/v1/payment_intents"),
    "capture": ("POST", "/v1/payment_intents/{id}/capture"),
    "cancel": ("POST", "/v1/payment_intents/{id}/cancel"),
    "refund": ("POST", "/v1/refunds"),
    "retrieve_refund": ("GET", "/v1/refunds/{id}"),
    "list_refunds": ("GET", "/v1/refunds?payment_intent={id}"),
}


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


@dataclass(frozen=True)
class Call:
    """What one call is, for the metrics (``operation``) and the row (the rest)."""

    operation: str
    method: str
    path: str
    # Our payment, when the call names it; otherwise the repository maps the provider
    # payment (``object_id``) to its payment.
    payment_id: str | None = None
    key: str | None = None
    object_id: str | None = None
    # A page of the lookup after a lost create names no payment (the lookup filters by
    # metadata afterwards), and a busy account's scan reads many of them: measured, not
    # recorded.  The payment itself shows the scan's progress (lookup_pages, lookup_cursor).
    recorded: bool = True


class ObservedProvider:
    """``PaymentProvider`` around another: the same calls, measured and recorded."""

    def __init__(
        self, inner: PaymentProvider, sink: CallSink | None = None, gate: CallGate | None = None
    ) -> None:
        self.inner = inner
        self._sink = sink
        self._gate = gate
        self.name = inner.name
        # The capability, as the wrapped provider declares it (``base.accepts_action_result``).
        self.accepts_action_result = accepts_action_result(inner)
        self._paths = {**DEFAULT_REQUEST_PATHS, **getattr(inner, "request_paths", {})}

    def gated(self, gate: CallGate) -> ObservedProvider:
        """The same provider and sink behind a connector account's circuit."""
        return ObservedProvider(self.inner, self._sink, gate)

    def _request(self, operation: str, object_id: str = "") -> tuple[str, str]:
        method, path = self._paths[operation]
        return method, path.replace("{id}", object_id)

    def _observe(self, call: Call, send: Callable[[], T]) -> T:
        gate = self._gate
        probe = gate.admit() if gate is not None else False
        started = time.perf_counter()
        in_progress = PROVIDER_CALLS_IN_PROGRESS.started()
        try:
            with tracing.provider_call(call.operation, self.name, call.payment_id):
                result = send()
        except BaseException as error:
            PROVIDER_CALLS_IN_PROGRESS.ended(in_progress)
            if gate is not None and isinstance(error, ProviderError):
                gate.settle(failed=counts_against_circuit(error), probe=probe)
            outcome = outcome_label(error)
            metrics.PROVIDER_CALLS.labels(call.operation, outcome).inc()
            metrics.PROVIDER_LATENCY.labels(call.operation).observe(time.perf_counter() - started)
            self._record(
                call,
                started,
                object_id=call.object_id,
                outcome=outcome,
                http_status=error.http_status if isinstance(error, ProviderError) else None,
                provider_status=None,
                error=_describe(error),
            )
            raise
        PROVIDER_CALLS_IN_PROGRESS.ended(in_progress)
        if gate is not None:
            gate.settle(failed=False, probe=probe)
        metrics.PROVIDER_LATENCY.labels(call.operation).observe(time.perf_counter() - started)
        metrics.PROVIDER_CALLS.labels(call.operation, "ok").inc()
        self._record(
            call,
            started,
            object_id=_object_id(result, call.object_id),
            outcome="ok",
            http_status=200,
            provider_status=_status(result),
            error=None,
        )
        return result

    def _record(
        self,
        call: Call,
        started: float,
        *,
        object_id: str | None,
        outcome: str,
        http_status: int | None,
        provider_status: str | None,
        error: str | None,
    ) -> None:
        if self._sink is None or not call.recorded:
            return
        record = ProviderCallRecord(
            operation=call.operation,
            method=call.method,
            path=call.path,
            payment_id=call.payment_id,
            idempotency_key=call.key,
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
                operation=call.operation,
                payment_id=call.payment_id,
                error=type(failure).__name__,
            )

    # -- the protocol ------------------------------------------------------------------

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
        route_attempt: int = 1,
    ) -> ProviderPayment:
        return self._observe(
            Call(
                "create",
                *self._request("create"),
                payment_id=record_id,
                key=create_key(record_id, route_attempt),
            ),
            lambda: self.inner.create_payment(
                record_id=record_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                description=description,
                metadata=metadata,
                **optional(
                    capture_method=(capture_method, "automatic"),
                    customer=(customer, None),
                    route_attempt=(route_attempt, 1),
                ),
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
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        return self._observe(
            Call(
                "confirm",
                *self._request("confirm", provider_payment_id),
                payment_id=record_id,
                key=confirm_key(record_id, attempt, order.route_attempt if order else 1),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.confirm_payment(
                provider_payment_id,
                record_id=record_id,
                attempt=attempt,
                **optional(
                    off_session=(off_session, None),
                    return_url=(return_url, None),
                    order=(order, None),
                ),
            ),
        )

    def retrieve_payment(
        self,
        provider_payment_id: str,
        *,
        order: PaymentOrder | None = None,
        confirm_attempt: int = 0,
        unknown_outcomes: int = 0,
        pending: PendingCall | None = None,
        action_result: ActionResult | None = None,
    ) -> ProviderPayment:
        return self._observe(
            Call(
                "retrieve",
                *self._request("retrieve", provider_payment_id),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.retrieve_payment(
                provider_payment_id,
                **optional(
                    order=(order, None),
                    confirm_attempt=(confirm_attempt, 0),
                    unknown_outcomes=(unknown_outcomes, 0),
                    pending=(pending, None),
                    action_result=(action_result, None),
                ),
            ),
        )

    def submit_action_result(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        action_result: ActionResult,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        return self._observe(
            Call(
                "details",
                *self._request("details", provider_payment_id),
                payment_id=record_id,
                key=details_key(
                    record_id, action_result.attempt, order.route_attempt if order else 1
                ),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.submit_action_result(
                provider_payment_id,
                record_id=record_id,
                action_result=action_result,
                **optional(order=(order, None)),
            ),
        )

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        return self._observe(
            Call("lookup", *self._request("lookup"), recorded=False),
            lambda: self.inner.list_payments(
                created_gte=created_gte,
                created_lte=created_lte,
                starting_after=starting_after,
                limit=limit,
            ),
        )

    # Captures, cancels and refunds name the provider payment, not ours: like a retrieve,
    # the repository maps it to its payment (``provider_payment_id``).  A refund's row
    # carries the provider payment too, so the payment page lists it; its own id is in the
    # path.

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        return self._observe(
            Call(
                "capture",
                *self._request("capture", provider_payment_id),
                key=capture_key(operation_id, attempt),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.capture_payment(
                provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                amount_to_capture=amount_to_capture,
            ),
        )

    def cancel_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        reason: str | None,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        return self._observe(
            Call(
                "cancel",
                *self._request("cancel", provider_payment_id),
                key=cancel_key(operation_id, attempt),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.cancel_payment(
                provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                reason=reason,
                **optional(order=(order, None)),
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
            Call(
                "refund",
                *self._request("refund", provider_payment_id),
                key=refund_key(operation_id, attempt),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.create_refund(
                provider_payment_id=provider_payment_id,
                operation_id=operation_id,
                attempt=attempt,
                amount=amount,
                reason=reason,
                metadata=metadata,
            ),
        )

    def retrieve_refund(
        self, refund_id: str, *, pending: PendingCall | None = None
    ) -> ProviderRefund:
        return self._observe(
            Call("retrieve_refund", *self._request("retrieve_refund", refund_id)),
            lambda: self.inner.retrieve_refund(refund_id, **optional(pending=(pending, None))),
        )

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        return self._observe(
            Call(
                "list_refunds",
                *self._request("list_refunds", provider_payment_id),
                object_id=provider_payment_id,
            ),
            lambda: self.inner.list_refunds(
                provider_payment_id, starting_after=starting_after, limit=limit
            ),
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
