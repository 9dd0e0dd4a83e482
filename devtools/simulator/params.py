"""Stripe's parameter rules, shared by every endpoint: unknown parameters, strings,
integers, booleans, list limits and metadata, each refused with Stripe's own 400."""

from __future__ import annotations

import math
import re
from typing import Any

from devtools.simulator import errors


def reject_unknown(params: dict[str, Any], allowed: frozenset[str]) -> None:
    for name in params:
        if name not in allowed:
            if name == "expand":
                raise errors.invalid_request(
                    "The payorch simulator does not support expand.",
                    code="parameter_unknown",
                    param="expand",
                )
            raise errors.parameter_unknown(name)


def string(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise errors.invalid_request(
            f"Invalid string: {value!r}", code="parameter_invalid_string", param=name
        )
    return value


def integer(params: dict[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"-?\d+", value):
        raise errors.invalid_integer(name, str(value))
    return int(value)


def boolean(params: dict[str, Any], name: str, default: bool) -> bool:
    value = params.get(name)
    if value is None:
        return default
    if value not in ("true", "false"):
        raise errors.invalid_request(
            f"Invalid boolean: {value}", code="parameter_invalid_boolean", param=name
        )
    return bool(value == "true")


def limit(params: dict[str, Any]) -> int:
    value = integer(params, "limit")
    if value is None:
        return 10
    if not 1 <= value <= 100:
        raise errors.invalid_request(
            "This value must be greater than or equal to 1 and less than or equal to 100.",
            param="limit",
        )
    return value


def metadata(raw: Any) -> dict[str, str]:
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, dict):
        raise errors.invalid_request("Invalid hash", param="metadata")
    if len(raw) > 50:
        raise errors.invalid_request("Metadata can have at most 50 keys.", param="metadata")
    metadata: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str):
            raise errors.invalid_request("Invalid hash", param=f"metadata[{key}]")
        if len(key) > 40:
            raise errors.invalid_request(
                "Metadata keys can be at most 40 characters.", param=f"metadata[{key}]"
            )
        if len(value) > 500:
            raise errors.invalid_request(
                "Metadata values can be at most 500 characters.", param=f"metadata[{key}]"
            )
        if value != "":  # an empty value means "unset", as on Stripe
            metadata[key] = value
    return metadata


def created_bounds(params: dict[str, Any]) -> dict[str, int]:
    """Stripe's ``created`` list filter: ``created[gt|gte|lt|lte]=T`` or ``created=T``."""
    created = params.get("created")
    bounds: dict[str, int] = {}
    if isinstance(created, dict):
        for op, value in created.items():
            if op not in ("gt", "gte", "lt", "lte"):
                raise errors.parameter_unknown(f"created[{op}]")
            parsed = integer({f"created[{op}]": value}, f"created[{op}]")
            assert parsed is not None
            bounds[op] = parsed
    elif created is not None:
        exact = integer(params, "created")
        assert exact is not None
        bounds = {"gte": exact, "lte": exact}
    return bounds


def created_range(bounds: dict[str, int]) -> tuple[float, float]:
    """The first and last ``created`` that pass ``created_bounds`` (infinite when open)."""
    earliest = max(bounds.get("gte", -math.inf), bounds.get("gt", -math.inf) + 1)
    latest = min(bounds.get("lte", math.inf), bounds.get("lt", math.inf) - 1)
    return earliest, latest


def within(created: int, bounds: dict[str, int]) -> bool:
    """Whether ``created`` passes ``created_bounds``."""
    return (
        ("gt" not in bounds or created > bounds["gt"])
        and ("gte" not in bounds or created >= bounds["gte"])
        and ("lt" not in bounds or created < bounds["lt"])
        and ("lte" not in bounds or created <= bounds["lte"])
    )
