"""Standard Webhooks signatures (https://www.standardwebhooks.com), made by the
``standardwebhooks`` library, never by hand.

Headers: ``webhook-id`` (the event id: the same on every retry, so receivers dedupe by
it), ``webhook-timestamp`` (Unix seconds of this attempt; receivers refuse one more than
five minutes off), ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of id.timestamp.body>``;
during a secret rotation's grace period one signature per secret, space-separated).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from standardwebhooks.webhooks import Webhook


def signature_headers(
    event_id: str, body: str, secrets: Sequence[str], *, timestamp: datetime
) -> dict[str, str]:
    assert secrets, "an endpoint always has a secret"
    signatures = [Webhook(secret).sign(event_id, timestamp, body) for secret in secrets]
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
