"""Input and output schemas of the HTTP API (separate, as they evolve separately)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.domain.currencies import MAX_AMOUNT, SUPPORTED_CURRENCIES
from orchestrator.domain.model import PaymentRequest

# C0/C1 control characters other than tab and newlines: they break logs, terminals and
# downstream systems; NUL cannot even be stored in PostgreSQL text.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_IDENTIFIER_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

MAX_METADATA_KEYS = 50  # Stripe's limits, so nothing we accept is refused downstream
MAX_METADATA_KEY_LENGTH = 40
MAX_METADATA_VALUE_LENGTH = 500


def _clean_text(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


def _clean_identifier(value: str) -> str:
    if _IDENTIFIER_CONTROL.search(value):
        raise ValueError("must not contain control characters or line breaks")
    return _clean_text(value)


def _currency(value: str) -> str:
    code = value.lower()
    if code not in SUPPORTED_CURRENCIES:
        raise ValueError(
            "must be a three-letter ISO 4217 currency code that Stripe supports (e.g. 'usd')"
        )
    return code


def _metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"may have at most {MAX_METADATA_KEYS} keys")
    for key, item in value.items():
        if not key or len(key) > MAX_METADATA_KEY_LENGTH:
            raise ValueError(f"keys must be 1-{MAX_METADATA_KEY_LENGTH} characters")
        if "[" in key or "]" in key:
            raise ValueError("keys must not contain square brackets")
        _clean_identifier(key)
        if len(item) > MAX_METADATA_VALUE_LENGTH:
            raise ValueError(f"values must be at most {MAX_METADATA_VALUE_LENGTH} characters")
        _clean_text(item)
    return value


Text = Annotated[str, AfterValidator(_clean_text)]
Identifier = Annotated[str, AfterValidator(_clean_identifier)]


class PaymentCreate(BaseModel):
    """``POST /v1/payments`` body.  Strict: ``"100"`` is not an amount, ``true`` is not 1."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: Annotated[int, Field(gt=0, le=MAX_AMOUNT, description="Minor units (cents).")]
    currency: Annotated[
        str,
        StringConstraints(min_length=3, max_length=3),
        AfterValidator(_currency),
        Field(description="ISO 4217 code, any case; stored lower-case.", examples=["usd"]),
    ]
    payment_method: Annotated[
        str,
        StringConstraints(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_]+$"),
        Field(description="Provider payment method token.", examples=["pm_card_visa"]),
    ]
    customer_reference: Annotated[Identifier, StringConstraints(max_length=255)] | None = None
    description: Annotated[Text, StringConstraints(max_length=1000)] | None = None
    metadata: Annotated[
        dict[
            Annotated[str, StringConstraints(max_length=MAX_METADATA_KEY_LENGTH)],
            Annotated[str, StringConstraints(max_length=MAX_METADATA_VALUE_LENGTH)],
        ],
        AfterValidator(_metadata),
        Field(
            max_length=MAX_METADATA_KEYS,
            description=f"Up to {MAX_METADATA_KEYS} string pairs, passed to the provider.",
        ),
    ] = Field(default_factory=dict)

    def to_domain(self) -> PaymentRequest:
        return PaymentRequest(
            amount=self.amount,
            currency=self.currency,
            payment_method=self.payment_method,
            customer_reference=self.customer_reference,
            description=self.description,
            metadata=dict(self.metadata),
        )


class FailureOut(BaseModel):
    code: str
    decline_code: str | None
    message: str


class PaymentOut(BaseModel):
    id: str
    object: Literal["payment"]
    status: Literal["processing", "succeeded", "failed", "needs_attention"]
    amount: int
    currency: str
    payment_method: str
    customer_reference: str | None
    description: str | None
    metadata: dict[str, str]
    idempotency_key: str | None = Field(
        description="Null once the retention window purged the key (the payment stays)."
    )
    provider: str
    provider_payment_id: str | None
    failure: FailureOut | None
    attempts: int
    created_at: str
    updated_at: str
    completed_at: str | None


class PaymentList(BaseModel):
    data: list[PaymentOut]


class FieldError(BaseModel):
    field: str
    message: str


class ProblemOut(BaseModel):
    """RFC 9457 problem document (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None
