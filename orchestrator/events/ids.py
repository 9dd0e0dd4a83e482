"""Public identifiers of events and webhook endpoints: a prefix and 128 random bits."""

from __future__ import annotations

import re
import secrets

EVENT_ID_PATTERN = "^evt_[0-9a-f]{32}$"
ENDPOINT_ID_PATTERN = "^we_[0-9a-f]{32}$"
_EVENT_ID = re.compile(EVENT_ID_PATTERN)
_ENDPOINT_ID = re.compile(ENDPOINT_ID_PATTERN)


def new_event_id() -> str:
    return f"evt_{secrets.token_hex(16)}"


def new_endpoint_id() -> str:
    return f"we_{secrets.token_hex(16)}"


def is_event_id(value: str) -> bool:
    return _EVENT_ID.fullmatch(value) is not None


def is_endpoint_id(value: str) -> bool:
    return _ENDPOINT_ID.fullmatch(value) is not None
