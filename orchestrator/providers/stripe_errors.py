"""How Stripe SDK failures become the protocol's error taxonomy (``base``)::

    stripe.StripeError
    ├── CardError (402)                        -> Declined(code, decline_code,
    │                                             provider_payment_id)
    ├── IdempotencyError (400 idempotency_error) -> Permanent(code="idempotency_error")
    ├── InvalidRequestError (400, 404)         -> Permanent(code)   e.g. resource_missing,
    │                                             payment_intent_unexpected_state (the worker
    │                                             answers that one by reading the payment;
    │                                             also a capture of a non-capturable one
    │                                             and a cancel after success), and for
    │                                             refunds amount_too_large (more than is
    │                                             left) and charge_already_refunded
    ├── AuthenticationError (401)              -> Permanent
    ├── PermissionError (403)                  -> Permanent
    ├── RateLimitError (429)                   -> Retryable(retry_after = Retry-After header;
    │                                             the SDK ignores it, so we read e.headers)
    ├── APIError
    │   ├── 409 idempotency_key_in_use         -> Retryable (arrives as a plain APIError: the
    │   │                                         code is only in e.error.code)
    │   ├── 5xx, or a body that is not JSON    -> OutcomeUnknown (Stripe may have acted)
    │   └── any other 4xx                      -> Permanent
    └── APIConnectionError
        ├── caused by a transport failure      -> OutcomeUnknown (timeout, refused, reset,
        │                                         a body damaged in transit, …)
        └── caused by anything else            -> ProviderBug (NOT a ProviderError), e.g.
                                                  a malformed api_base (nothing was sent)

    anything else raised inside the HTTP stack -> propagates unchanged

    then, when the answer carries ``Stripe-Should-Retry`` (see ``map_stripe_error``):
    true  -> Retryable            false -> a Retryable becomes OutcomeUnknown

Hazard behind the ``ProviderBug`` lines: the SDK's own HTTP clients wrap *any* exception
raised while sending into ``APIConnectionError`` -- a vcrpy cassette miss, a bug in a
transport, even a ``DeprecationWarning`` turned into an error by ``-W error`` (the SDK's
HTTPXClient passes a string as ``data=``, which httpx deprecates).  Treated as a timeout,
such a bug would send the worker into "query first, retry later" forever and hide the bug.
So our HTTP client wraps only urllib3's and the socket's errors, and the mapping checks the
cause chain again for any other client (``stripe_http``).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import stripe
import urllib3

from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderError,
    Retryable,
)
from orchestrator.providers.stripe_declines import decline_class
from orchestrator.providers.stripe_objects import to_dict


class ProviderBug(Exception):
    """A failure that is ours, not the network's: never an unknown outcome, never retried.

    Deliberately not a ``ProviderError``: the worker must not catch it as a provider outcome.
    """


@contextmanager
def mapped_errors() -> Iterator[None]:
    try:
        yield
    except stripe.StripeError as exc:
        raise map_stripe_error(exc) from exc


def _is_transport_failure(exc: stripe.APIConnectionError) -> bool:
    """Whether the exception the SDK wrapped is a genuine network failure.

    Only the wrapped exception itself decides (not whatever it was raised while handling):
    a cassette miss raised during the handling of an old socket error is still a miss.
    """
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while isinstance(cause, stripe.APIConnectionError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, urllib3.exceptions.LocationValueError):
        return False  # our URL is malformed (a bad scheme, no host): nothing was ever sent
    # Everything else urllib3 raises is the network's: a refused or timed-out connect, a
    # reset, a response cut short or one whose body arrived damaged (DecodeError).  The
    # request may have reached Stripe.
    return isinstance(cause, urllib3.exceptions.HTTPError | OSError)


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or bad."""
    if not headers:
        return None
    value = None
    for name, header_value in headers.items():
        if name.lower() == "retry-after":
            value = header_value.strip()
            break
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - (time.time() if now is None else now), 0.0)


def _error_field(exc: stripe.StripeError, name: str) -> Any:
    return getattr(exc.error, name, None) if exc.error is not None else None


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return value.strip().lower()
    return None


def map_stripe_error(exc: stripe.StripeError) -> ProviderError | ProviderBug:
    """The taxonomy exception for an SDK exception (see the tree in the module docstring),
    then ``Stripe-Should-Retry`` when Stripe sent it: Stripe knows better than our guess.

    * ``true``: retrying the same request is safe and may succeed -> ``Retryable`` (a 5xx
      that would have been an unknown outcome, a 4xx we would have called permanent).
    * ``false``: the same request must not simply be sent again -> a ``Retryable`` becomes
      ``OutcomeUnknown``, so the worker asks the provider before anything else.
    Declines are outcomes, not failures, and a ``ProviderBug`` never reached Stripe: the
    header does not apply to them.
    """
    mapped = _classify(exc)
    should_retry = _header(exc.headers, "stripe-should-retry")
    if isinstance(mapped, Declined | ProviderBug) or should_retry is None:
        return mapped
    if should_retry == "true" and not isinstance(mapped, Retryable):
        return Retryable(
            f"{mapped.message} (Stripe-Should-Retry: true)",
            retry_after=retry_after_seconds(exc.headers),
            code=getattr(mapped, "code", None),
            http_status=mapped.http_status,
        )
    if should_retry == "false" and isinstance(mapped, Retryable):
        return OutcomeUnknown(
            f"{mapped.message} (Stripe-Should-Retry: false)", http_status=mapped.http_status
        )
    return mapped


def _classify(exc: stripe.StripeError) -> ProviderError | ProviderBug:
    status = exc.http_status
    message = exc.user_message or str(exc)
    code = exc.code or _error_field(exc, "code")
    if isinstance(exc, stripe.CardError):
        intent = _error_field(exc, "payment_intent")
        provider_payment_id = intent if isinstance(intent, str) else to_dict(intent).get("id")
        decline_code = _error_field(exc, "decline_code")
        return Declined(
            message,
            code=code or "card_declined",
            decline_code=decline_code,
            provider_payment_id=str(provider_payment_id) if provider_payment_id else None,
            http_status=status,
            # Whose problem it is (``stripe_declines``): only ``provider`` may fail over.
            kind=decline_class(code, decline_code),
        )
    if isinstance(exc, stripe.IdempotencyError):
        return Permanent(message, code=code or "idempotency_error", http_status=status)
    if isinstance(exc, stripe.InvalidRequestError | stripe.AuthenticationError):
        return Permanent(message, code=code, http_status=status)
    if isinstance(exc, stripe.PermissionError):
        return Permanent(message, code=code, http_status=status)
    if isinstance(exc, stripe.RateLimitError):
        return Retryable(
            message,
            retry_after=retry_after_seconds(exc.headers),
            code=code or "rate_limit",
            http_status=status,
        )
    if isinstance(exc, stripe.APIConnectionError):
        if _is_transport_failure(exc):
            return OutcomeUnknown(message, http_status=None)
        return ProviderBug(f"not a network failure, though the SDK calls it one: {message}")
    if status == 409 and code == "idempotency_key_in_use":
        return Retryable(
            message, retry_after=retry_after_seconds(exc.headers), code=code, http_status=status
        )
    if status is not None and 400 <= status < 500:
        return Permanent(message, code=code, http_status=status)
    # 5xx, or an answer the SDK could not read: Stripe may have acted.
    return OutcomeUnknown(message, http_status=status)
