"""Request fingerprints: "the same request" means the same SHA-256 of method, path and the
canonical JSON of the validated body, so key order and whitespace never matter."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no insignificant whitespace and UTF-8 kept as is.

    Floats are refused: money is in integer minor units, and float formatting is not a
    stable identity across languages.
    """
    _refuse_floats(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_fingerprint(method: str, path: str, body: Any) -> str:
    material = "\n".join((method.upper(), path, canonical_json(body)))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _refuse_floats(value: Any) -> None:
    if isinstance(value, float):
        raise TypeError("floats have no canonical form here; use integers or strings")
    if isinstance(value, dict):
        for item in value.values():
            _refuse_floats(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _refuse_floats(item)
