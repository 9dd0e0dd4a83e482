"""Every allowed and every forbidden transition of the payment state machine."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.domain.states import (
    INITIAL,
    Event,
    IllegalTransition,
    Outcome,
    PaymentStatus,
    RecoveryPoint,
    State,
    all_states,
    transition,
)

P, NA = PaymentStatus.PROCESSING, PaymentStatus.NEEDS_ATTENTION
ACC, IC, PS, DONE = (
    RecoveryPoint.ACCEPTED,
    RecoveryPoint.INTENT_CREATED,
    RecoveryPoint.PROVIDER_SETTLED,
    RecoveryPoint.COMPLETED,
)

# (from, event, outcome) -> to.  Everything not listed here must be refused.
ALLOWED: dict[tuple[State, Event, Outcome | None], State] = {
    (State(P, ACC), Event.INTENT_CREATED, None): State(P, IC),
    (State(P, ACC), Event.PROVIDER_SETTLED, None): State(P, PS),
    (State(P, IC), Event.PROVIDER_SETTLED, None): State(P, PS),
    (State(P, PS), Event.FINISHED, Outcome.SUCCEEDED): State(PaymentStatus.SUCCEEDED, DONE),
    (State(P, PS), Event.FINISHED, Outcome.FAILED): State(PaymentStatus.FAILED, DONE),
    (State(P, PS), Event.FINISHED, Outcome.CANCELED): State(PaymentStatus.CANCELED, DONE),
    (State(P, PS), Event.FINISHED, Outcome.REQUIRES_CAPTURE): State(
        PaymentStatus.REQUIRES_CAPTURE, DONE
    ),
    (State(P, ACC), Event.PARKED, None): State(NA, ACC),
    (State(P, IC), Event.PARKED, None): State(NA, IC),
    (State(P, PS), Event.PARKED, None): State(NA, PS),
    (State(NA, ACC), Event.RETRIED, None): State(P, ACC),
    (State(NA, IC), Event.RETRIED, None): State(P, IC),
    (State(NA, PS), Event.RETRIED, None): State(P, PS),
}


def _cases():
    outcomes: list[Outcome | None] = [None, *Outcome]
    for state, event, outcome in itertools.product(all_states(), Event, outcomes):
        if (outcome is None) == (event is Event.FINISHED):
            continue  # argument errors, tested separately
        yield state, event, outcome


def test_the_state_list_is_complete_and_starts_at_accepted():
    assert State(P, ACC) == INITIAL
    assert len(all_states()) == 10
    assert len(set(all_states())) == 10


@pytest.mark.parametrize(("state", "event", "outcome"), list(_cases()))
def test_every_transition_is_either_allowed_with_its_target_or_refused(state, event, outcome):
    expected = ALLOWED.get((state, event, outcome))
    if expected is None:
        with pytest.raises(IllegalTransition):
            transition(state, event, outcome)
    else:
        assert transition(state, event, outcome) == expected


def test_the_allowed_table_has_no_entry_the_machine_refuses():
    for (state, event, outcome), target in ALLOWED.items():
        assert transition(state, event, outcome) == target


@pytest.mark.parametrize(
    "status",
    [
        PaymentStatus.SUCCEEDED,
        PaymentStatus.FAILED,
        PaymentStatus.CANCELED,
        PaymentStatus.REQUIRES_CAPTURE,
    ],
)
def test_finished_payments_accept_no_event(status):
    for event in Event:
        outcome = Outcome.SUCCEEDED if event is Event.FINISHED else None
        with pytest.raises(IllegalTransition):
            transition(State(status, DONE), event, outcome)


def test_finished_requires_an_outcome_and_other_events_refuse_one():
    with pytest.raises(ValueError, match="outcome"):
        transition(State(P, PS), Event.FINISHED)
    with pytest.raises(ValueError, match="outcome"):
        transition(State(P, ACC), Event.INTENT_CREATED, Outcome.SUCCEEDED)


def test_final_statuses():
    assert {s for s in PaymentStatus if s.is_final} == {
        PaymentStatus.SUCCEEDED,
        PaymentStatus.FAILED,
        PaymentStatus.CANCELED,
    }
