"""``POST /v1/payments/{id}/details``: the customer's authentication result, for a provider
that completes 3-D Secure through payorch (Adyen's ``/payments/details``).

The request commits the result and wakes the payment (``services.action_results``); the
worker forwards it.  It answers like a capture or cancel: ``202`` with the payment and
``Location`` to poll (``200`` with ``Idempotent-Replayed: true`` for a retry of the result
already stored).  No provider is called on the request's thread."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, MerchantClient, OptionalJsonBody
from orchestrator.api.details_schemas import PaymentDetailsCreate
from orchestrator.api.operation_requests import PAYMENT_NOT_FOUND
from orchestrator.api.problems import Problem
from orchestrator.api.responses import (
    AUTH_ERRORS,
    LOCATION,
    REPLAYED,
    RETRY_AFTER,
    current_payment_bytes,
    json_bytes_response,
    payment,
    payment_headers,
    problem,
)
from orchestrator.bootstrap import Container
from orchestrator.domain.ids import is_payment_id
from orchestrator.providers.base import PaymentProvider, ProviderError
from orchestrator.services.action_results import (
    ActionResultInProgress,
    ActionResultNotAccepted,
    PaymentNotAwaitingAction,
    PaymentNotFound,
    accept_action_result,
)

router = APIRouter(tags=["payments"])

_OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": PaymentDetailsCreate.model_json_schema()}},
    }
}


@router.post(
    "/v1/payments/{payment_id}/details",
    status_code=202,
    summary="Send the customer's authentication result (3-D Secure at Adyen) to be forwarded",
    description=(
        "For a `requires_action` payment whose `next_action` is an Adyen action "
        '(`{"type": "adyen_action", "adyen_action": {…}}`): once the shopper authenticated '
        "(Adyen's 3-D Secure component or redirect), send what it produced, in Adyen's "
        "`/payments/details` shape. payorch stores it, forwards it to Adyen with a key of "
        "its own, and the payment settles as an authorisation does: `succeeded` (or "
        "`requires_capture`), `failed` with the refusal, or `requires_action` again with a "
        "new action. Sending the same body again is a retry: nothing new is forwarded."
    ),
    openapi_extra=_OPENAPI_BODY,
    responses={
        200: payment(
            "A retry of the result already stored: the payment as it is now",
            {"Location": LOCATION, "Idempotent-Replayed": REPLAYED},
        ),
        202: payment(
            "Stored and being forwarded: poll the payment's URL for its outcome",
            {"Location": LOCATION, "Retry-After": RETRY_AFTER},
        ),
        400: problem("The body is not Adyen's details shape (the problem names the field)"),
        404: problem("No such payment for this client"),
        409: problem(
            "payment-not-awaiting-action: the payment is not requires_action (its status is "
            "named); action-result-not-accepted: its provider takes no forwarded result (the "
            "customer authenticates with the provider, e.g. Stripe's client_secret); "
            "action-result-in-progress: another result is still being forwarded. Nothing "
            "was stored."
        ),
        413: problem("Body larger than 64 KiB"),
        415: problem("A body that is not application/json"),
        **AUTH_ERRORS,
    },
)
def submit_payment_details(
    container: ContainerDep,
    client: MerchantClient,
    payment_id: str,
    body: OptionalJsonBody,
) -> Response:
    if not is_payment_id(payment_id):
        raise Problem(404, "not-found", PAYMENT_NOT_FOUND)
    if body is None:
        raise Problem(
            400,
            "invalid-request",
            "Send the shopper's result as {\"details\": {…}}: what Adyen's component or "
            "redirect produced.",
        )
    payload = parse_model(PaymentDetailsCreate, body)
    try:
        accepted = accept_action_result(
            container.uow,
            container.publisher,
            client_id=client.id,
            payment_id=payment_id,
            body=payload.forwarded(),
            provider_for=lambda account_id: _provider_for(container, account_id),
        )
    except PaymentNotFound:
        raise Problem(404, "not-found", PAYMENT_NOT_FOUND) from None
    except ActionResultNotAccepted as refused:
        raise Problem(
            409,
            "action-result-not-accepted",
            f"Payment {payment_id} runs on {refused.provider}, whose customer "
            "authenticates with the provider directly (use the payment's client_secret and "
            "the provider's own SDK); there is no result to send payorch. Nothing was stored.",
            provider=refused.provider,
        ) from None
    except PaymentNotAwaitingAction as refused:
        raise Problem(
            409,
            "payment-not-awaiting-action",
            f"Payment {payment_id} is {refused.shown_status}; only a requires_action payment "
            "takes the customer's authentication result. Nothing was stored.",
            payment_status=refused.shown_status,
        ) from None
    except ActionResultInProgress:
        raise Problem(
            409,
            "action-result-in-progress",
            f"Another result for payment {payment_id} is still being forwarded; poll the "
            "payment and send a new result only if it asks again (requires_action with a new "
            "next_action). Nothing was stored.",
        ) from None
    record = accepted.payment
    headers = payment_headers(record, poll_interval=container.settings.poll_interval_seconds)
    if accepted.replayed:
        headers = {**headers, "Idempotent-Replayed": "true"}
    return json_bytes_response(
        current_payment_bytes(record),
        status_code=200 if accepted.replayed else 202,
        headers=headers,
    )


def _provider_for(container: Container, connector_account_id: str | None) -> PaymentProvider:
    """The provider of the payment's account: its adapter says whether it takes a result."""
    try:
        return container.provider_for(connector_account_id)
    except ProviderError as error:
        raise Problem(
            409,
            "conflict",
            f"The payment's connector account cannot be used now: {error.message}. Nothing "
            "was stored.",
        ) from None
