"""Reading a JSON body defensively: size limit, media type, strict JSON.

FastAPI's own body parsing would answer 422 (which our contract reserves for a reused
idempotency key), let duplicate keys silently overwrite each other, and turn pathological
nesting into a RecursionError.  Here every failure becomes a 4xx problem.
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
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return RawBody(media_type, b"", too_large=True)  # not read at all
    if media_type != "application/json":
        return RawBody(media_type, b"", too_large=False)  # refused (415) unread
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return RawBody(media_type, b"", too_large=True)
        chunks.append(chunk)
    return RawBody(media_type, b"".join(chunks), too_large=False)


def json_from_raw(body: RawBody) -> Any:
    """The JSON value of ``body``, or the problem: 413, 415, then 400 (not UTF-8, not
    JSON, a repeated key, nested too deeply)."""
    if body.too_large:
        raise Problem(413, "payload-too-large", f"The body must be at most {MAX_BODY_BYTES} bytes.")
    if body.media_type != "application/json":
        raise Problem(
            415,
            "unsupported-media-type",
            "Send the body as JSON with 'Content-Type: application/json'.",
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
    is the empty object: for operations whose every field is optional (a full refund)."""
    declared = request.headers.get("content-length")
    no_body = "content-type" not in request.headers and declared in (None, "0")
    if no_body and not await request.body():
        return {}
    return await read_json_body(request)


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
