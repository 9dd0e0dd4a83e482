"""A connector account's circuit as pure transitions (``domain.circuit``, decision 0082),
and which provider errors count against it (``providers.circuit``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.domain.circuit import (
    PLATFORM_CIRCUIT_KEY,
    Admission,
    Circuit,
    CircuitPolicy,
    CircuitState,
    admission,
    after_failure,
    after_success,
    circuit_key,
    needs_success_write,
    take_probe,
)
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    Retryable,
)
from orchestrator.providers.circuit import counts_against_circuit

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
POLICY = CircuitPolicy(failures=3, window_seconds=30.0, open_seconds=15.0, probes=2)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def failures(circuit: Circuit, *seconds: float) -> Circuit:
    for s in seconds:
        circuit = after_failure(circuit, at(s), POLICY)
    return circuit


def test_the_platform_account_has_the_contracts_key() -> None:
    assert circuit_key(None) == PLATFORM_CIRCUIT_KEY == "ca_platform_stripe"
    assert circuit_key("ca_123") == "ca_123"


def test_it_opens_at_the_nth_failure_within_the_window_and_refuses_until_the_probe_time() -> None:
    circuit = failures(Circuit("ca_1"), 0, 10)
    assert circuit.state is CircuitState.CLOSED and circuit.failures == 2
    assert admission(circuit, at(10)) is Admission.CALL

    circuit = failures(circuit, 20)
    assert circuit.state is CircuitState.OPEN
    assert circuit.opened_at == at(20) and circuit.next_probe_at == at(35)
    assert admission(circuit, at(34.999)) is Admission.REFUSE
    assert admission(circuit, at(35)) is Admission.PROBE


def test_failures_spread_wider_than_the_window_never_open_it() -> None:
    circuit = failures(Circuit("ca_1"), 0, 10, 30, 40, 60, 70)
    assert circuit.state is CircuitState.CLOSED
    # The window restarted at 30 and at 60: two failures in the current one.
    assert circuit.failures == 2 and circuit.window_started_at == at(60)


def test_a_success_starts_the_count_over() -> None:
    circuit = failures(Circuit("ca_1"), 0, 1)
    assert needs_success_write(circuit)
    circuit = after_success(circuit, at(2))
    assert circuit.failures == 0 and not needs_success_write(circuit)
    assert failures(circuit, 3, 4).state is CircuitState.CLOSED


def test_half_open_hands_out_at_most_the_probe_slots_then_refuses() -> None:
    circuit = failures(Circuit("ca_1"), 0, 1, 2)
    assert take_probe(circuit, at(16), POLICY) is None  # not due yet

    first = take_probe(circuit, at(17), POLICY)
    assert first is not None and first.state is CircuitState.HALF_OPEN and first.probes == 1
    second = take_probe(first, at(17.5), POLICY)
    assert second is not None and second.probes == 2
    assert take_probe(second, at(18), POLICY) is None


def test_a_half_open_period_whose_probes_never_reported_hands_out_fresh_slots() -> None:
    circuit = failures(Circuit("ca_1"), 0, 1, 2)
    taken = take_probe(take_probe(circuit, at(17), POLICY), at(17), POLICY)  # type: ignore[arg-type]
    assert taken is not None and take_probe(taken, at(31.9), POLICY) is None
    fresh = take_probe(taken, at(32), POLICY)
    assert fresh is not None and fresh.probes == 1 and fresh.since == at(32)


def test_a_failed_probe_opens_it_for_another_period_and_a_success_closes_it() -> None:
    circuit = failures(Circuit("ca_1"), 0, 1, 2)
    probing = take_probe(circuit, at(17), POLICY)
    assert probing is not None

    reopened = after_failure(probing, at(18), POLICY)
    assert reopened.state is CircuitState.OPEN and reopened.next_probe_at == at(33)
    assert reopened.probes == 0

    closed = after_success(take_probe(reopened, at(33), POLICY), at(34))  # type: ignore[arg-type]
    assert closed.state is CircuitState.CLOSED and closed.since == at(34)
    assert closed.failures == 0 and closed.next_probe_at is None
    # The resume is paced from the close.
    assert closed.released_at == at(34)


def test_a_late_failure_of_a_call_let_through_before_it_opened_does_not_delay_the_probe() -> None:
    circuit = failures(Circuit("ca_1"), 0, 1, 2)
    later = after_failure(circuit, at(5), POLICY)
    assert later.state is CircuitState.OPEN and later.next_probe_at == at(17)
    assert later.failures == 4


@pytest.mark.parametrize(
    ("error", "counts"),
    [
        (None, False),
        (OutcomeUnknown("read timeout"), True),
        (OutcomeUnknown("500", http_status=500), True),
        (Retryable("503 from a read", http_status=503), True),
        # The provider answering: a card decline, our request refused, busy.
        (Declined("declined", code="card_declined"), False),
        (Permanent("invalid", http_status=400), False),
        (Retryable("rate limited", http_status=429, retry_after=1.0), False),
        (Retryable("key in use", http_status=409), False),
        # Not the provider: says nothing about it.
        (RuntimeError("bug"), False),
    ],
)
def test_what_counts_against_the_circuit(error: BaseException | None, counts: bool) -> None:
    assert counts_against_circuit(error) is counts
