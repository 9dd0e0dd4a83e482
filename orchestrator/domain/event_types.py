"""The event types a merchant can subscribe to: the one list (add new kinds here).

An endpoint subscribes to a list of these or to ``["*"]`` (every type, including types
added later).  An unknown type in a subscription is refused (400): a typo would otherwise
subscribe to nothing, silently.
"""

from __future__ import annotations

from collections.abc import Iterable

WILDCARD = "*"

EVENT_TYPES: tuple[str, ...] = (
    "payment.processing",
    "payment.requires_action",
    "payment.requires_capture",
    "payment.succeeded",
    "payment.failed",
    "payment.canceled",
    "payment.captured",
    # A capture or cancel the merchant asked for failed; the object is the operation
    # (``domain.operation_representation``) with ``failure``, not the payment.
    "payment.capture_failed",
    "payment.cancel_failed",
    "refund.succeeded",
    "refund.failed",
    "payment.disputed",
)
_KNOWN = frozenset(EVENT_TYPES)


def is_known_event_type(event_type: str) -> bool:
    return event_type in _KNOWN


def unknown_event_types(requested: Iterable[str]) -> list[str]:
    return [t for t in requested if t != WILDCARD and t not in _KNOWN]


def subscribes_to(events: Iterable[str], event_type: str) -> bool:
    return any(e in (WILDCARD, event_type) for e in events)
