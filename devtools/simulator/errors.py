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


def resource_missing(kind: str, object_id: str, param: str, *, saved: bool) -> ApiError:
    return ApiError(
        404 if kind == "payment_intent" else 400,
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
