"""Input schema of ``POST /v1/payments/{id}/details``: the customer's authentication result,
in the shape of Adyen's ``PaymentDetailsRequest`` (Checkout v71), which payorch forwards as
it is (decision 0073)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Adyen's ``PaymentCompletionDetails`` fields (Checkout v71): what a 3-D Secure component or
# a redirect hands the merchant's front end.  A key outside them would be refused by Adyen
# after we committed to its forward; refused here instead, naming it.
DETAIL_KEYS = frozenset(
    {
        "MD",
        "PaReq",
        "PaRes",
        "authorization_token",
        "billingToken",
        "cupsecureplus.smscode",
        "facilitatorAccessToken",
        "oneTimePasscode",
        "orderID",
        "payerID",
        "payload",
        "paymentID",
        "paymentStatus",
        "redirectResult",
        "resultCode",
        "returnUrlQueryString",
        "threeDSResult",
        "threeds2.challengeResult",
        "threeds2.fingerprint",
        "vaultToken",
    }
)
# Adyen's own longest bound on these values is 100 000 (a device fingerprint); the 64 KiB
# body cap (``api.body``) is the tighter limit, and this one keeps a single value sane.
MAX_DETAIL_LENGTH = 50_000
MAX_PAYMENT_DATA_LENGTH = 10_000

DetailValue = Annotated[str, Field(min_length=1, max_length=MAX_DETAIL_LENGTH)]


class PaymentDetailsCreate(BaseModel):
    """``POST /v1/payments/{id}/details`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    details: dict[str, DetailValue] = Field(
        min_length=1,
        max_length=len(DETAIL_KEYS),
        description="What the shopper's authentication produced, exactly as Adyen's "
        'component or redirect gave it: e.g. `{"threeDSResult": "…"}` or '
        '`{"redirectResult": "…"}`. Keys are Adyen\'s `PaymentCompletionDetails` fields.',
    )
    # Adyen's field name, forwarded as is.
    paymentData: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PAYMENT_DATA_LENGTH,
        description="The action's `paymentData`, when the integration uses it.",
    )

    @field_validator("details")
    @classmethod
    def _known_keys(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - DETAIL_KEYS)
        if unknown:
            raise ValueError(
                f"unknown key {', '.join(unknown)}: Adyen's details take "
                f"{', '.join(sorted(DETAIL_KEYS))}"
            )
        return value

    def forwarded(self) -> dict[str, object]:
        """The body forwarded to the provider (and stored to replay it byte for byte)."""
        return self.model_dump(exclude_none=True)
