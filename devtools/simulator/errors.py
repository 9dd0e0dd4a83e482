"""Stripe's error responses: ``{"error": {"type", "code", "message", "param", …}}``.

``ApiError.saved`` says whether Stripe would store the answer under the idempotency key.
Stripe saves a result once an endpoint has begun executing (including 402 declines, 404s on
the target object, state errors and 500s); a request that fails parameter validation, is
rate limited or collides with a concurrent request is not saved and may be retried as is.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        body: dict[str, Any],
        *,
        saved: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {body.get('error', {}).get('message', '')}")
        self.status = status
        self.body = body
        self.saved = saved
        self.headers = headers or {}


def error_body(
    type_: str,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    error: dict[str, Any] = {}
    if code is not None:
        error["code"] = code
        error["doc_url"] = "https://stripe.com/docs/error-codes/" + code.replace("_", "-")
    error["message"] = message
    if param is not None:
        error["param"] = param
    error.update(extra)
    error["type"] = type_
    return {"error": dict(sorted(error.items()))}


def invalid_request(
    message: str, *, code: str | None = None, param: str | None = None, status: int = 400
) -> ApiError:
    """A request Stripe refuses during validation: not saved under the idempotency key."""
    return ApiError(
        status, error_body("invalid_request_error", message, code=code, param=param), saved=False
    )


def parameter_unknown(name: str) -> ApiError:
    return invalid_request(
        f"Received unknown parameter: {name}", code="parameter_unknown", param=name
    )


def parameter_missing(name: str) -> ApiError:
    return invalid_request(f"Missing required param: {name}.", code="parameter_missing", param=name)


def invalid_integer(name: str, value: str) -> ApiError:
    return invalid_request(
        f"Invalid integer: {value}", code="parameter_invalid_integer", param=name
    )


def resource_missing(
    kind: str, object_id: str, param: str, *, saved: bool, status: int | None = None
) -> ApiError:
    """Stripe's "No such …": 404 for the object a path names, 400 for a parameter's."""
    return ApiError(
        status or (404 if kind in ("payment_intent", "refund") else 400),
        error_body(
            "invalid_request_error",
            f"No such {kind}: '{object_id}'",
            code="resource_missing",
            param=param,
        ),
        saved=saved,
    )


def unexpected_state(message: str, payment_intent: dict[str, Any]) -> ApiError:
    return ApiError(
        400,
        error_body(
            "invalid_request_error",
            message,
            code="payment_intent_unexpected_state",
            payment_intent=payment_intent,
        ),
        saved=True,
    )


def authentication_failed(message: str) -> ApiError:
    return ApiError(401, error_body("invalid_request_error", message), saved=False)


def unrecognized_url(method: str, path: str) -> ApiError:
    return ApiError(
        404,
        error_body(
            "invalid_request_error",
            f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs "
            "or we can help at https://support.stripe.com/.",
        ),
        saved=False,
    )


def idempotency_mismatch(key: str, first_path: str, path: str) -> ApiError:
    if first_path != path:
        message = (
            "Keys for idempotent requests can only be used for the same endpoint they were "
            f"first used for ('{first_path}' vs '{path}'). Try using a key other than '{key}' "
            "if you meant to execute a different request."
        )
    else:
        message = (
            "Keys for idempotent requests can only be used with the same parameters they were "
            f"first used with. Try using a key other than '{key}' if you meant to execute a "
            "different request."
        )
    return ApiError(400, error_body("idempotency_error", message), saved=False)


def idempotency_key_in_use(key: str) -> ApiError:
    # Stripe answers 409 with code idempotency_key_in_use; the SDK raises it as a plain
    # APIError (it only special-cases idempotency_error on 400/404), so clients read the code.
    return ApiError(
        409,
        error_body(
            "invalid_request_error",
            "There is currently another in-progress request using this Idempotent Key (that "
            f"probably means you submitted twice, and the other request is still going "
            f"through): {key}. Please try again later.",
            code="idempotency_key_in_use",
        ),
        saved=False,
    )


def rate_limited(retry_after: int) -> ApiError:
    return ApiError(
        429,
        error_body(
            "invalid_request_error",
            "Request rate limit exceeded. Learn more about rate limits here "
            "https://stripe.com/docs/rate-limits.",
            code="rate_limit",
        ),
        saved=False,
        headers={"Retry-After": str(retry_after)},
    )


def api_error(*, saved: bool) -> ApiError:
    return ApiError(
        500,
        error_body("api_error", "An unknown error occurred"),
        saved=saved,
    )


def _money(amount: int, currency: str) -> str:
    """Stripe's wording for amounts in messages: ``$10.00``, ``€5.00``, ``1000 JPY``."""
    symbols = {"usd": "$", "eur": "€", "gbp": "£", "cad": "CA$", "aud": "A$"}
    zero_decimal = {"jpy", "krw", "vnd", "clp", "isk", "ugx", "xaf", "xof"}
    if currency in zero_decimal:
        return f"{amount} {currency.upper()}"
    value = f"{amount / 100:.2f}"
    symbol = symbols.get(currency)
    return f"{symbol}{value}" if symbol else f"{value} {currency.upper()}"


def refund_exceeds(amount: int, available: int, currency: str, *, any_refunded: bool) -> ApiError:
    """Stripe's over-refund errors (400 ``amount_too_large``, never saved as a success)."""
    asked, left = _money(amount, currency), _money(available, currency)
    message = (
        f"Refund amount ({asked}) is greater than unrefunded amount on charge ({left})"
        if any_refunded
        else f"Refund amount ({asked}) is greater than charge amount ({left})"
    )
    return ApiError(
        400,
        error_body("invalid_request_error", message, code="amount_too_large", param="amount"),
        saved=True,
    )


def charge_already_refunded(charge_id: str) -> ApiError:
    return ApiError(
        400,
        error_body(
            "invalid_request_error",
            f"Charge {charge_id} has already been refunded.",
            code="charge_already_refunded",
        ),
        saved=True,
    )


def nothing_to_refund(intent_id: str, status: str) -> ApiError:
    return ApiError(
        400,
        error_body(
            "invalid_request_error",
            f"This PaymentIntent ({intent_id}) does not have a successful charge to refund "
            f"(its status is {status}).",
            code="charge_not_refundable",
            param="payment_intent",
        ),
        saved=True,
    )
