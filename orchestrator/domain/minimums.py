"""Stripe's minimum charge amounts, per currency (pure).

Stripe refuses a charge below these amounts (``amount_too_small``); payorch refuses the
payment at accept time instead (400), so a merchant learns it from the request that is
wrong and not from a ``failed`` payment later.  The table is Stripe's documented one
("Minimum and maximum charge amounts", https://docs.stripe.com/currencies), in minor
units of the charge currency.  The API docs (``docs/api/payments.md``) repeat it; change
both together (a unit test, ``test_the_documented_table_is_the_code_table``, fails when
they differ).

Verified on 2026-12-01 entry by entry against Stripe's table as quoted in the public record
(the docs page itself could not be read from here): mozilla/fxa's
``STRIPE_MINIMUM_CHARGE_AMOUNTS`` (which cites that section and agrees on all 23 currencies
it lists) and, for THB (฿10), other integrations quoting the same section.  No entry
differed, so none was changed.  Stripe's page is the authority: recheck it when adding a
currency.

Stripe's rule for every other currency is "the equivalent of 0.50 USD at the day's
rate": payorch has no exchange rates, so those are not checked here and an amount that is
too small still fails at the provider (``amount_too_small``, a permanent error).  The
limits also depend on the settlement currency of the account (a charge converted to
another settlement currency must clear that currency's minimum); this table is the
presentment rule, which is what a request can be checked against.
"""

from __future__ import annotations

from types import MappingProxyType

# currency -> minimum amount in minor units (JPY is zero-decimal: 50 means ¥50).
MINIMUM_CHARGE_AMOUNTS: MappingProxyType[str, int] = MappingProxyType(
    {
        "usd": 50,  # $0.50
        "aed": 200,  # 2.00 د.إ
        "aud": 50,  # $0.50
        "bgn": 100,  # лв1.00
        "brl": 50,  # R$0.50
        "cad": 50,  # $0.50
        "chf": 50,  # 0.50 Fr
        "czk": 1500,  # 15.00 Kč
        "dkk": 250,  # 2.50 kr.
        "eur": 50,  # €0.50
        "gbp": 30,  # £0.30
        "hkd": 400,  # $4.00
        "huf": 17500,  # 175.00 Ft
        "inr": 50,  # ₹0.50
        "jpy": 50,  # ¥50
        "mxn": 1000,  # $10
        "myr": 200,  # RM 2
        "nok": 300,  # 3.00 kr.
        "nzd": 50,  # $0.50
        "pln": 200,  # 2.00 zł
        "ron": 200,  # lei2.00
        "sek": 300,  # 3.00 kr.
        "sgd": 50,  # $0.50
        "thb": 1000,  # ฿10
    }
)


def minimum_charge_amount(currency: str) -> int | None:
    """The smallest amount Stripe charges in ``currency`` (lower-case), or None when
    Stripe's rule for it is an exchange-rate equivalent payorch cannot check."""
    return MINIMUM_CHARGE_AMOUNTS.get(currency.lower())
