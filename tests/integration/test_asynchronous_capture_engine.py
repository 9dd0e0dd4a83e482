"""A capture whose outcome arrives later (Adyen's ``received``, then a notification), on the
engine: a real database, a fake provider whose captures take effect only when "notified",
no broker.

The hazard (docs/decisions/0072-asynchronous-modifications.md): after a capture whose answer
was lost, the engine reads the payment; a read that said ``requires_capture`` while our
capture is still in flight would make the engine send capture n+1, a second capture.  So
every read after a call names it (``PendingCall``), and a provider that knows the call may be
in flight answers ``processing``: the engine waits, and sends nothing again."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.providers.base import (
    OutcomeUnknown,
    PendingCall,
    ProviderPayment,
    RefusedCall,
)
from orchestrator.services.captures import accept_capture
from tests.fakes.provider import FakeProvider
from tests.harness.captures import authorized_payment, capture_fingerprint
from tests.harness.containers import build_container
from tests.harness.refunds import reload_operation
from tests.harness.seeds import new_merchant, reload


@dataclass
class AsynchronousCaptures(FakeProvider):
    """Captures as Adyen makes them: accepted (``processing``), in effect only once
    ``notify`` delivers them (or refuses them); a read that names a call still in flight
    answers ``processing``.  ``lose_answers``: how many capture answers are lost."""

    lose_answers: int = 0
    in_flight: list[tuple[str, str, int, int | None]] = field(default_factory=list)
    # The key of every capture the engine sent ("{operation}-{attempt}").
    sent: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    # Called after a capture is accepted, before it answers (the worker holds the lease).
    on_capture: Callable[[], None] | None = None

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        self.in_flight.append((provider_payment_id, operation_id, attempt, amount_to_capture))
        self.sent.append(f"{operation_id}-{attempt}")
        if self.on_capture is not None:
            self.on_capture()
        if self.lose_answers > 0:
            self.lose_answers -= 1
            raise OutcomeUnknown("read timed out (fake)")
        view = self._view(self.provider_payments[provider_payment_id])
        return replace(view, status="processing")

    def retrieve_payment(
        self,
        provider_payment_id: str,
        *,
        order: object = None,
        confirm_attempt: int = 0,
        pending: object = None,
    ) -> ProviderPayment:
        view = super().retrieve_payment(provider_payment_id, pending=pending)
        if isinstance(pending, PendingCall):
            if pending.operation_id in self.refused:
                refused = RefusedCall(pending.operation_id, "capture_failed", "scheme said no")
                return replace(view, refused_call=refused)
            if any(call[1] == pending.operation_id for call in self.in_flight):
                return replace(view, status="processing")
        return view

    def notify(self, *, refuse: bool = False) -> None:
        """The provider finishes every capture in flight (each once, whatever its key)."""
        done: set[str] = set()
        for psp, operation_id, attempt, amount in self.in_flight:
            if operation_id in done:
                continue
            done.add(operation_id)
            if refuse:
                self.refused[operation_id] = "scheme said no"
            else:
                FakeProvider.capture_payment(
                    self,
                    psp,
                    operation_id=operation_id,
                    attempt=attempt,
                    amount_to_capture=amount,
                )
        self.in_flight.clear()


@pytest.fixture
def provider() -> AsynchronousCaptures:
    return AsynchronousCaptures()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider, max_attempts=5, retry_base_seconds=0.1)
    yield built
    built.close()


def run(container: Container, operation_id: str) -> ProcessResult:
    token = reload_operation(container, operation_id).lease_token
    return process_operation(
        container.runner(),
        operation_id,
        token,
        owner="test-worker",
        sleep=lambda _s: None,
        rng=random.Random(3),
    )


def wake(container: Container, payment_id: str) -> None:
    """What storing a provider event about the payment does (``store_event``)."""
    with container.uow() as uow:
        uow.provider_events.make_deferred_payment_due(payment_id, now=uow.now())
        uow.commit()


def capture_keys(provider: AsynchronousCaptures) -> list[str]:
    return provider.sent


def start_capture(container: Container, amount: int) -> tuple[str, str]:
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=1000)
    accepted = accept_capture(
        container.uow,
        container.publisher,
        container.settings,
        merchant,
        payment.id,
        "cap-1",
        amount,
        capture_fingerprint(payment.id, amount),
    )
    return payment.id, accepted.record.id


def test_a_capture_whose_answer_was_lost_waits_for_its_outcome_and_never_sends_again(
    container: Container, provider: AsynchronousCaptures
) -> None:
    payment_id, operation_id = start_capture(container, 600)
    provider.lose_answers = 1

    first = run(container, operation_id)

    # The read after the lost answer named capture 1, and the engine waited on it.
    assert first is ProcessResult.WAITING
    assert capture_keys(provider) == [f"{operation_id}-1"]
    named = [p for p in provider.pending_calls if p is not None]
    assert named == [
        PendingCall(
            step="capture",
            operation_id=operation_id,
            attempt=1,
            amount=600,
            provider_payment_id=reload(container, payment_id).provider_payment_id or "",
        )
    ]
    assert reload(container, payment_id).status is PaymentStatus.REQUIRES_CAPTURE

    provider.notify()
    wake(container, payment_id)  # the notification makes the waiting capture due
    second = run(container, operation_id)

    assert second is ProcessResult.COMPLETED
    assert capture_keys(provider) == [f"{operation_id}-1"]  # never capture 2
    paid = reload(container, payment_id)
    assert paid.status is PaymentStatus.SUCCEEDED and paid.amount_captured == 600
    assert provider.captures == {paid.provider_payment_id: 1}


def test_a_capture_the_provider_refuses_later_fails_with_its_reason_and_nothing_is_resent(
    container: Container, provider: AsynchronousCaptures
) -> None:
    payment_id, operation_id = start_capture(container, 1000)

    assert run(container, operation_id) is ProcessResult.WAITING  # "received": processing
    provider.notify(refuse=True)
    wake(container, payment_id)
    assert run(container, operation_id) is ProcessResult.COMPLETED

    finished = reload_operation(container, operation_id)
    assert finished.status is OperationStatus.FAILED
    assert (finished.failure_code, finished.failure_message) == ("capture_failed", "scheme said no")
    assert capture_keys(provider) == [f"{operation_id}-1"]
    assert reload(container, payment_id).status is PaymentStatus.REQUIRES_CAPTURE


def test_without_a_wake_the_waiting_capture_is_not_due_before_its_recheck(
    container: Container, provider: AsynchronousCaptures
) -> None:
    _, operation_id = start_capture(container, 1000)

    assert run(container, operation_id) is ProcessResult.WAITING
    provider.notify()

    assert run(container, operation_id) is ProcessResult.NOT_CLAIMED


def test_a_notification_that_comes_while_the_worker_holds_the_capture_ends_its_wait_at_once(
    container: Container, provider: AsynchronousCaptures
) -> None:
    payment_id, operation_id = start_capture(container, 1000)

    def notified_at_once() -> None:
        provider.notify()
        wake(container, payment_id)  # before the worker writes its wait

    provider.on_capture = notified_at_once

    assert run(container, operation_id) is ProcessResult.WAITING
    waiting = reload_operation(container, operation_id)
    provider.on_capture = None

    assert waiting.next_attempt_at is not None and waiting.locked_until == waiting.next_attempt_at
    assert run(container, operation_id) is ProcessResult.COMPLETED  # due now, not at re-check
    assert reload(container, payment_id).status is PaymentStatus.SUCCEEDED
    assert capture_keys(provider) == [f"{operation_id}-1"]
