"""Problems about query parameters, each naming its parameter as ``query.<name>``.

Time filters (``created[gte]``, ``created_after``, …) need a zone, and a time with no UTC
equivalent is a 400 naming its parameter (``domain.instants``), never a 500 from the
database layer.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.api.problems import Problem
from orchestrator.domain.instants import OUT_OF_RANGE, in_utc


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
