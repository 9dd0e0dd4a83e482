"""The one way a representation becomes bytes, and the helpers every representation shares.

A representation is built as a dict in its documented field order and encoded once by
``encode_representation`` (see ``domain.payment_representation`` for why the order is kept
in the stored bytes rather than in a JSONB column).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def encode_representation(document: dict[str, Any]) -> bytes:
    """The bytes a representation is served as.  The same settings as Starlette's
    ``JSONResponse`` (compact separators, UTF-8, no NaN), so switching a route from
    ``JSONResponse`` to these bytes changes nothing a client can see."""
    return json.dumps(
        document, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def ordered(document: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """``document`` with ``fields`` first, in that order; any other key after them, sorted
    (a field added later still lands in one deterministic place)."""
    result = {name: document[name] for name in fields if name in document}
    for name in sorted(document.keys() - set(fields)):
        result[name] = document[name]
    return result
