"""What free text from outside (a request body, a form, a command line) may contain.

C0/C1 control characters other than tab and line breaks break logs, terminals and
downstream systems, and PostgreSQL cannot store NUL in a text column at all (the insert
fails, which would be a 500).  Identifiers (customer references, metadata keys) allow no
tab or line break either.  The character classes serve both the validators and the
``pattern`` of the OpenAPI document, which must say the same.
"""

from __future__ import annotations

import re

CONTROL_CLASS = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
IDENTIFIER_CONTROL_CLASS = r"\x00-\x1f\x7f-\x9f"
_CONTROL = re.compile(f"[{CONTROL_CLASS}]")


def text_problem(value: str) -> str | None:
    """Why ``value`` is not acceptable free text, or None: no control characters (tab and
    line breaks allowed), valid Unicode (no lone surrogates, which cannot be encoded)."""
    if _CONTROL.search(value):
        return "must not contain control characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None
