"""Times given to us, as the UTC instants stored and compared.

Hazard: a time with a zone may have no UTC equivalent.  ``0001-01-01T00:00:00+01:00`` is
in year 0 in UTC and ``9999-12-31T23:59:59-05:00`` in year 10000, neither of which Python's
``datetime`` can hold: converting raises ``OverflowError``, which escaped as a 500 from the
database layer (which stores UTC) and as a traceback from the CLI.  Every reader of a time
a person or a client typed converts it here first and refuses it by name.
"""

from __future__ import annotations

from datetime import UTC, datetime

OUT_OF_RANGE = "give a time between years 1 and 9999 in UTC"


def in_utc(value: datetime) -> datetime | None:
    """``value`` (with a zone) in UTC, or None when UTC has no such time."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return None
