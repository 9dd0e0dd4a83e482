"""Readable messages from pydantic validation errors, for problem documents and the CLI.

pydantic prefixes the message of a ``ValueError`` raised in a validator with
``"Value error, "`` (and of an ``assert`` with ``"Assertion failed, "``): noise to a
merchant reading ``currency: Value error, must be ...``.  Every place that shows a
validation error to a person goes through ``error_message``.
"""

from __future__ import annotations

from collections.abc import Mapping

_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def error_message(error: Mapping[str, object]) -> str:
    """The message of one item of ``ValidationError.errors()``, without pydantic's prefix."""
    message = str(error.get("msg", ""))
    for prefix in _PYDANTIC_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message
