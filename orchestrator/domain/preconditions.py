"""Entity tags and the two conditional-request checks (RFC 9110 §8.8.3, §13.1.1-2), pure.

Two kinds of tag, for two audiences:

* ``representation_etag(body)``: a strong tag over the exact bytes served.  It changes
  exactly when the representation does, so a poller's ``If-None-Match`` answers ``304``
  until something about the payment changes.  Representations must therefore not move
  without a change (a lease heartbeat does not touch ``updated_at``).
* ``lease_etag(record)``: the lease state an operator saw, ``"<lease token>.<status>"``,
  with the status a client sees (a payment waiting for its customer is
  ``requires_action``, not the ``processing`` it is stored as: an operator reading
  ``"2.processing"`` beside a requires_action payment was misled).  Every claim, takeover,
  park and retry bumps the token or changes the status; heartbeats do neither.  Ops
  commands take it in ``If-Match``: a stale tag means someone else acted since the
  operator looked, and the command is refused with ``412`` and changes nothing.

Comparison: ``If-None-Match`` uses the weak comparison (``W/"x"`` matches ``"x"``),
``If-Match`` the strong one (a weak tag never matches), ``*`` matches any current
representation.  A header that is not a list of entity tags parses as ``None``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.payment_representation import shown_status

_ETAG_LIST_ITEM = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*(?:,|$)')
MAX_TAGS = 32  # a header listing more is refused rather than scanned


@dataclass(frozen=True)
class EntityTag:
    opaque: str  # without quotes
    weak: bool = False

    def __str__(self) -> str:
        return f'W/"{self.opaque}"' if self.weak else f'"{self.opaque}"'


@dataclass(frozen=True)
class TagList:
    """A parsed ``If-Match`` / ``If-None-Match`` value: ``*`` or a list of tags."""

    any: bool
    tags: tuple[EntityTag, ...] = ()

    def matches_weakly(self, current: str) -> bool:
        opaque = _opaque(current)
        return self.any or any(tag.opaque == opaque for tag in self.tags)

    def matches_strongly(self, current: str) -> bool:
        opaque = _opaque(current)
        return self.any or any(not tag.weak and tag.opaque == opaque for tag in self.tags)


def _opaque(tag: str) -> str:
    return tag.removeprefix("W/").strip('"')


def parse_tag_list(value: str) -> TagList | None:
    """``*`` or ``"a", W/"b"``; None when the header is malformed.  An empty value is the
    empty list RFC 9110's ``#entity-tag`` allows: it names no tag, so it matches nothing
    (a change made on it is refused with 412 rather than applied unconditionally)."""
    value = value.strip()
    if value == "*":
        return TagList(any=True)
    tags: list[EntityTag] = []
    position = 0
    while position < len(value):
        match = _ETAG_LIST_ITEM.match(value, position)
        if match is None or match.end() == position or len(tags) >= MAX_TAGS:
            return None
        tags.append(EntityTag(match.group(2), weak=match.group(1) is not None))
        position = match.end()
    return TagList(any=False, tags=tuple(tags))


def representation_etag(body: bytes) -> str:
    """Strong: 128 bits of SHA-256 over the exact bytes served."""
    return f'"{hashlib.sha256(body).hexdigest()[:32]}"'


def lease_etag(record: PaymentRecord | OperationRecord) -> str:
    status = shown_status(record) if isinstance(record, PaymentRecord) else record.status.value
    return f'"{record.lease_token}.{status}"'


def not_modified(if_none_match: str | None, current: str) -> bool:
    """True when a GET should answer ``304``: the client already holds ``current``.  A
    malformed header is ignored (the full answer is always safe)."""
    if if_none_match is None:
        return False
    parsed = parse_tag_list(if_none_match)
    return parsed is not None and parsed.matches_weakly(current)
