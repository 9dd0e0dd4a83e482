"""Identifiers: a readable prefix and 128 random bits, like Stripe's."""

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


def is_payment_id(value: str) -> bool:
    return _PAYMENT_ID.fullmatch(value) is not None
