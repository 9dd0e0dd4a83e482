"""Adyen's stored notifications -> a payment's state and its modifications' outcomes.

Adyen has no read API, and its modifications (capture, cancel, refund) answer ``received``
only: their outcome arrives later as a notification, which payorch stores once, verified
(``adyen_notifications``), and reads back here (``ProviderEventLog``).  The stored items are
Adyen's word; nothing else says whether a modification happened.

A payment's state, from the items about it (``originalReference`` = its pspReference)::

    CANCELLATION / TECHNICAL_CANCEL success=true   canceled
    CAPTURE success=true, no CAPTURE_FAILED        succeeded, amount_received = captured sum
      for its pspReference
    AUTHORISATION success=true (or the payment     requires_capture (manual capture), else
      payorch recorded, while the authorisation    succeeded with the whole amount
      notification is late)
    nothing                                        processing (Adyen has not said yet)

One modification of ours is found by ``merchantReference``: we send our operation id as the
modification's ``reference``, and Adyen carries it back as the notification's
``merchantReference`` (a REFUND_FAILED / CAPTURE_FAILED also by the ``pspReference`` of the
modification it undoes).  Its outcome::

    CAPTURE / CANCELLATION / REFUND success=true    succeeded
    the same, success=false                         refused (Adyen's ``reason``)
    CAPTURE_FAILED / REFUND_FAILED (success=true:   failed later at the scheme (its ``reason``)
      the event code is the failure)

Sets, not sequences: duplicates are one stored row already, and a reorder (a CAPTURE_FAILED
before its CAPTURE, a CAPTURE before the AUTHORISATION) reads the same as the right order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.providers.base import ProviderPayment, ProviderRefund, RecordedPayment
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY, REFUND_ID_METADATA_KEY

Item = Mapping[str, Any]

# The notification that answers each step, and the late failure that can undo it.
ANSWERS = {"capture": "CAPTURE", "cancel": "CANCELLATION", "refund": "REFUND"}
LATE_FAILURES = {"capture": "CAPTURE_FAILED", "refund": "REFUND_FAILED"}
CANCELS = frozenset({"CANCELLATION", "TECHNICAL_CANCEL"})


@dataclass(frozen=True)
class CallOutcome:
    """What Adyen's notifications say of one modification: ``succeeded``, or the failure
    code (``{step}_refused``: Adyen's checks refused it; ``{step}_failed``: it failed later)
    and Adyen's reason."""

    psp_reference: str
    succeeded: bool
    code: str | None = None
    reason: str | None = None


def call_outcome(items: Iterable[Item], *, step: str, reference: str) -> CallOutcome | None:
    """The outcome of our ``step`` sent with ``reference`` (our operation id), or None while
    no notification about it is stored."""
    answer, late = ANSWERS[step], LATE_FAILURES.get(step)
    items = list(items)
    answers = [i for i in items if i.get("eventCode") == answer and _ref(i) == reference]
    psps = {str(i.get("pspReference")) for i in answers}
    failures = [
        i
        for i in items
        if late is not None
        and i.get("eventCode") == late
        and (_ref(i) == reference or str(i.get("pspReference")) in psps)
    ]
    if failures:
        failed = failures[0]
        return CallOutcome(
            str(failed.get("pspReference")),
            False,
            code=f"{step}_failed",
            reason=_reason(failed, f"Adyen reported the {step} failed"),
        )
    if not answers:
        return None
    refused = [i for i in answers if not _success(i)]
    if refused and len(refused) == len(answers):
        return CallOutcome(
            str(refused[0].get("pspReference")),
            False,
            code=f"{step}_refused",
            reason=_reason(refused[0], f"Adyen refused the {step}"),
        )
    done = next(i for i in answers if _success(i))
    return CallOutcome(str(done.get("pspReference")), True)


def payment_state(
    items: Iterable[Item], provider_payment_id: str, recorded: RecordedPayment | None
) -> ProviderPayment:
    """The payment as its stored notifications (and, for what they do not repeat, our record
    of it) say; see the module docstring."""
    items = list(items)
    authorisation = next(
        (
            i
            for i in items
            if i.get("eventCode") == "AUTHORISATION"
            and str(i.get("pspReference")) == provider_payment_id
        ),
        None,
    )
    amount, currency = _amount(authorisation)
    record_id = _ref(authorisation) if authorisation is not None else None
    capture_method = "automatic"
    if recorded is not None:
        # Our record fills what the authorisation does not say (its capture method) or
        # what a late one has not said yet.
        record_id = record_id or recorded.record_id
        amount = amount if authorisation is not None else recorded.amount
        currency = currency or recorded.currency.lower()
        capture_method = recorded.capture_method
    metadata = {RECORD_ID_METADATA_KEY: record_id} if record_id else {}
    base = ProviderPayment(
        id=provider_payment_id,
        status="processing",
        amount=amount,
        currency=currency,
        metadata=metadata,
        capture_method=capture_method,
    )
    if authorisation is not None and not _success(authorisation):
        return _with(base, status="requires_payment_method")
    if any(i.get("eventCode") in CANCELS and _success(i) for i in items):
        return _with(base, status="canceled")
    captured = captured_amount(items)
    if captured > 0:
        return _with(base, status="succeeded", amount_received=captured)
    if authorisation is None and recorded is None:
        return base  # nothing said yet: processing
    if capture_method == "manual":
        return _with(base, status="requires_capture", amount_capturable=amount)
    return _with(base, status="succeeded", amount_received=amount)


def captured_amount(items: Iterable[Item]) -> int:
    """The sum of successful captures that no CAPTURE_FAILED undid, each capture (its
    pspReference) counted once however often it was delivered."""
    items = list(items)
    failed = {str(i.get("pspReference")) for i in items if i.get("eventCode") == "CAPTURE_FAILED"}
    captures: dict[str, int] = {}
    for item in items:
        psp = str(item.get("pspReference"))
        if item.get("eventCode") == "CAPTURE" and _success(item) and psp not in failed:
            captures.setdefault(psp, _amount(item)[0])
    return sum(captures.values())


def refunds_of(
    items: Iterable[Item], provider_payment_id: str, *, record_id: str | None
) -> list[ProviderRefund]:
    """Every refund the stored notifications name for the payment, newest first (the order
    received, reversed).  Our refund's id is the ``merchantReference`` (the reference we
    sent); a refund made without one carries the payment's reference instead, and has no
    ``payorch_refund_id``."""
    items = list(items)
    first: dict[str, Item] = {}
    for item in items:
        if item.get("eventCode") == "REFUND":
            first.setdefault(str(item.get("pspReference")), item)
    refunds = []
    for psp, item in first.items():
        reference = _ref(item)
        refunds.append(
            refund_from(
                item,
                provider_payment_id,
                refund_outcome(items, psp),
                refund_id=reference if reference != record_id else None,
            )
        )
    refunds.reverse()
    return refunds


def refund_outcome(items: Iterable[Item], psp_reference: str) -> CallOutcome | None:
    """The outcome of the refund Adyen named ``psp_reference`` (None: no notification yet)."""
    items = [i for i in items if str(i.get("pspReference")) == psp_reference]
    late = next((i for i in items if i.get("eventCode") == "REFUND_FAILED"), None)
    if late is not None:
        return CallOutcome(
            psp_reference, False, "refund_failed", _reason(late, "Adyen reported the refund failed")
        )
    answers = [i for i in items if i.get("eventCode") == "REFUND"]
    if not answers:
        return None
    if any(_success(i) for i in answers):
        return CallOutcome(psp_reference, True)
    return CallOutcome(
        psp_reference, False, "refund_refused", _reason(answers[0], "Adyen refused the refund")
    )


def refund_from(
    item: Item,
    provider_payment_id: str,
    outcome: CallOutcome | None,
    *,
    refund_id: str | None,
) -> ProviderRefund:
    """One refund as its notification (and its outcome, None: pending) says."""
    value, currency = _amount(item)
    status = "pending"
    failure_reason = failure_message = None
    if outcome is not None:
        status = "succeeded" if outcome.succeeded else "failed"
        failure_reason, failure_message = outcome.code, outcome.reason
    return ProviderRefund(
        id=str(item.get("pspReference")),
        provider_payment_id=provider_payment_id,
        amount=value,
        currency=currency,
        status=status,
        metadata={REFUND_ID_METADATA_KEY: refund_id} if refund_id else {},
        failure_reason=failure_reason,
        failure_message=failure_message,
        raw=dict(item),
    )


def _with(payment: ProviderPayment, **changes: Any) -> ProviderPayment:
    return replace(payment, **changes)


def _success(item: Item) -> bool:
    return str(item.get("success") or "").lower() == "true"


def _ref(item: Item | None) -> str | None:
    value = None if item is None else item.get("merchantReference")
    return None if value in (None, "") else str(value)


def _reason(item: Item, default: str) -> str:
    reason = item.get("reason")
    return str(reason) if reason else default


def _amount(item: Item | None) -> tuple[int, str]:
    raw = item.get("amount") if item is not None else None
    amount: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    return int(amount.get("value") or 0), str(amount.get("currency") or "").lower()
