"""Accepting the customer's authentication result (``POST /v1/payments/{id}/details``).

A provider that completes 3-D Secure through us (Adyen: ``/payments/details``) needs the
result the shopper's browser produced.  The merchant's back end sends it here; this service
commits it and wakes the payment; the charge's worker forwards it
(``engine.kinds.charge.action_result``).  Nothing here calls the provider.

Read top to bottom:

1. read the client's payment (another client's is missing: 404); whether its provider takes
   a forwarded result is the adapter's word (``base.accepts_action_result`` on the provider
   of the payment's account), never a provider name here (409
   ``action-result-not-accepted``);
2. one short transaction, the payment row locked (``FOR NO KEY UPDATE``; the API's other writers of
   it queue here too):
   * the same body as the last one stored: a client's retry, answered with the payment as
     it is now (no new forward, so never a second key for one result);
   * not ``requires_action``: 409 naming its status;
   * another body while the last one still waits for the provider: 409
     ``action-result-in-progress`` (its answer decides what the payment needs next);
   * else stored pending under forward n+1 (``PaymentRepository.store_action_result``),
     the payment made due now;
3. after the commit, publish the payment's task (a lost publish costs latency: the sweeper
   re-queues a due payment).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.model import PaymentRecord
from orchestrator.engine.publisher import PublishFailed, TaskPublisher
from orchestrator.logging import get_logger
from orchestrator.providers.base import PaymentProvider, accepts_action_result
from orchestrator.services.refunds import PaymentNotFound

log = get_logger(__name__)

__all__ = [
    "AcceptedActionResult",
    "ActionResultInProgress",
    "ActionResultNotAccepted",
    "PaymentNotAwaitingAction",
    "PaymentNotFound",
    "accept_action_result",
]


class ActionResultNotAccepted(Exception):
    """The payment's provider takes no forwarded result (the customer finishes with it)."""

    def __init__(self, payment: PaymentRecord, provider: str) -> None:
        super().__init__(f"provider {provider} takes no forwarded result")
        self.payment = payment
        self.provider = provider


class PaymentNotAwaitingAction(Exception):
    """The payment is not ``requires_action`` (409)."""

    def __init__(self, payment: PaymentRecord, shown_status: str) -> None:
        super().__init__(f"payment {payment.id} is {shown_status}")
        self.payment = payment
        self.shown_status = shown_status


class ActionResultInProgress(Exception):
    """Another result of the payment still waits for the provider's answer (409)."""


@dataclass(frozen=True)
class AcceptedActionResult:
    payment: PaymentRecord
    # A retry of the result already stored: nothing new was stored or sent.
    replayed: bool


def accept_action_result(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    *,
    client_id: str,
    payment_id: str,
    body: dict[str, Any],
    provider_for: Callable[[str | None], PaymentProvider],
) -> AcceptedActionResult:
    """Raises PaymentNotFound, ActionResultNotAccepted, PaymentNotAwaitingAction or
    ActionResultInProgress (nothing stored)."""
    # 1. the payment and its provider's capability (a read: building the provider may
    #    read its connector account, outside the transaction below)
    with uow() as unit:
        found = unit.payments.get_for_client(client_id, payment_id)
    if found is None:
        raise PaymentNotFound(payment_id)
    provider = provider_for(found.connector_account_id)
    if not accepts_action_result(provider):
        raise ActionResultNotAccepted(found, provider.name)
    # 2. the one transaction
    with uow() as unit:
        now = unit.now()
        payment = unit.money.lock_payment(client_id, payment_id)
        if payment is None:
            raise PaymentNotFound(payment_id)
        if payment.action_result_attempts > 0 and payment.action_result == body:
            # A retry, whatever happened since (the payment may have settled on it).
            return AcceptedActionResult(payment, replayed=True)
        if not payment.requires_action:
            raise PaymentNotAwaitingAction(payment, shown_status(payment))
        if payment.action_result_pending:
            raise ActionResultInProgress(f"payment {payment_id} has a result being forwarded")
        stored = unit.payments.store_action_result(payment_id, body, now=now)
        assert stored is not None, "the row lock and the status check make this unreachable"
        unit.commit()
    # 3. wake the payment's work
    if stored.lease_owner is None:
        try:
            publisher.publish_process_payment(stored.id, stored.lease_token)
        except PublishFailed as error:
            metrics.PUBLISH_FAILURES.inc()
            log.warning("task_publish_failed", payment_id=stored.id, error=str(error))
    log.info("action_result_accepted", payment_id=stored.id, attempt=stored.action_result_attempts)
    return AcceptedActionResult(stored, replayed=False)


def shown_status(payment: PaymentRecord) -> str:
    return "requires_action" if payment.requires_action else payment.status.value
