"""Stripe's test PaymentMethod tokens and what each does on confirm and on refund.

Like Stripe, the simulator turns a token such as ``pm_card_visa`` into a fresh PaymentMethod
id (``pm_1…``) when an intent is created with it; the intent carries that id, not the token.

    authentication  None         no 3-D Secure: confirm succeeds (or declines)
                    "required"   on-session confirm answers requires_action; off_session=true
                                 declines with authentication_required (Stripe's 3184/3220)
                    "on_setup"   on-session requires_action; off-session succeeds, as Stripe's
                                 3155 card does once set up for future use
    refund          "succeeds"   a refund succeeds at once (every card on Stripe)
                    "fails"      the refund answers succeeded, then fails later
                                 (``charge.refund.updated``), as Stripe's refundFail card
                    "pending"    the refund answers pending, then succeeds later
    settles         None         confirm settles at once
                    "succeeded" / "failed"   confirm answers processing and settles later

The ``pm_card_sim_*`` tokens are the simulator's own (Stripe has no card that answers
``processing`` or keeps a refund pending); every other token is Stripe's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Authentication = Literal["required", "on_setup"]
RefundBehaviour = Literal["succeeds", "fails", "pending"]
Settlement = Literal["succeeded", "failed"]


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
    authentication: Authentication | None = None
    refund: RefundBehaviour = "succeeds"
    settles: Settlement | None = None

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
    # 3-D Secure (SCA): the customer must authenticate (see the module docstring).
    "pm_card_threeDSecure2Required": SimCard("visa", "3220", authentication="required"),
    "pm_card_threeDSecureRequired": SimCard("visa", "3063", authentication="required"),
    "pm_card_authenticationRequired": SimCard("visa", "3184", authentication="required"),
    "pm_card_authenticationRequiredOnSetup": SimCard("visa", "3155", authentication="on_setup"),
    "pm_card_authenticationRequiredChargeDeclinedInsufficientFunds": SimCard(
        "visa",
        "3178",
        authentication="required",
        decline=_declined("insufficient_funds", "Your card has insufficient funds."),
    ),
    # Supports 3-D Secure but does not require it: succeeds without authentication.
    "pm_card_threeDSecureOptional": SimCard("visa", "3055"),
    # Refunds that do not simply succeed.
    "pm_card_refundFail": SimCard("visa", "5126", refund="fails"),
    "pm_card_sim_refundPending": SimCard("visa", "7726", refund="pending"),
    # Asynchronous outcomes (simulator only): confirm answers processing, settles later.
    "pm_card_sim_processingSucceeds": SimCard("visa", "1001", settles="succeeded"),
    "pm_card_sim_processingFails": SimCard(
        "visa", "1019", settles="failed", decline=_declined("generic_decline")
    ),
}
