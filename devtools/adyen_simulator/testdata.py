"""Adyen's test data: card numbers, the ``holderName`` values that choose an outcome, the
refusal reasons with their codes (``../shared/adyen/README.md`` §5 and §8, from
docs.adyen.com's testing pages), and the simulator's own stored cards that decline.

Card numbers arrive as Adyen's test "encrypted" fields (``"encryptedCardNumber":
"test_4111111111111111"``) or raw (``"number": "4111111111111111"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Authorised without 3-D Secure.
AUTHORISED_CARDS = frozenset({"4111111111111111", "5555555555554444"})
# 3-D Secure 2 enrolled: ``ChallengeShopper`` first, then ``/payments/details``.
THREEDS2_CARDS = frozenset(
    {"5454545454545454", "4917610000000000", "4035501428146300", "371449635398431"}
)


def challenges_stored(stored_id: object, *, shopper_interaction: object) -> bool:
    """Whether a stored card asks for 3-D Secure: ours are named by their test number, so
    a stored 3DS2-enrolled card (``storedPaymentMethodId: "4917610000000000"``) challenges a
    payment the shopper is present for, and not a merchant-initiated one (``ContAuth``)."""
    return stored_id in THREEDS2_CARDS and shopper_interaction != "ContAuth"


# refusalReasonCode -> refusalReason (Adyen's table).
REFUSAL_REASONS: dict[str, str] = {
    "2": "Refused",
    "3": "Referral",
    "4": "Acquirer Error",
    "5": "Blocked Card",
    "6": "Expired Card",
    "7": "Invalid Amount",
    "8": "Invalid Card Number",
    "9": "Issuer Unavailable",
    "10": "Not supported",
    "11": "3D Not Authenticated",
    "12": "Not enough balance",
    "14": "Acquirer Fraud",
    "15": "Cancelled",
    "16": "Shopper Cancelled",
    "20": "FRAUD",
    "22": "FRAUD-CANCELLED",
    "23": "Transaction Not Permitted",
    "24": "CVC Declined",
    "25": "Restricted Card",
    "26": "Revocation Of Auth",
    "27": "Declined Non Generic",
    "31": "Issuer Suspected Fraud",
    "38": "Authentication required",
    "46": "Transaction blocked by Adyen to prevent excessive retry fees",
}

ResultCode = Literal["Authorised", "Refused", "Error", "Cancelled", "Pending"]


@dataclass(frozen=True)
class Outcome:
    result_code: ResultCode
    refusal_code: str | None = None

    @property
    def refusal_reason(self) -> str | None:
        return REFUSAL_REASONS.get(self.refusal_code) if self.refusal_code else None


# paymentMethod.holderName -> what the test platform answers.
HOLDER_NAMES: dict[str, Outcome] = {
    "DECLINED": Outcome("Refused", "2"),
    "REFERRAL": Outcome("Refused", "3"),
    "ACQUIRER_ERROR": Outcome("Refused", "4"),
    "BLOCKED_CARD": Outcome("Refused", "5"),
    "BLOCK_CARD": Outcome("Refused", "5"),
    "CARD_EXPIRED": Outcome("Refused", "6"),
    "INVALID_AMOUNT": Outcome("Refused", "7"),
    "INVALID_CARD": Outcome("Refused", "8"),
    "ISSUER_UNAVAILABLE": Outcome("Refused", "9"),
    "NOT_SUPPORTED": Outcome("Refused", "10"),
    "NOT_3D_AUTHENTICATED": Outcome("Refused", "11"),
    "NOT_ENOUGH_BALANCE": Outcome("Refused", "12"),
    "ACQUIRER_FRAUD": Outcome("Refused", "14"),
    "CANCELLED": Outcome("Cancelled", "15"),
    "SHOPPER_CANCELLED": Outcome("Cancelled", "16"),
    "FRAUD": Outcome("Refused", "20"),
    "TRANSACTION_NOT_PERMITTED": Outcome("Refused", "23"),
    "CVC_DECLINED": Outcome("Refused", "24"),
    "RESTRICTED_CARD": Outcome("Refused", "25"),
    "REVOCATION_OF_AUTH": Outcome("Refused", "26"),
    "DECLINED_NON_GENERIC": Outcome("Refused", "27"),
    "ISSUER_SUSPECTED_FRAUD": Outcome("Refused", "31"),
    "AUTHENTICATION_REQUIRED": Outcome("Refused", "38"),
    "ERROR": Outcome("Error", "4"),
    "PENDING": Outcome("Pending"),
}
# Not an authorisation outcome: the payment is authorised, a later modification fails.
CAPTURE_FAILED_HOLDER = "capture failed"
REFUND_FAILED_HOLDER = "refund failed"
AUTHORISED = Outcome("Authorised")

# The simulator's own stored cards (``storedPaymentMethodId``): a stored card answers as the
# card it was stored from would, and payorch's API sends a saved method as a string only, so
# these are how a test declines a payment through an Adyen connector account (as
# ``pm_card_chargeDeclined`` does at the Stripe simulator).  Any other id authorises.
STORED_METHOD_OUTCOMES: dict[str, Outcome] = {
    "8415718415172201": HOLDER_NAMES["DECLINED"],
    "8415718415172205": HOLDER_NAMES["BLOCKED_CARD"],
    "8415718415172206": HOLDER_NAMES["CARD_EXPIRED"],
    "8415718415172212": HOLDER_NAMES["NOT_ENOUGH_BALANCE"],
}


def card_number(payment_method: dict[str, object]) -> str | None:
    """The card number of a ``scheme`` payment method, without Adyen's ``test_`` prefix."""
    raw = payment_method.get("encryptedCardNumber", payment_method.get("number"))
    if not isinstance(raw, str):
        return None
    return raw.removeprefix("test_").replace(" ", "")


def luhn_valid(number: str) -> bool:
    if not number.isdigit() or not 12 <= len(number) <= 19:
        return False
    total = 0
    for position, char in enumerate(reversed(number)):
        digit = int(char)
        if position % 2 == 1:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def brand(number: str | None) -> str:
    """Adyen's ``paymentMethod`` name for a card (``visa``, ``mc``, ``amex``)."""
    if number is None:
        return "scheme"
    if number.startswith("4"):
        return "visa"
    if number.startswith(("34", "37")):
        return "amex"
    if number.startswith(("5", "2")):
        return "mc"
    return "scheme"


def outcome_for(
    holder_name: str | None, requested_code: str | None, stored_id: str | None = None
) -> Outcome:
    """The authorisation outcome for a card that needs no 3-D Secure."""
    if requested_code is not None and requested_code in REFUSAL_REASONS:
        return Outcome("Refused", requested_code)
    if holder_name is not None and holder_name in HOLDER_NAMES:
        return HOLDER_NAMES[holder_name]
    if stored_id is not None and stored_id in STORED_METHOD_OUTCOMES:
        return STORED_METHOD_OUTCOMES[stored_id]
    return AUTHORISED
