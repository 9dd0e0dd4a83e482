"""Input schemas of the capture and cancel API (both answer with the payment)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from orchestrator.api.schemas import _integral_number
from orchestrator.domain.currencies import MAX_AMOUNT


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

    # Stripe's cancellation reasons a merchant may give (anything else it refuses).
    reason: Literal["duplicate", "fraudulent", "requested_by_customer", "abandoned"] | None = None
