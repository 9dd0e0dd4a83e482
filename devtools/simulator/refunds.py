"""Refunds: ``POST /v1/refunds``, ``GET /v1/refunds/{id}``, ``GET /v1/refunds`` and the
refunds made outside the API (the simulator's "dashboard").

    create ─> the intent must have succeeded (400 charge_not_refundable otherwise)
           ─> nothing left on the charge       ─> 400 charge_already_refunded
           ─> more than is left                ─> 400 amount_too_large, Stripe's wording:
                "Refund amount ($X) is greater than charge amount ($Y)"           (none yet)
                "Refund amount ($X) is greater than unrefunded amount on charge ($Y)"
           ─> a refund, its status by the card (``cards.RefundBehaviour``):
                succeeds  succeeded
                fails     succeeded, later failed   (the money comes back to the charge)
                pending   pending, later succeeded

"Later" is ``settle_refund`` (``POST /_sim/refunds/{id}/settle``) or, when the simulator is
configured with ``refund_settle_seconds``, the first request after that delay.  The sum of
the charge's refunds that are not failed or canceled never exceeds what it captured: the
check and the booking are one step under the simulator's lock.

Like ``state``, not thread-safe on its own: the caller holds the simulator's lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from devtools.simulator import errors, objects
from devtools.simulator import params as params_
from devtools.simulator.models import Charge, Intent, Outcome, PaymentMethod, Refund
from orchestrator.providers import keys


class AccountPayments(Protocol):
    """What the desk reads and tells of the account's payments (``state.PaymentState``,
    which owns the desk: a protocol, so this module does not import it back)."""

    intents: dict[str, Intent]
    methods: dict[str, PaymentMethod]
    charges: dict[str, Charge]

    def on_refund_changed(self, refund: Refund, *, previous: str | None) -> None: ...

    def intent_record_id(self, intent_id: str) -> str | None: ...


_CREATE_PARAMS = frozenset({"amount", "charge", "metadata", "payment_intent", "reason"})
_LIST_PARAMS = frozenset(
    {"charge", "created", "ending_before", "limit", "payment_intent", "starting_after"}
)
REASONS = ("duplicate", "fraudulent", "requested_by_customer")
# What a refund that fails later says (Stripe's failure_reason values include
# lost_or_stolen_card, expired_or_canceled_card, charge_for_pending_refund_disputed, unknown).
_FAILURE_REASON = "expired_or_canceled_card"


@dataclass(frozen=True)
class RefundRequest:
    payment_intent: str | None
    charge: str | None
    amount: int | None
    reason: str | None
    metadata: dict[str, str]


class RefundDesk:
    """The account's refunds, on the charges of its payments (``state.PaymentState``)."""

    def __init__(self, state: AccountPayments, *, settle_seconds: float | None) -> None:
        self._state = state
        self._settle_seconds = settle_seconds
        self.refunds: dict[str, Refund] = {}
        self._ordered: list[Refund] = []
        # Refunds whose later transition is due at a monotonic instant (refund_settle_seconds).
        self._due: dict[str, float] = {}

    # -- create ------------------------------------------------------------------------

    def validate_create(self, params: dict[str, Any]) -> RefundRequest:
        params_.reject_unknown(params, _CREATE_PARAMS)
        intent = params_.string(params, "payment_intent")
        charge = params_.string(params, "charge")
        if intent is None and charge is None:
            raise errors.invalid_request(
                "One of the following params should be provided for this request: "
                "payment_intent or charge.",
                param="payment_intent",
            )
        if intent is not None and charge is not None:
            raise errors.invalid_request(
                "You cannot specify both a charge and a payment_intent.", param="charge"
            )
        amount = params_.integer(params, "amount")
        if amount is not None and amount < 1:
            raise errors.invalid_request(
                "This value must be greater than or equal to 1.", param="amount"
            )
        reason = params_.string(params, "reason")
        if reason is not None and reason not in REASONS:
            raise errors.invalid_request(
                f"Invalid reason: must be one of {', '.join(REASONS)}", param="reason"
            )
        return RefundRequest(
            payment_intent=intent,
            charge=charge,
            amount=amount,
            reason=reason,
            metadata=params_.metadata(params.get("metadata")),
        )

    def execute_create(self, request: RefundRequest, *, origin: str = "api") -> Outcome:
        charge = self._refundable_charge(request)
        if charge.refundable <= 0:
            raise errors.charge_already_refunded(charge.id)
        amount = charge.refundable if request.amount is None else request.amount
        if amount > charge.refundable:
            raise errors.refund_exceeds(
                amount,
                charge.refundable,
                charge.currency,
                any_refunded=charge.amount_refunded > 0,
            )
        behaviour = self._state.methods[charge.payment_method].card.refund
        refund = Refund(
            id=objects.new_id("re"),
            seq=len(self._ordered) + 1,
            charge_id=charge.id,
            intent_id=charge.intent_id,
            amount=amount,
            currency=charge.currency,
            created=int(time.time()),
            status="pending" if behaviour == "pending" else "succeeded",
            metadata=dict(request.metadata),
            reason=request.reason,
            origin=origin,
        )
        # Booked now, in the same step as the check: a concurrent refund sees it.
        charge.amount_refunded += amount
        self.refunds[refund.id] = refund
        self._ordered.append(refund)
        if behaviour != "succeeds" and self._settle_seconds is not None:
            self._due[refund.id] = time.monotonic() + self._settle_seconds
        self._state.on_refund_changed(refund, previous=None)
        return self._outcome(refund)

    def _refundable_charge(self, request: RefundRequest) -> Charge:
        if request.charge is not None:
            charge = self._state.charges.get(request.charge)
            if charge is None:
                raise errors.resource_missing("charge", request.charge, "charge", saved=True)
            intent = self._state.intents[charge.intent_id]
        else:
            assert request.payment_intent is not None
            found = self._state.intents.get(request.payment_intent)
            if found is None:
                raise errors.resource_missing(
                    "payment_intent",
                    request.payment_intent,
                    "payment_intent",
                    saved=True,
                    status=400,
                )
            intent = found
        charge = self._state.charges.get(intent.latest_charge or "")
        if intent.status != "succeeded" or charge is None or not charge.captured:
            raise errors.nothing_to_refund(intent.id, intent.status)
        return charge

    # -- later transitions ---------------------------------------------------------------

    def settle(self, refund_id: str, status: str | None = None) -> Refund:
        """Move a refund on as its card says (or to ``status``: succeeded | failed |
        canceled); a refund that is already final stays as it is."""
        refund = self.refunds.get(refund_id)
        if refund is None:
            raise KeyError(refund_id)
        self._due.pop(refund_id, None)
        behaviour = self._state.methods[self._state.charges[refund.charge_id].payment_method]
        target = status or ("failed" if behaviour.card.refund == "fails" else "succeeded")
        if target not in ("succeeded", "failed", "canceled"):
            raise ValueError(f"a refund settles as succeeded, failed or canceled, not {target!r}")
        if refund.status in ("failed", "canceled") or refund.status == target:
            return refund
        previous = refund.status
        refund.status = target
        if target in ("failed", "canceled"):
            # The money comes back to the charge: it may be refunded again.
            self._state.charges[refund.charge_id].amount_refunded -= refund.amount
            refund.failure_reason = _FAILURE_REASON if target == "failed" else None
        self._state.on_refund_changed(refund, previous=previous)
        return refund

    def settle_due(self, now: float) -> None:
        for refund_id, due in list(self._due.items()):
            if due <= now:
                self.settle(refund_id)

    # -- reads -------------------------------------------------------------------------

    def retrieve(self, refund_id: str, params: dict[str, Any]) -> Outcome:
        params_.reject_unknown(params, frozenset())
        refund = self.refunds.get(refund_id)
        if refund is None:
            raise errors.resource_missing("refund", refund_id, "id", saved=False)
        return self._outcome(refund)

    def list_refunds(self, params: dict[str, Any]) -> Outcome:
        params_.reject_unknown(params, _LIST_PARAMS)
        limit = params_.limit(params)
        intent = params_.string(params, "payment_intent")
        charge = params_.string(params, "charge")
        if intent is not None and intent not in self._state.intents:
            raise errors.resource_missing(
                "payment_intent", intent, "payment_intent", saved=False, status=400
            )
        bounds = params_.created_bounds(params)
        candidates = [
            r
            for r in reversed(self._ordered)  # newest first, like Stripe
            if (intent is None or r.intent_id == intent)
            and (charge is None or r.charge_id == charge)
            and params_.within(r.created, bounds)
        ]
        starting_after = params_.string(params, "starting_after")
        ending_before = params_.string(params, "ending_before")
        if starting_after is not None:
            anchor = self._anchor(starting_after, "starting_after")
            candidates = [r for r in candidates if r.seq < anchor]
            page = candidates[:limit]
        elif ending_before is not None:
            anchor = self._anchor(ending_before, "ending_before")
            candidates = [r for r in candidates if r.seq > anchor]
            page = candidates[-limit:]
        else:
            page = candidates[:limit]
        return Outcome(
            200,
            objects.render_list(
                "/v1/refunds",
                [objects.render_refund(r) for r in page],
                has_more=len(candidates) > len(page),
            ),
            intent_id=intent,
            record_id=self._state.intent_record_id(intent) if intent else None,
        )

    def of_charge(self, charge_id: str) -> list[Refund]:
        return [r for r in reversed(self._ordered) if r.charge_id == charge_id]

    def _anchor(self, refund_id: str, param: str) -> int:
        refund = self.refunds.get(refund_id)
        if refund is None:
            raise errors.resource_missing("refund", refund_id, param, saved=False, status=400)
        return refund.seq

    def _outcome(self, refund: Refund) -> Outcome:
        return Outcome(
            200,
            objects.render_refund(refund),
            intent_id=refund.intent_id,
            record_id=self._state.intent_record_id(refund.intent_id),
        )

    # -- the money log -------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Refunds for ``/_sim/movements``: every refund made, and what is still refunded."""
        amount: dict[str, int] = {}
        by_intent: dict[str, int] = {}
        by_record: dict[str, int] = {}
        by_refund_id: dict[str, int] = {}
        for refund in self._ordered:
            by_intent[refund.intent_id] = by_intent.get(refund.intent_id, 0) + 1
            record = self._state.intent_record_id(refund.intent_id)
            if record is not None:
                by_record[record] = by_record.get(record, 0) + 1
            ours = refund.metadata.get(keys.REFUND_ID_METADATA_KEY)
            if ours is not None:
                by_refund_id[ours] = by_refund_id.get(ours, 0) + 1
            if refund.status not in ("failed", "canceled"):
                amount[refund.currency] = amount.get(refund.currency, 0) + refund.amount
        return {
            "total": len(self._ordered),
            "amount": amount,
            "by_intent": by_intent,
            "by_record": by_record,
            "by_refund_id": by_refund_id,
            "items": [
                {
                    "seq": r.seq,
                    "refund": r.id,
                    "charge": r.charge_id,
                    "payment_intent": r.intent_id,
                    "record_id": self._state.intent_record_id(r.intent_id),
                    "refund_id": r.metadata.get(keys.REFUND_ID_METADATA_KEY),
                    "amount": r.amount,
                    "currency": r.currency,
                    "status": r.status,
                    "origin": r.origin,
                }
                for r in self._ordered
            ],
        }
