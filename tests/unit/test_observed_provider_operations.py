"""The observing wrapper (metrics and recording) around captures, cancels, refunds and the
new create / confirm fields: every argument reaches the provider, each call is recorded with
its derived key and the provider payment it is about, and the provider's answer or exception
passes through."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator import metrics
from orchestrator.domain.history import ProviderCallRecord
from orchestrator.providers.base import (
    OutcomeUnknown,
    Permanent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
)
from orchestrator.providers.observed import ObservedProvider

INTENT = ProviderPayment(
    id="pi_1", status="succeeded", amount=1000, currency="usd", metadata={}, amount_received=1000
)
REFUND = ProviderRefund(
    id="re_1",
    provider_payment_id="pi_1",
    amount=300,
    currency="usd",
    status="pending",
    metadata={"payorch_refund_id": "rfd-1"},
)


class StubProvider:
    """Answers every call with a canned object (or raises ``fail_with``); remembers calls."""

    name = "stub"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.fail_with: Exception | None = None

    def _answer(self, name: str, result: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((name, args, kwargs))
        if self.fail_with is not None:
            raise self.fail_with
        return result

    def create_payment(self, **kwargs: Any) -> ProviderPayment:
        return self._answer("create_payment", INTENT, **kwargs)  # type: ignore[no-any-return]

    def confirm_payment(self, provider_payment_id: str, **kwargs: Any) -> ProviderPayment:
        return self._answer("confirm_payment", INTENT, provider_payment_id, **kwargs)  # type: ignore[no-any-return]

    def retrieve_payment(self, provider_payment_id: str, **kwargs: Any) -> ProviderPayment:
        return self._answer("retrieve_payment", INTENT, provider_payment_id, **kwargs)  # type: ignore[no-any-return]

    def list_payments(self, **kwargs: Any) -> ProviderPaymentPage:
        return self._answer("list_payments", ProviderPaymentPage((), False), **kwargs)  # type: ignore[no-any-return]

    def capture_payment(self, provider_payment_id: str, **kwargs: Any) -> ProviderPayment:
        return self._answer("capture_payment", INTENT, provider_payment_id, **kwargs)  # type: ignore[no-any-return]

    def cancel_payment(self, provider_payment_id: str, **kwargs: Any) -> ProviderPayment:
        return self._answer("cancel_payment", INTENT, provider_payment_id, **kwargs)  # type: ignore[no-any-return]

    def create_refund(self, **kwargs: Any) -> ProviderRefund:
        return self._answer("create_refund", REFUND, **kwargs)  # type: ignore[no-any-return]

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        return self._answer("retrieve_refund", REFUND, refund_id)  # type: ignore[no-any-return]

    def list_refunds(self, provider_payment_id: str, **kwargs: Any) -> RefundPage:
        page = RefundPage((REFUND,), has_more=False)
        return self._answer("list_refunds", page, provider_payment_id, **kwargs)  # type: ignore[no-any-return]


def _exercise(provider: Any) -> None:
    provider.create_payment(
        record_id="pay_1",
        amount=1000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
        capture_method="manual",
        customer="cus_1",
    )
    provider.confirm_payment(
        "pi_1", record_id="pay_1", attempt=1, off_session=True, return_url="https://r"
    )
    provider.capture_payment("pi_1", operation_id="op-c", attempt=1, amount_to_capture=600)
    provider.cancel_payment("pi_1", operation_id="op-x", attempt=2, reason="abandoned")
    provider.create_refund(
        provider_payment_id="pi_1",
        operation_id="rfd-1",
        attempt=3,
        amount=300,
        reason="duplicate",
        metadata={"k": "v"},
    )
    provider.retrieve_refund("re_1")
    provider.list_refunds("pi_1", starting_after="re_0", limit=10)


EXPECTED_CALLS = [
    (
        "create_payment",
        (),
        {
            "record_id": "pay_1",
            "amount": 1000,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "description": None,
            "metadata": {},
            "capture_method": "manual",
            "customer": "cus_1",
        },
    ),
    (
        "confirm_payment",
        ("pi_1",),
        {"record_id": "pay_1", "attempt": 1, "off_session": True, "return_url": "https://r"},
    ),
    (
        "capture_payment",
        ("pi_1",),
        {"operation_id": "op-c", "attempt": 1, "amount_to_capture": 600},
    ),
    ("cancel_payment", ("pi_1",), {"operation_id": "op-x", "attempt": 2, "reason": "abandoned"}),
    (
        "create_refund",
        (),
        {
            "provider_payment_id": "pi_1",
            "operation_id": "rfd-1",
            "attempt": 3,
            "amount": 300,
            "reason": "duplicate",
            "metadata": {"k": "v"},
        },
    ),
    ("retrieve_refund", ("re_1",), {}),
    ("list_refunds", ("pi_1",), {"starting_after": "re_0", "limit": 10}),
]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda inner: ObservedProvider(inner, lambda call: None),
        ObservedProvider,
    ],
    ids=["recorded", "measured only"],
)
def test_every_argument_of_every_call_reaches_the_provider(wrap: Any) -> None:
    inner = StubProvider()

    _exercise(wrap(inner))

    assert inner.calls == EXPECTED_CALLS


def test_captures_cancels_and_refunds_are_recorded_with_their_key_and_intent() -> None:
    calls: list[ProviderCallRecord] = []

    _exercise(ObservedProvider(StubProvider(), calls.append))

    rows = {c.operation: c for c in calls}
    capture, cancel, refund = rows["capture"], rows["cancel"], rows["refund"]
    assert (capture.method, capture.path) == ("POST", "/v1/payment_intents/pi_1/capture")
    assert capture.idempotency_key == "payorch-op-c-capture-1"
    assert (cancel.path, cancel.idempotency_key) == (
        "/v1/payment_intents/pi_1/cancel",
        "payorch-op-x-cancel-2",
    )
    assert (refund.method, refund.path) == ("POST", "/v1/refunds")
    assert refund.idempotency_key == "payorch-rfd-1-refund-3"
    assert refund.provider_status == "pending"
    # Each names the intent, which the repository maps to its payment.
    for row in (capture, cancel, refund, rows["retrieve_refund"], rows["list_refunds"]):
        assert row.payment_id is None
        assert row.provider_object_id == "pi_1"
    assert rows["retrieve_refund"].path == "/v1/refunds/re_1"
    assert rows["retrieve_refund"].idempotency_key is None
    assert rows["list_refunds"].provider_status == "1 refunds"


def test_a_refund_that_failed_is_recorded_and_its_exception_passes_through() -> None:
    calls: list[ProviderCallRecord] = []
    inner = StubProvider()
    inner.fail_with = OutcomeUnknown("timed out")
    provider = ObservedProvider(inner, calls.append)

    with pytest.raises(OutcomeUnknown):
        provider.create_refund(
            provider_payment_id="pi_1",
            operation_id="rfd-1",
            attempt=1,
            amount=1,
            reason=None,
            metadata={},
        )

    [call] = calls
    assert (call.operation, call.outcome, call.provider_object_id) == ("refund", "unknown", "pi_1")
    assert call.idempotency_key == "payorch-rfd-1-refund-1"


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        (
            "capture",
            lambda p: p.capture_payment(
                "pi_1", operation_id="o", attempt=1, amount_to_capture=None
            ),
        ),
        ("cancel", lambda p: p.cancel_payment("pi_1", operation_id="o", attempt=1, reason=None)),
        (
            "refund",
            lambda p: p.create_refund(
                provider_payment_id="pi_1",
                operation_id="o",
                attempt=1,
                amount=1,
                reason=None,
                metadata={},
            ),
        ),
        ("retrieve_refund", lambda p: p.retrieve_refund("re_1")),
        ("list_refunds", lambda p: p.list_refunds("pi_1", starting_after=None, limit=1)),
    ],
)
def test_each_new_call_is_counted_under_its_own_operation(operation: str, call: Any) -> None:
    inner = StubProvider()
    provider = ObservedProvider(inner)  # type: ignore[arg-type]
    ok = metrics.PROVIDER_CALLS.labels(operation, "ok")
    permanent = metrics.PROVIDER_CALLS.labels(operation, "permanent")
    before_ok, before_permanent = ok._value.get(), permanent._value.get()

    call(provider)
    inner.fail_with = Permanent("no", code="payment_intent_unexpected_state")
    with pytest.raises(Permanent):
        call(provider)

    assert ok._value.get() == before_ok + 1
    assert permanent._value.get() == before_permanent + 1
    assert operation in metrics.PROVIDER_OPERATIONS


class OldStyleProvider(StubProvider):
    """A provider written before the optional create/confirm arguments existed."""

    def create_payment(  # type: ignore[override]
        self,
        *,
        record_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        description: str | None,
        metadata: dict[str, str],
    ) -> ProviderPayment:
        return INTENT

    def confirm_payment(  # type: ignore[override]
        self, provider_payment_id: str, *, record_id: str, attempt: int
    ) -> ProviderPayment:
        return INTENT


def test_the_optional_arguments_reach_an_older_provider_only_when_set() -> None:
    provider = ObservedProvider(OldStyleProvider(), lambda call: None)  # type: ignore[arg-type]

    provider.create_payment(
        record_id="pay_1",
        amount=1000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
    )
    provider.confirm_payment("pi_1", record_id="pay_1", attempt=1)
    with pytest.raises(TypeError):
        provider.confirm_payment("pi_1", record_id="pay_1", attempt=2, off_session=True)
