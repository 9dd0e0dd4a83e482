"""Adyen's refusal reasons: our failure code for each, and whose problem it is.

Adyen answers a refused payment with HTTP 200, ``resultCode`` ``Refused`` (or ``Error``),
``refusalReason`` and ``refusalReasonCode``.  Codes and reasons are Adyen's
(https://docs.adyen.com/development-resources/refusal-reasons); the class of each is ours,
from the same page and Adyen's advice on retries:

* ``card``: the card or the shopper is the problem, wherever the payment is tried (stolen,
  blocked, expired, not enough balance, authentication failed, fraud).  Another provider
  would see the same card, so a decline of this class never fails over.  "Soft" codes in
  this class (not enough balance, withdrawal limits) may succeed later at the merchant's
  initiative; that does not make them a reason to try another provider now.
* ``provider``: the processing side failed (acquirer error, issuer unavailable, not
  submitted, a 3-D Secure server error).  The card was not charged, and another provider
  may succeed.

A code we do not know is ``card``: trying another provider on a guess could put a second
authorisation on a card the first provider is still processing.  ``resultCode: Error`` is
``provider`` whatever code comes with it: Adyen answered that it could not process the
request (design.md, "Attempts and failover"), an answer, so nothing of it is pending.

Hazard: raw acquirer codes (``additionalData.refusalReasonRaw``) change without notice and
are never read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DeclineClass = Literal["card", "provider"]


@dataclass(frozen=True)
class Refusal:
    code: str  # our failure code, snake_case (``failure.code``)
    reason: str  # Adyen's ``refusalReason``, as Adyen spells it
    kind: DeclineClass


def _row(code: str, reason: str, kind: DeclineClass) -> Refusal:
    return Refusal(code=code, reason=reason, kind=kind)


# refusalReasonCode -> what it means.  Codes 17-19, 33-37, 43-45 are point-of-sale (PIN,
# chip, contactless) and are kept so a terminal payment never reads as an unknown code.
REFUSALS: dict[str, Refusal] = {
    "2": _row("refused", "Refused", "card"),
    "3": _row("referral", "Referral", "card"),
    "4": _row("acquirer_error", "Acquirer Error", "provider"),
    "5": _row("blocked_card", "Blocked Card", "card"),
    "6": _row("expired_card", "Expired Card", "card"),
    "7": _row("invalid_amount", "Invalid Amount", "card"),
    "8": _row("invalid_card_number", "Invalid Card Number", "card"),
    "9": _row("issuer_unavailable", "Issuer Unavailable", "provider"),
    "10": _row("not_supported", "Not supported", "card"),
    "11": _row("3d_not_authenticated", "3D Not Authenticated", "card"),
    "12": _row("not_enough_balance", "Not enough balance", "card"),
    "14": _row("acquirer_fraud", "Acquirer Fraud", "card"),
    "15": _row("cancelled", "Cancelled", "card"),
    "16": _row("shopper_cancelled", "Shopper Cancelled", "card"),
    "17": _row("invalid_pin", "Invalid Pin", "card"),
    "18": _row("pin_tries_exceeded", "Pin tries exceeded", "card"),
    "19": _row("pin_validation_not_possible", "Pin validation not possible", "provider"),
    "20": _row("fraud", "FRAUD", "card"),
    "21": _row("not_submitted", "Not Submitted", "provider"),
    "22": _row("fraud_cancelled", "FRAUD-CANCELLED", "card"),
    "23": _row("transaction_not_permitted", "Transaction Not Permitted", "card"),
    "24": _row("cvc_declined", "CVC Declined", "card"),
    "25": _row("restricted_card", "Restricted Card", "card"),
    "26": _row("revocation_of_auth", "Revocation Of Auth", "card"),
    "27": _row("declined_non_generic", "Declined Non Generic", "card"),
    "28": _row("withdrawal_amount_exceeded", "Withdrawal amount exceeded", "card"),
    "29": _row("withdrawal_count_exceeded", "Withdrawal count exceeded", "card"),
    "31": _row("issuer_suspected_fraud", "Issuer Suspected Fraud", "card"),
    "32": _row("avs_declined", "AVS Declined", "card"),
    "33": _row("card_requires_online_pin", "Card requires online pin", "card"),
    "34": _row("no_checking_account", "No checking account available on Card", "card"),
    "35": _row("no_savings_account", "No savings account available on Card", "card"),
    "36": _row("mobile_pin_required", "Mobile pin required", "card"),
    "37": _row("contactless_fallback", "Contactless fallback", "card"),
    "38": _row("authentication_required", "Authentication required", "card"),
    "39": _row("rreq_not_received", "RReq not received from DS", "provider"),
    "40": _row("aid_in_penalty_box", "Current AID is in Penalty Box", "provider"),
    "41": _row("cvm_required_restart_payment", "CVM Required Restart Payment", "card"),
    "42": _row("3ds_authentication_error", "3DS Authentication Error", "provider"),
    "43": _row("online_pin_required", "Online PIN required", "card"),
    "44": _row("try_another_interface", "Try another interface", "card"),
    "45": _row("chip_downgrade_mode", "Chip downgrade mode", "card"),
    "46": _row(
        "blocked_to_prevent_excessive_retry_fees",
        "Transaction blocked by Adyen to prevent excessive retry fees",
        "card",
    ),
}


def snake_case(reason: str) -> str:
    """``Not enough balance`` -> ``not_enough_balance``: a reason Adyen sent that the table
    does not hold still reads as a code."""
    words = "".join(c if c.isascii() and c.isalnum() else " " for c in reason.lower()).split()
    return "_".join(words) or "refused"


def refusal(code: str | None, reason: str | None, *, result_code: str) -> Refusal:
    """What a ``Refused`` or ``Error`` answer means (see the module docstring for the
    default class of an unknown code)."""
    known = REFUSALS.get(code or "")
    if known is not None:
        if result_code == "Error" and known.kind != "provider":
            return Refusal(code=known.code, reason=known.reason, kind="provider")
        return known
    kind: DeclineClass = "provider" if result_code == "Error" else "card"
    default = "processing_error" if result_code == "Error" else "refused"
    text = reason or default
    return Refusal(code=snake_case(text) if reason else default, reason=text, kind=kind)
