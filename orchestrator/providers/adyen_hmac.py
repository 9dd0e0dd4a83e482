"""Adyen's HMAC signature of a standard notification item, computed and checked.

Adyen signs each ``NotificationRequestItem`` on its own and puts the signature in
``additionalData.hmacSignature``.  The signed string is eight values joined by ``:``, an
empty string for an absent one, with **no escaping** (Adyen-signed test items whose reference
holds ``:`` or ``\\`` verify only that way)::

    pspReference:originalReference:merchantAccountCode:merchantReference:
    amount.value:amount.currency:eventCode:success

The key is the hex string shown in Adyen's Customer Area, decoded to bytes; the signature is
the base64 of the HMAC-SHA256.  Pure functions with no dependency beyond the standard
library: the Adyen simulator (``devtools/adyen_simulator``) signs with them and the
notification endpoint verifies with them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

SIGNATURE_KEY = "hmacSignature"

_SIGNED_FIELDS = (
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def signed_string(item: Mapping[str, Any]) -> str:
    """The string Adyen signs for one notification item (no escaping)."""
    amount = item.get("amount")
    amount = amount if isinstance(amount, Mapping) else {}
    values = [_text(item.get(name)) for name in _SIGNED_FIELDS]
    values += [
        _text(amount.get("value")),
        _text(amount.get("currency")),
        _text(item.get("eventCode")),
        _text(item.get("success")),
    ]
    return ":".join(values)


def key_bytes(hex_key: str) -> bytes:
    """The Customer Area's hex key as bytes; ``ValueError`` if it is not hex."""
    try:
        return binascii.unhexlify(hex_key.strip())
    except (binascii.Error, ValueError) as exc:
        raise ValueError("an Adyen HMAC key is a hex string") from exc


def sign_item(item: Mapping[str, Any], hex_key: str) -> str:
    """The base64 HMAC-SHA256 of ``item`` under ``hex_key``, as Adyen computes it."""
    digest = hmac.new(key_bytes(hex_key), signed_string(item).encode("utf-8"), hashlib.sha256)
    return base64.b64encode(digest.digest()).decode("ascii")


def signed_item(item: Mapping[str, Any], hex_key: str) -> dict[str, Any]:
    """A copy of ``item`` with its signature in ``additionalData.hmacSignature``."""
    copy = dict(item)
    extra = copy.get("additionalData")
    additional = dict(extra) if isinstance(extra, Mapping) else {}
    additional[SIGNATURE_KEY] = sign_item(item, hex_key)
    copy["additionalData"] = additional
    return copy


def verify_item(item: Mapping[str, Any], hex_keys: str | Iterable[str]) -> bool:
    """Whether ``item`` carries a valid signature under one of ``hex_keys`` (several keys
    while a rotation is under way).  Compared in constant time; a missing signature or a
    malformed key is simply not valid."""
    extra = item.get("additionalData")
    sent = extra.get(SIGNATURE_KEY) if isinstance(extra, Mapping) else None
    if not isinstance(sent, str) or not sent:
        return False
    keys = [hex_keys] if isinstance(hex_keys, str) else list(hex_keys)
    valid = False
    for key in keys:
        try:
            expected = sign_item(item, key)
        except ValueError:
            continue
        valid |= hmac.compare_digest(expected.encode("ascii"), sent.encode("utf-8"))
    return valid
