"""Input schemas of the capture and cancel API (both answer with the payment)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from orchestrator.api.schemas import _integral_number
from orchestrator.domain.currencies import MAX_AMOUNT

# Stripe's cancellation reasons a merchant may give (anything else it refuses).
CancellationReason = Literal["duplicate", "fraudulent", "requested_by_customer", "abandoned"]


class CaptureCreate(BaseModel):
    """``POST /v1/payments/{id}/capture`` body (optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    amount: (
        Annotated[
            int,
            Field(
                gt=0,
                le=MAX_AMOUNT,
                description="Minor units to capture; default: all of `amount_capturable`. "
                "The rest of the authorisation is released.",
            ),
            BeforeValidator(_integral_number),
        ]
        | None
    ) = None


class CancelCreate(BaseModel):
    """``POST /v1/payments/{id}/cancel`` body (optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: CancellationReason | None = None


class OperationFailureOut(BaseModel):
    code: str = Field(description="The provider's error code, or payorch's own")
    message: str


class OperationOut(BaseModel):
    """``GET /v1/captures/{id}``, ``GET /v1/cancels/{id}``, and the object of the
    ``payment.capture_failed`` / ``payment.cancel_failed`` events."""

    id: str
    object: Literal["capture", "cancel"]
    payment_id: str
    amount: int | None = Field(
        description="A capture: what it takes; a cancel: the authorisation it releases (if any)"
    )
    currency: str
    reason: str | None
    status: Literal["processing", "succeeded", "failed", "needs_attention"]
    failure: OperationFailureOut | None = Field(
        description="Why a failed operation failed (the provider's code and message)"
    )
    created_at: str
    completed_at: str | None
