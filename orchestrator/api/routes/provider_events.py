"""Providers' events in, with no API key: ``POST /v1/providers/stripe/webhooks`` (the
``Stripe-Signature`` header is the authentication) and
``POST /v1/providers/adyen/notifications/{ca_id}`` (each item's HMAC under the account's key
is).  See ``services.provider_events``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

from orchestrator.api.body import payload_too_large, read_capped
from orchestrator.api.deps import ContainerDep
from orchestrator.api.problems import Problem
from orchestrator.api.responses import problem
from orchestrator.providers.base import WebhookSignatureInvalid
from orchestrator.services.provider_events import (
    UnknownAccount,
    WebhookSecretMissing,
    receive_account_notifications,
    receive_provider_event,
)

router = APIRouter(prefix="/v1/providers", tags=["provider events"])

# Stripe's events are a few KiB; anything far larger is not one of them.
MAX_EVENT_BYTES = 256 * 1024


async def read_raw_body(request: Request) -> bytes:
    """The exact bytes Stripe signed (re-serialised JSON would not verify), bounded."""
    body = await read_capped(request, MAX_EVENT_BYTES)
    if body is None:
        raise payload_too_large(MAX_EVENT_BYTES, "An event")
    return body


class ReceivedOut(BaseModel):
    received: bool = Field(description="Always true: the event is stored (now or before).")
    id: str = Field(description="The provider's event id.")
    duplicate: bool = Field(description="True when this event id was already stored.")


@router.post(
    "/stripe/webhooks",
    summary="Receive a Stripe event (Stripe-Signature verified; stored once by id)",
    response_model=ReceivedOut,
    responses={
        400: problem("Missing or bad Stripe-Signature, stale timestamp, or not an event"),
        413: problem("The body is larger than any Stripe event"),
        503: problem("No webhook secret configured (PAYORCH_STRIPE_WEBHOOK_SECRET)"),
    },
    # The body is read raw (the signature covers its exact bytes), so FastAPI cannot infer
    # it: documented here as what Stripe sends, an Event object.
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "A Stripe Event, exactly as Stripe sent and signed it.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
def receive_stripe_event(
    container: ContainerDep,
    body: Annotated[bytes, Depends(read_raw_body)],
    stripe_signature: Annotated[str | None, Header(alias="Stripe-Signature")] = None,
) -> JSONResponse:
    secret = container.settings.stripe_webhook_secret
    try:
        received = receive_provider_event(
            body,
            stripe_signature,
            secret=secret.get_secret_value() if secret is not None else None,
            parse=container.parse_provider_event,
            uow=container.uow,
        )
    except WebhookSecretMissing as error:
        raise Problem(
            503,
            "service-unavailable",
            f"{error}: set PAYORCH_STRIPE_WEBHOOK_SECRET to the endpoint's whsec_ secret",
        ) from error
    except WebhookSignatureInvalid as error:
        raise Problem(
            400,
            "invalid-request",
            f"{error}. Stripe signs each event with the endpoint's secret "
            "(Stripe-Signature: t=…,v1=…); nothing was stored.",
        ) from error
    return JSONResponse(
        ReceivedOut(received=True, id=received.id, duplicate=received.duplicate).model_dump()
    )


@router.post(
    "/adyen/notifications/{connector_account_id}",
    summary="Receive Adyen notifications for one connector account (each item HMAC-verified)",
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": "Every item stored (now or before): Adyen's acknowledgement.",
            "content": {"text/plain": {"schema": {"type": "string", "example": "[accepted]"}}},
        },
        401: problem("An item's additionalData.hmacSignature is missing or wrong: nothing stored"),
        404: problem("No Adyen connector account has this id"),
        413: problem("The body is larger than any Adyen notification"),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "An Adyen notification request (notificationItems), as Adyen sent it.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
def receive_adyen_notifications(
    container: ContainerDep,
    connector_account_id: str,
    body: Annotated[bytes, Depends(read_raw_body)],
) -> PlainTextResponse:
    accounts = container.connector_account_service()
    try:
        receive_account_notifications(
            body,
            connector_account_id,
            provider="adyen",
            keys_of=lambda account_id: accounts.notification_keys(account_id, provider="adyen"),
            parse=container.parse_notifications["adyen"],
            uow=container.uow,
        )
    except UnknownAccount as error:
        raise Problem(
            404,
            "not-found",
            f"{error}: the notification URL ends with the Adyen account's ca_ id.",
        ) from error
    except WebhookSignatureInvalid as error:
        raise Problem(
            401,
            "invalid-signature",
            f"{error}. Adyen signs each item with the account's HMAC key "
            "(credentials.hmac_key); nothing was stored.",
        ) from error
    # Adyen counts any 2xx as accepted; "[accepted]" is its classic acknowledgement.
    return PlainTextResponse("[accepted]")
