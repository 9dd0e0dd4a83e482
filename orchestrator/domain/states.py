"""The payment state machine: data plus pure functions.

A record carries two coordinates: the ``status`` a client sees and the ``recovery_point``
that tells any worker where to resume::

      status            recovery point
      ------            --------------
                         accepted ──create provider payment──► intent_created
                            │                             │
                            │ permanent failure           │ confirm / query
                            ▼                             ▼
    processing ─────────► provider_settled ◄──────────────┘
        │  ▲                 │
   park │  │ retry           │ finish (one transaction, fenced by the lease token)
        ▼  │                 ▼
    needs_attention      succeeded | failed | canceled | requires_capture  @ completed

``requires_capture`` (manual capture) ends the charge like a final status; a capture
operation later moves the payment to ``succeeded``, a cancel to ``canceled``
(``engine.kinds.capture`` / ``cancel``, each on its own operation row and lease).

``park`` keeps the recovery point, so an operator's retry resumes where the work stopped.
The database repeats every guard as a compare-and-set (``WHERE status = … AND
recovery_point = … AND lease_token = …``); these functions are the single statement of
which moves exist, and the unit tests cover every allowed and every forbidden one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PaymentStatus(StrEnum):
    """The stored status.  ``requires_action`` is not stored: it is a ``processing`` record
    whose operation waits for the customer (``WaitingFor.CUSTOMER``), shown as
    ``requires_action`` by ``domain.payment_representation.shown_status``, so every lease guard
    (``status = 'processing'``) and the sweeper's index serve a waiting record unchanged."""

    PROCESSING = "processing"
    REQUIRES_ACTION = "requires_action"  # shown only, never stored (see above)
    # Manual capture: the charge is finished (completed, no lease) with an authorisation
    # that a capture operation takes or a cancel operation releases (``engine.kinds``).
    REQUIRES_CAPTURE = "requires_capture"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    NEEDS_ATTENTION = "needs_attention"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES

    @property
    def charge_finished(self) -> bool:
        """The charge operation is done: a final status, or an authorisation waiting for
        its capture (no lease on the payment row either way)."""
        return self.is_final or self is PaymentStatus.REQUIRES_CAPTURE


FINAL_STATUSES = frozenset({PaymentStatus.SUCCEEDED, PaymentStatus.FAILED, PaymentStatus.CANCELED})


class WaitingFor(StrEnum):
    """Whom a waiting operation waits for (``payments.waiting_for``).  A waiting operation
    holds no lease: it has a re-check time (``next_attempt_at``) and is resumed by a provider
    event or by the sweeper when that time comes."""

    CUSTOMER = "customer"  # 3-D Secure: the customer must authenticate (requires_action)
    PROVIDER = "provider"  # an asynchronous method: the provider settles it later
    # Its connector account's circuit is open (decision 0082): no call was made, and the
    # sweeper releases it when the circuit lets calls through again.  Shown as processing.
    CIRCUIT = "circuit"


class RecoveryPoint(StrEnum):
    ACCEPTED = "accepted"
    INTENT_CREATED = "intent_created"
    PROVIDER_SETTLED = "provider_settled"
    COMPLETED = "completed"


class Outcome(StrEnum):
    """What the provider settled: the business result of one payment."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The provider payment was canceled (the customer never authenticated: authentication_timeout).
    CANCELED = "canceled"
    # Manual capture: authorised, the money waits for a capture (or a cancel).
    REQUIRES_CAPTURE = "requires_capture"


class Event(StrEnum):
    INTENT_CREATED = "intent_created"
    PROVIDER_SETTLED = "provider_settled"
    FINISHED = "finished"
    PARKED = "parked"
    RETRIED = "retried"


@dataclass(frozen=True)
class State:
    status: PaymentStatus
    point: RecoveryPoint


class IllegalTransition(Exception):
    def __init__(self, state: State, event: Event) -> None:
        super().__init__(
            f"{event.value} is not allowed from {state.status.value}@{state.point.value}"
        )
        self.state = state
        self.event = event


INITIAL = State(PaymentStatus.PROCESSING, RecoveryPoint.ACCEPTED)

_UNFINISHED_POINTS = (
    RecoveryPoint.ACCEPTED,
    RecoveryPoint.INTENT_CREATED,
    RecoveryPoint.PROVIDER_SETTLED,
)

# Event -> the recovery points it may start from (status must be PROCESSING unless noted).
_POINT_MOVES: dict[Event, dict[RecoveryPoint, RecoveryPoint]] = {
    Event.INTENT_CREATED: {RecoveryPoint.ACCEPTED: RecoveryPoint.INTENT_CREATED},
    Event.PROVIDER_SETTLED: {
        RecoveryPoint.ACCEPTED: RecoveryPoint.PROVIDER_SETTLED,
        RecoveryPoint.INTENT_CREATED: RecoveryPoint.PROVIDER_SETTLED,
    },
    Event.FINISHED: {RecoveryPoint.PROVIDER_SETTLED: RecoveryPoint.COMPLETED},
    Event.PARKED: {p: p for p in _UNFINISHED_POINTS},
    Event.RETRIED: {p: p for p in _UNFINISHED_POINTS},
}


def allowed_sources(event: Event) -> tuple[PaymentStatus, tuple[RecoveryPoint, ...]]:
    """The (status, points) a compare-and-set for ``event`` must require in its WHERE clause."""
    status = PaymentStatus.NEEDS_ATTENTION if event is Event.RETRIED else PaymentStatus.PROCESSING
    return status, tuple(_POINT_MOVES[event])


def transition(state: State, event: Event, outcome: Outcome | None = None) -> State:
    """The state after ``event``; ``outcome`` is required by FINISHED and only by it."""
    required_status, points = allowed_sources(event)
    if state.status is not required_status or state.point not in points:
        raise IllegalTransition(state, event)
    if (outcome is not None) != (event is Event.FINISHED):
        raise ValueError("an outcome is given with FINISHED and only with FINISHED")
    new_point = _POINT_MOVES[event][state.point]
    if event is Event.FINISHED:
        assert outcome is not None
        return State(PaymentStatus(outcome.value), new_point)
    if event is Event.PARKED:
        return State(PaymentStatus.NEEDS_ATTENTION, new_point)
    return State(PaymentStatus.PROCESSING, new_point)


def all_states() -> list[State]:
    """Every state a record can be in (for exhaustive tests)."""
    states = [State(PaymentStatus.PROCESSING, p) for p in _UNFINISHED_POINTS]
    states += [State(PaymentStatus.NEEDS_ATTENTION, p) for p in _UNFINISHED_POINTS]
    states += [State(s, RecoveryPoint.COMPLETED) for s in FINAL_STATUSES]
    states.append(State(PaymentStatus.REQUIRES_CAPTURE, RecoveryPoint.COMPLETED))
    return states
