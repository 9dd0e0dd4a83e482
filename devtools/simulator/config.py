"""What a simulator instance is told at start-up (CLI flags or test fixtures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from devtools.simulator.faults import FaultRule
from orchestrator.stripe_version import PINNED_API_VERSION


@dataclass(frozen=True)
class SimulatorConfig:
    # Seed of the fault RNG: the same seed and request sequence inject the same faults.
    seed: int = 0
    # Rules armed at start-up (and again after ``POST /_sim/reset``).
    faults: tuple[FaultRule, ...] = ()
    # How long ``timeout_after_effect`` holds the answer back.  It must exceed the client's
    # read timeout, or the "timeout" is just a slow success and the test proves nothing.
    stall_seconds: float = 30.0
    # How long ``hang`` holds a request ("never" in practice; released on stop).
    hang_seconds: float = 3600.0
    # Search is eventually consistent, as Stripe documents: a change becomes visible to
    # ``/v1/payment_intents/search`` only this long after it happened.  Retrieve and list are
    # always current.
    search_lag_seconds: float = 2.0
    # Stripe's minimum charge (in minor units; 50 for USD).  Smaller amounts answer 400
    # ``amount_too_small`` like Stripe, which is a permanent failure for the worker.
    min_amount: int = 50
    # Stripe prunes idempotency keys once they are at least 24 hours old.
    idempotency_ttl_seconds: float = 24 * 3600.0
    # The only ``Stripe-Version`` accepted (any other, or none, is a loud 400).
    api_version: str = PINNED_API_VERSION
    # Called with (method, path, status, body) for every Stripe API answer: tests check each
    # one against Stripe's OpenAPI schemas.  It must not raise (it runs inside a request).
    answer_observer: Callable[[str, str, int, bytes], None] | None = field(
        default=None, compare=False
    )
    # Refunds that do not simply succeed (``pm_card_refundFail``, ``pm_card_sim_refundPending``)
    # move on by themselves this long after they were made (on the next request), or only
    # when told (``POST /_sim/refunds/{id}/settle``) when None.
    refund_settle_seconds: float | None = None
    # A confirm with an asynchronous test card (``pm_card_sim_processing*``) answers
    # ``processing``; it settles by itself this long after (on the next request), or only when
    # told (``POST /_sim/payment_intents/{id}/settle``) when None.
    processing_settle_seconds: float | None = None
    # Where events are delivered as webhooks, and the endpoint's signing secret (whsec_…);
    # both may also be set at run time (``POST /_sim/webhooks``).  None: no deliveries.
    webhook_url: str | None = None
    webhook_secret: str | None = None
    # A delivery the endpoint did not accept (non-2xx, no answer) is retried this often, this
    # many times in all (Stripe retries for three days; tests need seconds).
    webhook_retry_seconds: float = 0.5
    webhook_max_attempts: int = 5
    # A ``webhook:reorder`` event waits this long for a successor to overtake it.
    webhook_reorder_hold_seconds: float = 2.0
    # Events kept for /v1/events (a ring: the oldest are forgotten first).
    max_events: int = 100_000
    # The request log is a ring: a long-running simulator must not grow without bound.
    max_logged_requests: int = 200_000
