"""Problems about query parameters, each naming its parameter as ``query.<name>``.

Time filters (``created[gte]``, ``created_after``, …) are read here, not by FastAPI's
``datetime`` parameters: pydantic reads any number as Unix seconds, so ``created_before=0.5``
passed for the start of 1970 although the document says "ISO 8601 with a time zone".  A
time needs a zone; only the merchant's ``created[…]`` take whole Unix seconds as well (as
documented); a time with no UTC equivalent is a 400 naming its parameter
(``domain.instants``), never a 500 from the database layer.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from orchestrator.api.problems import Problem
from orchestrator.domain.instants import OUT_OF_RANGE, in_utc

# Ten digits reach the year 2286; more could overflow datetime.
UNIX_SECONDS_PATTERN = "^[0-9]{1,10}$"
_UNIX_SECONDS = re.compile(UNIX_SECONDS_PATTERN)
_DATETIME = TypeAdapter(datetime)
# What the document says of them (replacing FastAPI's ``anyOf [string, null]``).
_ISO_TIME: dict[str, Any] = {"type": "string", "format": "date-time"}
ISO_TIME_SCHEMA: dict[str, Any] = {"anyOf": [_ISO_TIME]}
ISO_OR_UNIX_TIME_SCHEMA: dict[str, Any] = {
    "anyOf": [_ISO_TIME, {"type": "string", "pattern": UNIX_SECONDS_PATTERN}]
}


def invalid_parameters(detail: str, fields: dict[str, str]) -> Problem:
    """A 400 naming each bad query parameter as ``query.<name>``, like the validation
    handler names them (orchestrator.api.errors)."""
    return Problem(
        400,
        "invalid-request",
        detail,
        errors=[{"field": f"query.{name}", "message": message} for name, message in fields.items()],
    )


def checked_time(name: str, value: datetime | None) -> datetime | None:
    """``value`` in UTC (None stays None), or the 400 naming ``name``."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise invalid_parameters(
            f"{name} needs a time zone (e.g. 2026-12-01T09:00:00Z) or Unix seconds.",
            {name: "time zone missing"},
        )
    utc = in_utc(value)
    if utc is None:
        raise invalid_parameters(f"{name} is out of range: {OUT_OF_RANGE}.", {name: "out of range"})
    return utc


def time_parameter(name: str, raw: str | None, *, unix_seconds: bool = False) -> datetime | None:
    """The query parameter ``name`` as a UTC time (None when absent), or the 400 naming it:
    ISO 8601 with a zone, or (``unix_seconds``) whole Unix seconds; never another number."""
    if raw is None:
        return None
    if _UNIX_SECONDS.fullmatch(raw) and unix_seconds:
        return datetime.fromtimestamp(int(raw), UTC)
    expected = "an ISO 8601 time with a time zone"
    if unix_seconds:
        expected += " or whole Unix seconds"
    if _is_number(raw):
        raise invalid_parameters(f"{name} must be {expected}.", {name: "not a time"})
    try:
        value = _DATETIME.validate_python(raw)
    except ValidationError:
        raise invalid_parameters(
            f"{name} must be {expected} (e.g. 2026-12-01T09:00:00Z).", {name: "not a time"}
        ) from None
    return checked_time(name, value)


def _is_number(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True
