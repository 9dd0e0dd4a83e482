"""What a stored event may still show of its payment: copies of short-lived values end
when the value does.

An event's ``data.object`` is the payment as it was when the event was written, and the
event is kept ``PAYORCH_WEBHOOK_EVENT_RETENTION_DAYS``.  Two values in it live shorter:

* ``client_secret`` (with ``next_action``) lets a browser complete 3-D Secure; it is shown
  only while the payment still waits for its customer with that same secret.  The
  payment's own columns are cleared when the wait ends (by the fenced finish).
* ``idempotency_key`` is the merchant's raw key; it is shown only while the payment still
  holds it, i.e. until the retention purge forgets it (``IDEMPOTENCY_RETENTION_HOURS``
  after the payment finished).

Every read that shows or sends an event applies ``visible_payload`` (through
``events.event_reads.shown_now``): ``GET /v1/events``, the ops API and console, and a
webhook delivery retried after the wait ended.  The stored event keeps its copies until the
event itself is purged.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.model import PaymentRecord


def _text(payload: dict[str, Any], name: str) -> str | None:
    value = payload.get(name)
    return value if isinstance(value, str) and value else None


def has_short_lived_values(payload: dict[str, Any], *, keys: bool = True) -> bool:
    """Whether ``payload`` carries a client secret (or, with ``keys``, an idempotency key)
    whose visibility depends on the payment's current state."""
    return _text(payload, "client_secret") is not None or (
        keys and _text(payload, "idempotency_key") is not None
    )


def visible_payload(payload: dict[str, Any], current: PaymentRecord | None) -> dict[str, Any]:
    """``payload`` as it may be shown now, given the payment as it is now (None: gone)."""
    hidden: dict[str, Any] = {}
    secret = _text(payload, "client_secret")
    if secret is not None and not (
        current is not None and current.requires_action and current.client_secret == secret
    ):
        hidden.update(client_secret=None, next_action=None)
    key = _text(payload, "idempotency_key")
    if key is not None and (current is None or current.idempotency_key != key):
        hidden["idempotency_key"] = None
    return {**payload, **hidden} if hidden else payload
