"""Stripe's test PaymentMethod tokens and what each does on confirm.

Like Stripe, the simulator turns a token such as ``pm_card_visa`` into a fresh PaymentMethod
id (``pm_1…``) when an intent is created with it; the intent carries that id, not the token.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CardDecline:
    code: str
    decline_code: str
    message: str


@dataclass(frozen=True)
class SimCard:
    brand: str
    last4: str
    funding: str = "credit"
    country: str = "US"
    decline: CardDecline | None = None

    @property
    def succeeds(self) -> bool:
        return self.decline is None


_DECLINED = "Your card was declined."


def _declined(decline_code: str, message: str = _DECLINED) -> CardDecline:
    return CardDecline("card_declined", decline_code, message)


TEST_CARDS: dict[str, SimCard] = {
    # Successful payments.
    "pm_card_visa": SimCard("visa", "4242"),
    "pm_card_visa_debit": SimCard("visa", "5556", funding="debit"),
    "pm_card_mastercard": SimCard("mastercard", "4444"),
    "pm_card_mastercard_debit": SimCard("mastercard", "8210", funding="debit"),
    "pm_card_mastercard_prepaid": SimCard("mastercard", "5100", funding="prepaid"),
    "pm_card_amex": SimCard("amex", "8431"),
    "pm_card_discover": SimCard("discover", "1117"),
    "pm_card_diners": SimCard("diners", "0004"),
    "pm_card_jcb": SimCard("jcb", "0505", country="JP"),
    "pm_card_unionpay": SimCard("unionpay", "0005", country="CN"),
    # Declines: 402 card_error on confirm; the intent returns to requires_payment_method.
    "pm_card_visa_chargeDeclined": SimCard("visa", "0002", decline=_declined("generic_decline")),
    "pm_card_chargeDeclined": SimCard("visa", "0002", decline=_declined("generic_decline")),
    "pm_card_chargeDeclinedInsufficientFunds": SimCard(
        "visa", "9995", decline=_declined("insufficient_funds", "Your card has insufficient funds.")
    ),
    "pm_card_chargeDeclinedLostCard": SimCard("visa", "9987", decline=_declined("lost_card")),
    "pm_card_chargeDeclinedStolenCard": SimCard("visa", "9979", decline=_declined("stolen_card")),
    "pm_card_chargeDeclinedFraudulent": SimCard("visa", "0019", decline=_declined("fraudulent")),
    "pm_card_chargeDeclinedVelocityLimitExceeded": SimCard(
        "visa",
        "6975",
        decline=_declined(
            "card_velocity_exceeded",
            "Your card was declined for making repeated attempts too frequently or exceeding "
            "its amount limit.",
        ),
    ),
    # These carry their own error code instead of card_declined, as on Stripe.
    "pm_card_chargeDeclinedExpiredCard": SimCard(
        "visa",
        "0069",
        decline=CardDecline("expired_card", "expired_card", "Your card has expired."),
    ),
    "pm_card_chargeDeclinedIncorrectCvc": SimCard(
        "visa",
        "0127",
        decline=CardDecline(
            "incorrect_cvc", "incorrect_cvc", "Your card's security code is incorrect."
        ),
    ),
    "pm_card_chargeDeclinedProcessingError": SimCard(
        "visa",
        "0119",
        decline=CardDecline(
            "processing_error",
            "processing_error",
            "An error occurred while processing your card. Try again in a little bit.",
        ),
    ),
}
