"""Stripe's declines: whose problem each is (decision 0087).

Stripe answers a declined confirm with a ``card_error`` (HTTP 402): ``code`` (usually
``card_declined``; some declines carry their own code, such as ``expired_card``,
``incorrect_cvc`` or ``processing_error``) and, for ``card_declined``, a ``decline_code``.
The codes are Stripe's (https://docs.stripe.com/declines/codes and
https://docs.stripe.com/error-codes); the class of each is ours, from the "next steps"
Stripe gives for it:

* ``card``: the card or the customer is the problem, wherever the payment is tried (lost,
  stolen, expired, insufficient funds, incorrect number or CVC, authentication required,
  fraud, "do not honor", a generic decline).  Another provider would see the same card, so
  such a decline never fails over.  Stripe calls some of them retryable later
  (``insufficient_funds``, ``card_velocity_exceeded``): that is the merchant's retry, not a
  reason to try another provider now.
* ``provider``: the processing side failed and the card was not charged: Stripe's own
  ``processing_error`` ("an error occurred while processing the card"), the issuer not
  reachable (``issuer_not_available``), or told to try again (``try_again_later``,
  ``reenter_transaction``).  Another provider may succeed.

A code not in the tables is ``card``: failing over on a guess would put the same card
before a second provider while we do not know what the first one meant.
"""

from __future__ import annotations

from typing import Literal

DeclineClass = Literal["card", "provider"]
CARD: DeclineClass = "card"
PROVIDER: DeclineClass = "provider"

# ``decline_code`` (with ``code: card_declined``) -> class.  Stripe's published list.
DECLINE_CODES: dict[str, DeclineClass] = {
    "approve_with_id": CARD,
    "authentication_required": CARD,
    "call_issuer": CARD,
    "card_not_supported": CARD,
    "card_velocity_exceeded": CARD,
    "currency_not_supported": CARD,
    "do_not_honor": CARD,
    "do_not_try_again": CARD,
    "duplicate_transaction": CARD,
    "expired_card": CARD,
    "fraudulent": CARD,
    "generic_decline": CARD,
    "incorrect_cvc": CARD,
    "incorrect_number": CARD,
    "incorrect_pin": CARD,
    "incorrect_zip": CARD,
    "insufficient_funds": CARD,
    "invalid_account": CARD,
    "invalid_amount": CARD,
    "invalid_cvc": CARD,
    "invalid_expiry_month": CARD,
    "invalid_expiry_year": CARD,
    "invalid_number": CARD,
    "invalid_pin": CARD,
    "issuer_not_available": PROVIDER,
    "lost_card": CARD,
    "merchant_blacklist": CARD,
    "new_account_information_available": CARD,
    "no_action_taken": CARD,
    "not_permitted": CARD,
    "offline_pin_required": CARD,
    "online_or_offline_pin_required": CARD,
    "pickup_card": CARD,
    "pin_try_exceeded": CARD,
    "processing_error": PROVIDER,
    "reenter_transaction": PROVIDER,
    "restricted_card": CARD,
    "revocation_of_all_authorizations": CARD,
    "revocation_of_authorization": CARD,
    "security_violation": CARD,
    "service_not_allowed": CARD,
    "stolen_card": CARD,
    "stop_payment_order": CARD,
    "testmode_decline": CARD,
    "transaction_not_allowed": CARD,
    "try_again_later": PROVIDER,
    "withdrawal_count_limit_exceeded": CARD,
}

# ``code`` of a card error that carries its own code (no ``card_declined``) -> class.
ERROR_CODES: dict[str, DeclineClass] = {
    "authentication_required": CARD,
    "card_decline_rate_limit_exceeded": CARD,
    "expired_card": CARD,
    "incorrect_cvc": CARD,
    "incorrect_number": CARD,
    "incorrect_zip": CARD,
    "invalid_cvc": CARD,
    "invalid_expiry_month": CARD,
    "invalid_expiry_year": CARD,
    "invalid_number": CARD,
    "payment_intent_authentication_failure": CARD,
    "processing_error": PROVIDER,
}


def decline_class(code: str | None, decline_code: str | None) -> DeclineClass:
    """The class of a Stripe decline: its ``decline_code`` when Stripe gave one, else its
    ``code``; unknown is ``card`` (module docstring)."""
    if decline_code is not None and decline_code in DECLINE_CODES:
        return DECLINE_CODES[decline_code]
    if code is not None and code in ERROR_CODES:
        return ERROR_CODES[code]
    return CARD
