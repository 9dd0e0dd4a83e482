"""What the PaymentIntent endpoints accept: Stripe's parameters for create, confirm,
capture and cancel, checked with Stripe's own 400s.

Validation is the first half of every write (``state`` executes the second): a request that
fails here was never executed, so its 400 is never saved under the idempotency key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from devtools.simulator import errors
from devtools.simulator import params as params_

MAX_AMOUNT = 99_999_999

_CREATE_PARAMS = frozenset(
    {
        "amount",
        "automatic_payment_methods",
        "capture_method",
        "confirm",
        "confirmation_method",
        "currency",
        "customer",
        "description",
        "metadata",
        "payment_method",
        "payment_method_types",
        "receipt_email",
        "return_url",
        "statement_descriptor",
        "statement_descriptor_suffix",
    }
)
_CONFIRM_PARAMS = frozenset({"off_session", "payment_method", "receipt_email", "return_url"})
_CAPTURE_PARAMS = frozenset({"amount_to_capture", "metadata"})
_CANCEL_PARAMS = frozenset({"cancellation_reason"})
_CANCELLATION_REASONS = ("abandoned", "duplicate", "fraudulent", "requested_by_customer")
_CURRENCY = re.compile(r"^[a-z]{3}$")


@dataclass(frozen=True)
class CreateRequest:
    amount: int
    currency: str
    metadata: dict[str, str]
    payment_method: str | None
    payment_method_types: list[str]
    automatic_payment_methods: dict[str, Any] | None
    confirm: bool
    confirmation_method: str
    capture_method: str
    customer: str | None
    description: str | None
    receipt_email: str | None
    return_url: str | None
    statement_descriptor: str | None
    statement_descriptor_suffix: str | None


@dataclass(frozen=True)
class ConfirmRequest:
    payment_method: str | None
    receipt_email: str | None
    return_url: str | None
    off_session: bool = False


@dataclass(frozen=True)
class CaptureRequest:
    amount_to_capture: int | None
    metadata: dict[str, str]


@dataclass(frozen=True)
class CancelRequest:
    cancellation_reason: str | None


def amount_hint(params: dict[str, Any]) -> int | None:
    """The amount a create asks for, for fault matching (before validation)."""
    value = params.get("amount")
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def validate_create(params: dict[str, Any], *, min_amount: int) -> CreateRequest:
    params_.reject_unknown(params, _CREATE_PARAMS)
    amount = params_.integer(params, "amount")
    if amount is None:
        raise errors.parameter_missing("amount")
    if amount < min_amount:
        raise errors.invalid_request(
            f"Amount must be at least {min_amount} minor units",
            code="amount_too_small",
            param="amount",
        )
    if amount > MAX_AMOUNT:
        raise errors.invalid_request(
            "Amount must be no more than 99999999 minor units",
            code="amount_too_large",
            param="amount",
        )
    currency = params_.string(params, "currency")
    if currency is None:
        raise errors.parameter_missing("currency")
    if not _CURRENCY.match(currency.lower()):
        raise errors.invalid_request(f"Invalid currency: {currency}", param="currency")
    metadata = params_.metadata(params.get("metadata"))
    types_param = params.get("payment_method_types")
    automatic = params.get("automatic_payment_methods")
    if types_param is not None and automatic is not None:
        raise errors.invalid_request(
            "You may only specify one of these parameters: automatic_payment_methods, "
            "payment_method_types.",
            param="automatic_payment_methods",
        )
    if types_param is not None:
        if not isinstance(types_param, list) or any(t != "card" for t in types_param):
            raise errors.invalid_request(
                "The payorch simulator supports payment_method_types=['card'] only.",
                param="payment_method_types",
            )
        types, automatic_methods = ["card"], None
    else:
        # Stripe's default: payment methods from the Dashboard, redirects allowed, which
        # makes a server-side confirm without return_url fail (see execute_confirm).
        automatic_methods = {"allow_redirects": "always", "enabled": True}
        if automatic is not None:
            if not isinstance(automatic, dict) or automatic.get("enabled") not in (
                "true",
                "false",
            ):
                raise errors.parameter_missing("automatic_payment_methods[enabled]")
            redirects = automatic.get("allow_redirects", "always")
            if redirects not in ("always", "never"):
                raise errors.invalid_request(
                    f"Invalid allow_redirects: {redirects}",
                    param="automatic_payment_methods[allow_redirects]",
                )
            automatic_methods = {
                "allow_redirects": redirects,
                "enabled": automatic["enabled"] == "true",
            }
        types = ["card"]
    capture = params_.string(params, "capture_method") or "automatic"
    if capture not in ("automatic", "automatic_async", "manual"):
        raise errors.invalid_request(
            f"Invalid capture_method: must be one of automatic, automatic_async, or "
            f"manual (got {capture!r})",
            param="capture_method",
        )
    customer = params_.string(params, "customer")
    if customer is not None and not customer.startswith("cus_"):
        # The simulator keeps no customers: any cus_ id is taken as one that exists.
        raise errors.resource_missing("customer", customer, "customer", saved=False)
    confirmation = params_.string(params, "confirmation_method") or "automatic"
    if confirmation not in ("automatic", "manual"):
        raise errors.invalid_request(
            f"Invalid confirmation_method: {confirmation}", param="confirmation_method"
        )
    return CreateRequest(
        amount=amount,
        currency=currency.lower(),
        metadata=metadata,
        payment_method=params_.string(params, "payment_method"),
        payment_method_types=types,
        automatic_payment_methods=automatic_methods,
        confirm=params_.boolean(params, "confirm", default=False),
        confirmation_method=confirmation,
        capture_method=capture,
        customer=customer,
        description=params_.string(params, "description"),
        receipt_email=params_.string(params, "receipt_email"),
        return_url=params_.string(params, "return_url"),
        statement_descriptor=params_.string(params, "statement_descriptor"),
        statement_descriptor_suffix=params_.string(params, "statement_descriptor_suffix"),
    )


def validate_confirm(params: dict[str, Any]) -> ConfirmRequest:
    params_.reject_unknown(params, _CONFIRM_PARAMS)
    return ConfirmRequest(
        payment_method=params_.string(params, "payment_method"),
        receipt_email=params_.string(params, "receipt_email"),
        return_url=params_.string(params, "return_url"),
        off_session=params_.boolean(params, "off_session", default=False),
    )


def validate_capture(params: dict[str, Any]) -> CaptureRequest:
    params_.reject_unknown(params, _CAPTURE_PARAMS)
    amount = params_.integer(params, "amount_to_capture")
    if amount is not None and amount < 1:
        raise errors.invalid_request(
            "This value must be greater than or equal to 1.", param="amount_to_capture"
        )
    return CaptureRequest(
        amount_to_capture=amount, metadata=params_.metadata(params.get("metadata"))
    )


def validate_cancel(params: dict[str, Any]) -> CancelRequest:
    params_.reject_unknown(params, _CANCEL_PARAMS)
    reason = params_.string(params, "cancellation_reason")
    if reason is not None and reason not in _CANCELLATION_REASONS:
        raise errors.invalid_request(
            f"Invalid cancellation_reason: must be one of {', '.join(_CANCELLATION_REASONS)}",
            param="cancellation_reason",
        )
    return CancelRequest(cancellation_reason=reason)
