"""Saved payment methods are the merchant's own (decision 0063): the pure vocabulary.

A ``customer`` id belongs to the first merchant whose payment names it; a saved method
used with that customer follows it.  A provider's shared test tokens belong to nobody
(``providers.credentials.is_shared_test_method``), and so does a one-time method (one never
seen with a customer).  ``services.payment_ownership`` applies the rules at accept, before
anything reaches a provider.
"""

from __future__ import annotations

from enum import StrEnum


class OwnedKind(StrEnum):
    CUSTOMER = "customer"
    PAYMENT_METHOD = "payment_method"


class ForeignPaymentMethod(Exception):
    """The payment names another merchant's customer or saved method (400
    ``foreign-payment-method``); ``field`` is the request field that names it."""

    def __init__(self, field: str) -> None:
        super().__init__(f"{field} belongs to another merchant")
        self.field = field
