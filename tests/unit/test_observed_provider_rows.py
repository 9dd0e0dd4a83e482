"""The observing provider's recording: one row per provider call with key, outcome and latency; the
provider's answer or exception passes through unchanged, even when recording fails."""

from __future__ import annotations

import pytest

from orchestrator.domain.history import ProviderCallRecord
from orchestrator.providers.base import OutcomeUnknown, Retryable
from orchestrator.providers.observed import ObservedProvider
from tests.fakes.provider import FakeProvider

RECORD = "pay_" + "a" * 32


def _create(provider: ObservedProvider):
    return provider.create_payment(
        record_id=RECORD,
        amount=1000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
    )


def test_every_call_is_recorded_with_its_request_key_outcome_and_status() -> None:
    calls: list[ProviderCallRecord] = []
    provider = ObservedProvider(FakeProvider(), calls.append)

    intent = _create(provider)
    provider.confirm_payment(intent.id, record_id=RECORD, attempt=1)
    provider.retrieve_payment(intent.id)
    page = provider.list_payments(created_gte=0, created_lte=2**31, starting_after=None, limit=100)

    # A lookup page names no payment: it passes through unrecorded (the payment shows the
    # scan's progress itself), and its answer is the inner provider's.
    assert [i.id for i in page.provider_payments] == [intent.id]
    assert [(c.operation, c.method, c.outcome) for c in calls] == [
        ("create", "POST", "ok"),
        ("confirm", "POST", "ok"),
        ("retrieve", "GET", "ok"),
    ]
    create, confirm, retrieve = calls
    assert create.idempotency_key == f"payorch-{RECORD}-create"
    assert create.provider_object_id == intent.id and create.payment_id == RECORD
    assert confirm.idempotency_key == f"payorch-{RECORD}-confirm-1"
    assert confirm.path == f"/v1/payment_intents/{intent.id}/confirm"
    assert confirm.provider_status == "succeeded"
    # A retrieve names only the provider's object; the repository maps it to the payment.
    assert retrieve.payment_id is None and retrieve.provider_object_id == intent.id
    assert retrieve.idempotency_key is None
    assert all(c.latency_ms >= 0 for c in calls)


@pytest.mark.parametrize(
    ("fault", "error", "outcome"),
    [
        ("unknown_before_effect", OutcomeUnknown, "unknown"),
        ("rate_limited", Retryable, "retryable"),
    ],
)
def test_a_failed_call_is_recorded_and_its_exception_passes_through(fault, error, outcome) -> None:
    calls: list[ProviderCallRecord] = []
    fake = FakeProvider()
    fake.fail("create", 1, fault)
    provider = ObservedProvider(fake, calls.append)

    with pytest.raises(error):
        _create(provider)

    [call] = calls
    assert call.outcome == outcome
    assert call.error and error.__name__ in call.error
    assert call.provider_status is None


def test_a_recorder_that_fails_never_changes_what_the_worker_sees() -> None:
    def broken(_call: ProviderCallRecord) -> None:
        raise RuntimeError("database down")

    fake = FakeProvider()
    provider = ObservedProvider(fake, broken)
    intent = _create(provider)
    assert intent.status == "requires_confirmation"

    fake.fail("confirm", 1, "unknown_after_effect")
    with pytest.raises(OutcomeUnknown):
        provider.confirm_payment(intent.id, record_id=RECORD, attempt=1)
