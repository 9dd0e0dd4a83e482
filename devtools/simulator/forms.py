"""Stripe's form encoding, decoded: ``metadata[k]=v``, ``payment_method_types[0]=card``,
``created[gte]=1700000000``, nested as deep as the SDK nests them.

Values stay strings, as on the wire; each endpoint parses the types it expects, so a
wrong type answers 400 the way Stripe does instead of being coerced silently.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

FormValue = str | dict[str, "FormValue"] | list["FormValue"]

_SEGMENT = re.compile(r"\[([^\[\]]*)\]")


class FormError(ValueError):
    """The body is not something the SDK would send."""


def _split_key(key: str) -> list[str]:
    head, bracket, tail = key.partition("[")
    if not bracket:
        return [key]
    rest = "[" + tail
    segments = _SEGMENT.findall(rest)
    if "".join(f"[{s}]" for s in segments) != rest or not head:
        raise FormError(f"Invalid parameter name: {key}")
    return [head, *segments]


def _listify(node: Any) -> Any:
    """Dicts keyed 0..n-1 (``x[0]``, ``x[1]``) become lists, as the SDK meant them."""
    if not isinstance(node, dict):
        return node
    converted = {k: _listify(v) for k, v in node.items()}
    if converted and all(k.isdigit() for k in converted):
        indexes = sorted(int(k) for k in converted)
        if indexes == list(range(len(indexes))):
            return [converted[str(i)] for i in indexes]
    return converted


def decode_form(raw: str) -> dict[str, Any]:
    """Decode an urlencoded body or query string into nested dicts and lists."""
    root: dict[str, Any] = {}
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=False)
    except ValueError as exc:
        raise FormError(str(exc)) from exc
    for key, value in pairs:
        path = _split_key(key)
        node = root
        for position, segment in enumerate(path[:-1]):
            child = node.get(segment)
            if child is None:
                child = node[segment] = {}
            elif not isinstance(child, dict):
                prefix = path[0] + "".join(f"[{s}]" for s in path[1 : position + 1])
                raise FormError(f"Invalid hash for parameter {prefix}")
            node = child
        last = path[-1]
        if last == "":
            # ``expand[]=a&expand[]=b``: append in order.
            last = str(sum(1 for k in node if k.isdigit()))
        if isinstance(node.get(last), dict):
            raise FormError(f"Invalid parameter name: {key}")
        node[last] = value
    result = _listify(root)
    assert isinstance(result, dict)
    return result
