"""A small subset of Stripe's search query language for PaymentIntents.

    query   := clause (" AND " clause)*
    clause  := field op value
    field   := status | currency | amount | created | metadata['key'] | metadata["key"]
    op      := ":" (equals) | ">" | "<" | ">=" | "<="  (comparisons: amount, created only)
    value   := 'quoted' | "quoted" | bare-token

``OR``, negation and the other fields are refused with a 400 that says so.  Search runs over
the eventually consistent view (see ``state``): never use it to decide anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from devtools.simulator.models import Intent

_CLAUSE = re.compile(
    r"""^\s*(?P<field>status|currency|amount|created|metadata\[(?P<q1>['"])(?P<key>[^'"]+)(?P=q1)\])
        \s*(?P<op>>=|<=|:|>|<)\s*
        (?:(?P<q2>['"])(?P<quoted>[^'"]*)(?P=q2)|(?P<bare>[^\s'"]+))\s*$""",
    re.VERBOSE,
)


class SearchQueryError(ValueError):
    pass


@dataclass(frozen=True)
class Clause:
    field: str
    key: str | None
    op: str
    value: str

    def matches(self, intent: Intent) -> bool:
        if self.field == "metadata":
            assert self.key is not None
            return intent.metadata.get(self.key) == self.value
        if self.field in ("status", "currency"):
            return str(getattr(intent, self.field)) == self.value
        number = intent.amount if self.field == "amount" else intent.created
        target = int(self.value)
        compare: dict[str, Callable[[int, int], bool]] = {
            ":": lambda a, b: a == b,
            ">": lambda a, b: a > b,
            "<": lambda a, b: a < b,
            ">=": lambda a, b: a >= b,
            "<=": lambda a, b: a <= b,
        }
        return compare[self.op](number, target)


def parse_query(query: str) -> list[Clause]:
    if not query.strip():
        raise SearchQueryError("Missing required param: query.")
    if re.search(r"\sOR\s", query):
        raise SearchQueryError("The payorch simulator supports AND-joined search clauses only.")
    clauses: list[Clause] = []
    for text in re.split(r"\s+AND\s+", query.strip()):
        match = _CLAUSE.match(text)
        if match is None:
            raise SearchQueryError(f"Unsupported or malformed search clause: {text!r}")
        name = match["field"]
        field = "metadata" if name.startswith("metadata") else name
        value = match["quoted"] if match["quoted"] is not None else match["bare"]
        op = match["op"]
        if field in ("amount", "created"):
            if not re.fullmatch(r"-?\d+", value):
                raise SearchQueryError(f"{field} must be compared with an integer: {text!r}")
        elif op != ":":
            raise SearchQueryError(f"{field} supports ':' only: {text!r}")
        clauses.append(Clause(field=field, key=match["key"], op=op, value=value))
    return clauses
