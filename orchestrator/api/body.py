"""Reading a JSON body defensively: size limit, media type, strict JSON.

FastAPI's own body parsing would answer 422 (which our contract reserves for a reused
idempotency key), let duplicate keys silently overwrite each other, and turn pathological
nesting into a RecursionError.  Here every failure becomes a 4xx problem.

No body is buffered beyond its cap, whatever the headers say or omit: a declared
``Content-Length`` over the cap is refused unread, a chunked body is read until it passes
the cap, a body whose media type is refused is never read.  A refusal that leaves a body
unread closes the connection (``Connection: close``), so the server stops reading it
instead of draining the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from orchestrator.api.problems import Problem
from orchestrator.validation_messages import error_message

MAX_BODY_BYTES = 64 * 1024
M = TypeVar("M", bound=BaseModel)
# On an answer given before the body was read to its end.
CLOSE_UNREAD = {"Connection": "close"}


def declared_length(request: Request) -> int | None:
    """The ``Content-Length`` the client declared, or None (absent, or not ASCII digits:
    ``str.isdigit()`` alone is true for "²", which ``int()`` refuses)."""
    declared = request.headers.get("content-length")
    if declared is None or not (declared.isascii() and declared.isdigit()):
        return None
    return int(declared)


def payload_too_large(limit: int, what: str = "The body") -> Problem:
    return Problem(
        413, "payload-too-large", f"{what} must be at most {limit} bytes.", headers=CLOSE_UNREAD
    )


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it passes ``limit`` bytes (the rest is never read)."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            return None
    return bytes(body)


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


@dataclass(frozen=True)
class RawBody:
    """The body as received, refusals deferred (``json_from_raw`` raises them): the accept
    route reads the body before it authenticates, and must still answer 401 first."""

    media_type: str
    data: bytes
    too_large: bool


async def read_raw_body(request: Request) -> RawBody:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    declared = declared_length(request)
    if declared is not None and declared > MAX_BODY_BYTES:
        return RawBody(media_type, b"", too_large=True)  # not read at all
    if media_type != "application/json":
        return RawBody(media_type, b"", too_large=False)  # refused (415) unread
    data = await read_capped(request, MAX_BODY_BYTES)
    if data is None:
        return RawBody(media_type, b"", too_large=True)
    return RawBody(media_type, data, too_large=False)


def json_from_raw(body: RawBody) -> Any:
    """The JSON value of ``body``, or the problem: 413, 415, then 400 (not UTF-8, not
    JSON, a repeated key, nested too deeply)."""
    if body.too_large:
        raise payload_too_large(MAX_BODY_BYTES)
    if body.media_type != "application/json":
        raise Problem(
            415,
            "unsupported-media-type",
            "Send the body as JSON with 'Content-Type: application/json'.",
            headers=CLOSE_UNREAD,  # the body was not read
        )
    try:
        text = body.data.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(400, "invalid-request", "The body is not valid UTF-8.") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except _DuplicateKey as error:
        raise Problem(
            400, "invalid-request", f"The body repeats the key {str(error)!r}; send each key once."
        ) from None
    except RecursionError:
        raise Problem(400, "invalid-request", "The body is nested too deeply.") from None
    except ValueError as error:
        raise Problem(400, "invalid-request", f"The body is not valid JSON: {error}") from None


async def read_json_body(request: Request) -> Any:
    return json_from_raw(await read_raw_body(request))


async def read_optional_json_body(request: Request) -> Any:
    """As ``read_json_body``, but a request without a body (no Content-Type, nothing sent)
    is the empty object: for operations whose every field is optional (a full refund).

    Without a Content-Type the body is read only up to the cap (a chunked one may be of
    any length): empty is ``{}``, anything else is refused (413 past the cap, else 415)."""
    if "content-type" in request.headers:
        return await read_json_body(request)
    data = await read_capped(request, MAX_BODY_BYTES)
    if data is None:
        raise payload_too_large(MAX_BODY_BYTES)
    if data:
        raise Problem(
            415,
            "unsupported-media-type",
            "Send the body as JSON with 'Content-Type: application/json'.",
        )
    return {}


def validation_problem(error: ValidationError, *, location: str = "body") -> Problem:
    fields = [
        {
            "field": ".".join(str(part) for part in item["loc"]) or location,
            "message": error_message(item),
        }
        for item in error.errors(include_url=False, include_input=False)
    ]
    listed = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return Problem(400, "invalid-request", f"Fix these fields: {listed}", errors=fields)


def parse_model(model: type[M], data: Any) -> M:
    if not isinstance(data, dict):
        raise Problem(400, "invalid-request", "The body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise validation_problem(error) from None
