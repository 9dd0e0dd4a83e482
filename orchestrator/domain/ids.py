"""Identifiers: a readable prefix and 128 random bits, like Stripe's."""

from __future__ import annotations

import secrets


def new_payment_id() -> str:
    return f"pay_{secrets.token_hex(16)}"


def new_client_id() -> str:
    return f"cli_{secrets.token_hex(12)}"
