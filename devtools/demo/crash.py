"""A worker that dies right after the provider charged, once.

The dangerous moment of the protocol: money moved, nothing recorded.  In the demo the
worker's run is abandoned at exactly that point (an exception nobody in the protocol
catches), which leaves the database as a SIGKILL would: the lease held by a dead run,
recovery point ``intent_created``.  The sweeper must take the lease over once it expires,
and the next worker must find the charge by querying, not charge again.
"""

from __future__ import annotations

import threading

from orchestrator.providers.base import (
    ActionResult,
    PaymentOrder,
    PaymentProvider,
    PendingCall,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
    accepts_action_result,
    optional,
)


class SimulatedWorkerCrash(Exception):
    """The worker 'died' here (raised out of the protocol on purpose)."""


class CrashAfterChargeOnce:
    def __init__(self, inner: PaymentProvider, *, after_confirms: int = 10) -> None:
        self._inner = inner
        self.name = inner.name
        self.accepts_action_result = accepts_action_result(inner)
        self._lock = threading.Lock()
        self._confirms_left = after_confirms
        self.crashed_record: str | None = None

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
        return self._inner.create_payment(
            record_id=record_id,
            amount=amount,
            currency=currency,
            payment_method=payment_method,
            description=description,
            metadata=metadata,
            capture_method=capture_method,
            customer=customer,
            route_attempt=route_attempt,
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
        intent = self._inner.confirm_payment(
            provider_payment_id,
            record_id=record_id,
            attempt=attempt,
            off_session=off_session,
            return_url=return_url,
            order=order,
        )
        if intent.status == "succeeded" and self._should_crash(record_id):
            raise SimulatedWorkerCrash(f"worker crashed after charging {provider_payment_id}")
        return intent

    def _should_crash(self, record_id: str) -> bool:
        with self._lock:
            if self.crashed_record is not None:
                return False
            self._confirms_left -= 1
            if self._confirms_left > 0:
                return False
            self.crashed_record = record_id
            return True

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
        return self._inner.retrieve_payment(
            provider_payment_id,
            order=order,
            confirm_attempt=confirm_attempt,
            unknown_outcomes=unknown_outcomes,
            pending=pending,
            **optional(action_result=(action_result, None)),
        )

    def submit_action_result(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        action_result: ActionResult,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        return self._inner.submit_action_result(
            provider_payment_id, record_id=record_id, action_result=action_result, order=order
        )

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        return self._inner.list_payments(
            created_gte=created_gte,
            created_lte=created_lte,
            starting_after=starting_after,
            limit=limit,
        )

    # Captures, cancels and refunds pass through unchanged (the crash is a charge's).

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        return self._inner.capture_payment(
            provider_payment_id,
            operation_id=operation_id,
            attempt=attempt,
            amount_to_capture=amount_to_capture,
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
        return self._inner.cancel_payment(
            provider_payment_id,
            operation_id=operation_id,
            attempt=attempt,
            reason=reason,
            **optional(order=(order, None)),
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
        return self._inner.create_refund(
            provider_payment_id=provider_payment_id,
            operation_id=operation_id,
            attempt=attempt,
            amount=amount,
            reason=reason,
            metadata=metadata,
        )

    def retrieve_refund(
        self, refund_id: str, *, pending: PendingCall | None = None
    ) -> ProviderRefund:
        return self._inner.retrieve_refund(refund_id, pending=pending)

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        return self._inner.list_refunds(
            provider_payment_id, starting_after=starting_after, limit=limit
        )
