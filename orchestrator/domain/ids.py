"""Identifiers: a readable prefix and random bits, like most payment APIs' (payments and clients;
webhook events and endpoints)."""

from __future__ import annotations

import re
import secrets

# What new_payment_id() makes.  Anything else cannot name a payment: routes answer 404
# without a query (and without echoing hostile input into SQL or logs).
PAYMENT_ID_PATTERN = "^pay_[0-9a-f]{32}$"
_PAYMENT_ID = re.compile(PAYMENT_ID_PATTERN)


def new_payment_id() -> str:
    return f"pay_{secrets.token_hex(16)}"


def new_client_id() -> str:
    return f"cli_{secrets.token_hex(12)}"


def new_api_key_id() -> str:
    return f"key_{secrets.token_hex(12)}"


def is_payment_id(value: str) -> bool:
    return _PAYMENT_ID.fullmatch(value) is not None


EVENT_ID_PATTERN = "^evt_[0-9a-f]{32}$"
ENDPOINT_ID_PATTERN = "^we_[0-9a-f]{32}$"
_EVENT_ID = re.compile(EVENT_ID_PATTERN)
_ENDPOINT_ID = re.compile(ENDPOINT_ID_PATTERN)


def new_event_id() -> str:
    return f"evt_{secrets.token_hex(16)}"


def new_endpoint_id() -> str:
    return f"we_{secrets.token_hex(16)}"


def is_event_id(value: str) -> bool:
    return _EVENT_ID.fullmatch(value) is not None


def is_endpoint_id(value: str) -> bool:
    return _ENDPOINT_ID.fullmatch(value) is not None
