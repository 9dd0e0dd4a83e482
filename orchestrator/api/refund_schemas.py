"""Input and output schemas of the refunds API."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from orchestrator.api.schemas import (
    MAX_METADATA_KEY_LENGTH,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_LENGTH,
    _integral_number,
    _metadata,
    _metadata_schema,
)
from orchestrator.domain.currencies import MAX_AMOUNT
from orchestrator.services.refunds import RefundRequest


class RefundCreate(BaseModel):
    """``POST /v1/payments/{id}/refunds`` body (all optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: (
        Annotated[
            int,
            Field(gt=0, le=MAX_AMOUNT, description="Minor units; default: all that is left."),
            BeforeValidator(_integral_number),
        ]
        | None
    ) = None
    # Stripe's refund reasons (anything else it refuses).
    reason: Literal["duplicate", "fraudulent", "requested_by_customer"] | None = None
    metadata: Annotated[
        dict[
            Annotated[str, StringConstraints(max_length=MAX_METADATA_KEY_LENGTH)],
            Annotated[str, StringConstraints(max_length=MAX_METADATA_VALUE_LENGTH)],
        ],
        AfterValidator(_metadata),
        Field(
            max_length=MAX_METADATA_KEYS,
            description=f"Up to {MAX_METADATA_KEYS} string pairs, passed to the provider.",
            json_schema_extra=_metadata_schema,
        ),
    ] = Field(default_factory=dict)

    def to_domain(self) -> RefundRequest:
        return RefundRequest(amount=self.amount, reason=self.reason, metadata=dict(self.metadata))


class RefundFailureOut(BaseModel):
    code: str
    message: str


class RefundOut(BaseModel):
    id: str
    object: Literal["refund"]
    payment_id: str
    amount: int
    currency: str
    reason: str | None
    metadata: dict[str, str]
    status: Literal["processing", "succeeded", "failed", "needs_attention"]
    failure: RefundFailureOut | None
    provider_refund_id: str | None
    origin: Literal["payorch", "provider"]
    created_at: str
    completed_at: str | None


class RefundList(BaseModel):
    data: list[RefundOut]
    has_more: bool
