"""The account's balance: one balance transaction per movement of money, as Stripe books
them, and ``GET /v1/balance_transactions``.

    a charge captured (at once, or by a capture)   type charge,          + amount captured
    a refund succeeded (or failed: it had)         type refund,          - amount
    a refund that failed later                     type refund_failure,  + amount (back)

Ids are those the charge and refund objects already name (``txn_`` + the object's id after
its prefix; a failed refund's ``txn_f`` + …), so the objects and the balance agree.  No
fees (``fee`` 0, ``net`` = ``amount``) and no currency conversion: the balance currency is
the charge's (``exchange_rate`` null).  ``adjust`` changes what a booked transaction says
(tests: a balance that disagrees with the objects, as Stripe's does after a correction).

Like ``state``, not thread-safe on its own: the caller holds the simulator's lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devtools.simulator import errors, objects
from devtools.simulator import params as params_
from devtools.simulator.models import Outcome

_LIST_PARAMS = frozenset({"created", "ending_before", "expand", "limit", "starting_after", "type"})
# The one expansion served: each transaction's source object (Stripe's ``expand[]=data.source``).
_EXPANDABLE = ["data.source"]
# Stripe's reporting category for each type this simulator books.
_CATEGORY = {"charge": "charge", "refund": "refund", "refund_failure": "refund_failure"}
# Funds become available two days after the movement (Stripe's default schedule varies).
_AVAILABLE_AFTER_SECONDS = 2 * 86400


@dataclass
class BalanceTransaction:
    id: str
    seq: int
    type: str
    amount: int
    currency: str
    source: str
    created: int


class Balance:
    def __init__(self) -> None:
        self.transactions: dict[str, BalanceTransaction] = {}
        self._ordered: list[BalanceTransaction] = []

    def book(self, txn_id: str, type_: str, amount: int, currency: str, source: str) -> None:
        """Book one movement (once: the same id again changes nothing)."""
        if txn_id in self.transactions:
            return
        txn = BalanceTransaction(
            id=txn_id,
            seq=len(self._ordered) + 1,
            type=type_,
            amount=amount,
            currency=currency,
            source=source,
            created=int(time.time()),
        )
        self.transactions[txn_id] = txn
        self._ordered.append(txn)

    def adjust(self, source: str, amount: int) -> dict[str, Any]:
        """The balance transaction of ``source`` (a charge or refund id) now says ``amount``."""
        found = next((t for t in self._ordered if t.source == source), None)
        if found is None:
            raise KeyError(source)
        found.amount = amount
        return render(found)

    def list_transactions(
        self, params: dict[str, Any], source_of: Callable[[str], dict[str, Any]]
    ) -> Outcome:
        """``source_of``: a source's object (a charge or refund), for ``expand``."""
        params_.reject_unknown(params, _LIST_PARAMS)
        expand = params.get("expand")
        if expand is not None and expand != _EXPANDABLE:
            raise errors.invalid_request(
                "The payorch simulator expands only data.source here.",
                code="parameter_unknown",
                param="expand",
            )
        limit = params_.limit(params)
        type_ = params_.string(params, "type")
        bounds = params_.created_bounds(params)
        candidates = [
            t
            for t in reversed(self._ordered)  # newest first, like Stripe
            if (type_ is None or t.type == type_) and params_.within(t.created, bounds)
        ]
        starting_after = params_.string(params, "starting_after")
        ending_before = params_.string(params, "ending_before")
        if starting_after is not None:
            anchor = self._anchor(starting_after, "starting_after")
            candidates = [t for t in candidates if t.seq < anchor]
            page = candidates[:limit]
        elif ending_before is not None:
            anchor = self._anchor(ending_before, "ending_before")
            candidates = [t for t in candidates if t.seq > anchor]
            page = candidates[-limit:]
        else:
            page = candidates[:limit]
        return Outcome(
            200,
            objects.render_list(
                "/v1/balance_transactions",
                [render(t, source_of(t.source) if expand else None) for t in page],
                has_more=len(candidates) > len(page),
            ),
            intent_id=None,
            record_id=None,
        )

    def _anchor(self, txn_id: str, param: str) -> int:
        txn = self.transactions.get(txn_id)
        if txn is None:
            raise errors.resource_missing(
                "balance_transaction", txn_id, param, saved=False, status=400
            )
        return txn.seq


def render(txn: BalanceTransaction, source: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stripe's ``balance_transaction`` object (schema ``balance_transaction``); ``source``:
    its source object, expanded."""
    return {
        "id": txn.id,
        "object": "balance_transaction",
        "amount": txn.amount,
        "available_on": txn.created + _AVAILABLE_AFTER_SECONDS,
        "created": txn.created,
        "currency": txn.currency,
        "description": None,
        "exchange_rate": None,
        "fee": 0,
        "fee_details": [],
        "net": txn.amount,
        "reporting_category": _CATEGORY.get(txn.type, txn.type),
        "source": txn.source if source is None else source,
        "status": "pending",
        "type": txn.type,
    }
