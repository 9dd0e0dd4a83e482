"""What an Adyen simulator instance is told at start-up (CLI flags or test fixtures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from devtools.adyen_simulator.faults import FaultRule


@dataclass(frozen=True)
class AdyenSimulatorConfig:
    # Seed of the fault RNG: the same seed and request sequence inject the same faults.
    seed: int = 0
    # Rules armed at start-up (and again after ``POST /_sim/reset``).
    faults: tuple[FaultRule, ...] = ()
    # How long ``timeout_after_effect`` holds the answer back; it must exceed the client's
    # read timeout, or the "timeout" is just a slow success.
    stall_seconds: float = 30.0
    # How long ``hang`` holds a request ("never" in practice; released on stop).
    hang_seconds: float = 3600.0
    # The X-API-Key values accepted; empty: any non-empty key (each key is its own
    # idempotency scope, as a company account is at Adyen).
    api_keys: tuple[str, ...] = ()
    # The merchant accounts accepted; empty: any (else 403 errorCode 901).
    merchant_accounts: tuple[str, ...] = ()
    # The status of the 704 "in progress" answer: Adyen documents 422 or 409.
    idempotency_in_flight_status: int = 422
    # Adyen keeps idempotency keys at least 7 days.
    idempotency_ttl_seconds: float = 7 * 24 * 3600.0
    # Several partial captures of one authorisation (an Adyen account setting).  False:
    # Adyen's default, a partial capture closes the authorisation's remainder.
    multiple_partial_captures: bool = False
    # Where notifications are POSTed and the HMAC key (hex, as in the Customer Area); both
    # may also be set at run time (``POST /_sim/notifications``).  None: no deliveries.
    notification_url: str | None = None
    hmac_key: str | None = None
    # Basic auth Adyen sends with each notification, when set ("user:password").
    notification_basic_auth: str | None = None
    # A notification the endpoint did not accept (non-2xx, no answer) is retried this often,
    # this many times in all (Adyen retries for 30 days; tests need seconds).
    notification_retry_seconds: float = 0.5
    notification_max_attempts: int = 5
    # A ``webhook:reorder`` notification waits this long for a successor to overtake it.
    notification_reorder_hold_seconds: float = 2.0
    # Modifications answer ``received`` at once; their notification follows this much later.
    modification_delay_seconds: float = 0.0
    # Called with (method, path, status, request body, response body) for every Checkout API
    # answer: tests check each one against Adyen's OpenAPI schemas.  It must not raise.
    answer_observer: Callable[[str, str, int, bytes, bytes], None] | None = field(
        default=None, compare=False
    )
    # The account's time zone setting: the settlement details report's times are local to
    # it, named by its abbreviation (CET / CEST for Amsterdam, Adyen's own).
    report_time_zone: str = "Europe/Amsterdam"
    # The request log is a ring: a long-running simulator must not grow without bound.
    max_logged_requests: int = 200_000

    def __post_init__(self) -> None:
        if self.idempotency_in_flight_status not in (409, 422):
            raise ValueError("Adyen answers a key in flight with 409 or 422")
