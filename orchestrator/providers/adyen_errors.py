"""How Adyen's answers and failures become the protocol's error taxonomy (``base``)::

    TransportFailure (adyen_http)             -> OutcomeUnknown: timeout, refused, reset;
                                                 Adyen may have acted
    Adyen.exceptions.AdyenAPIResponseError, by HTTP status:
    ├── 5xx (500, 502, 503, 504, …)            -> OutcomeUnknown (Adyen may have acted; a 503
    │                                             "idempotency store unavailable" (703) too:
    │                                             it is answered the same way, by the same key
    │                                             again, and counts towards the attempts)
    ├── 409 / 422 with errorCode 704           -> Retryable: our first request with this key is
    │                                             still running at Adyen
    ├── 429                                    -> Retryable
    ├── 401 / 403                              -> Permanent(code="authentication_failed" /
    │                                             "permission_denied"): the account's
    │                                             credentials are wrong
    ├── 400 / 404 / 422 and any other 4xx      -> Permanent(code=errorCode): our request is
    │                                             wrong; the same request cannot succeed
    └── a 4xx marked ``transient-error: true`` -> Retryable
    Adyen.exceptions.AdyenError (not a response) -> ProviderBug: the library refused to send
                                                 (missing credentials, a bad live prefix);
                                                 nothing reached Adyen

    anything else raised inside the HTTP stack  -> propagates unchanged

Only a transport failure or a 5xx is an unknown outcome.  ``resultCode: Error`` inside a 200
answer is not a failure of the call: it is an answer (``adyen_objects``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from Adyen.exceptions import AdyenAPIResponseError, AdyenError

from orchestrator.providers.adyen_http import TransportFailure
from orchestrator.providers.base import OutcomeUnknown, Permanent, ProviderError, Retryable

IN_PROGRESS = "704"  # "request already processed or in progress" (same key, still running)


class ProviderBug(Exception):
    """The library refused to send the request: a configuration error, never an outage."""


@contextmanager
def mapped_errors() -> Iterator[None]:
    """Raise every Adyen failure inside as the protocol's error."""
    try:
        yield
    except TransportFailure as exc:
        raise OutcomeUnknown(str(exc)) from exc
    except AdyenAPIResponseError as exc:
        raise map_response_error(exc) from exc
    except AdyenError as exc:
        raise ProviderBug(f"{type(exc).__name__}: {exc.message}") from exc


def _header(headers: Any, name: str) -> str | None:
    if not isinstance(headers, Mapping):
        return None
    for key, value in headers.items():
        if str(key).lower() == name:
            return str(value)
    return None


def _message(exc: AdyenAPIResponseError) -> str:
    body = exc.message
    if isinstance(body, Mapping):
        return str(body.get("message") or body.get("errorType") or body)
    return str(body)[:200] or type(exc).__name__


def map_response_error(exc: AdyenAPIResponseError) -> ProviderError:
    status = int(exc.status_code) if str(exc.status_code).isdigit() else None
    code = str(exc.error_code) if exc.error_code not in (None, "") else None
    message = f"Adyen answered {status}: {_message(exc)}"
    transient = (_header(exc.headers, "transient-error") or "").lower() == "true"
    if status is None or status >= 500:
        return OutcomeUnknown(message, http_status=status)
    if code == IN_PROGRESS or status == 429 or transient:
        return Retryable(message, code=code, http_status=status)
    if status == 401:
        return Permanent(message, code="authentication_failed", http_status=status)
    if status == 403:
        return Permanent(message, code="permission_denied", http_status=status)
    return Permanent(message, code=code or "invalid_request", http_status=status)
