"""The provider's own books, as the chaos invariants read them: which money moved for which of
our records, and what the provider saw of one record (shown when an invariant fails).

One reader per simulator, behind one small protocol, so ``invariants.check`` counts money
the same way whichever provider the payments went to:

    StripeBooks   the Stripe simulator: charges per record (``/_sim/movements`` by_record;
                  its books do not carry a charge's amount)
    AdyenBooks    the Adyen simulator: authorisations by ``reference`` (our record id), each
                  with its amount and currency; every ``/payments`` it executed per reference;
                  its captures and refunds (``modifications``), each tied to the operation of
                  ours that asked for it, and every one it executed (``executed_modifications``)

A capture or refund at Adyen names our operation only in its notification (the ``reference``
we sent comes back as ``merchantReference``); its movement names the payment.  The two meet
on the modification's own pspReference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from devtools.adyen_simulator import AdyenSimulatorAdmin
from devtools.simulator import SimulatorAdmin


@dataclass(frozen=True)
class Modification:
    """A capture or refund that stands at Adyen: for which record, asked by which of our
    operations (None: no notification names one), for how much."""

    record_id: str
    operation_id: str | None
    psp_reference: str
    amount: int
    currency: str


@dataclass(frozen=True)
class Charge:
    """Money the provider moved for one of our records (a Stripe charge, an Adyen
    authorisation that stands)."""

    record_id: str
    amount: int | None  # None: these books do not say
    currency: str | None  # upper case, as providers spell it


class ProviderBooks(Protocol):
    name: str  # the provider's name, as payorch records it (``payments.provider``)

    def charges(self) -> list[Charge]:
        """Every charge that stands, in no particular order."""
        ...

    def history(self, record_id: str) -> list[str]:
        """What the provider received about ``record_id``, one line per request."""
        ...


class StripeBooks:
    name = "stripe"

    def __init__(self, admin: SimulatorAdmin) -> None:
        self._admin = admin

    def charges(self) -> list[Charge]:
        by_record: dict[str, int] = self._admin.movements()["by_record"]
        return [
            Charge(record_id, None, None)
            for record_id, count in by_record.items()
            for _ in range(int(count))
        ]

    def history(self, record_id: str) -> list[str]:
        return [
            "#{seq} {method} {operation} key={idempotency_key} -> {status}"
            " fault={fault} {duration_ms}ms".format(**request)
            for request in self._admin.requests(record_id=record_id)
        ]


class AdyenBooks:
    name = "adyen"

    def __init__(self, admin: AdyenSimulatorAdmin) -> None:
        self._admin = admin

    def charges(self) -> list[Charge]:
        # Adyen does not enforce unique references: two keys for one record make two
        # authorisations, each its own item here (what "0 double authorisations" counts).
        items = self._admin.movements()["authorisations"]["items"]
        return [
            Charge(str(item["reference"]), int(item["amount"]["value"]), item["amount"]["currency"])
            for item in items
            if not item["failed"]
        ]

    def executed(self) -> Counter[str]:
        """``/payments`` requests Adyen executed per reference, whatever their result (a
        refusal included): more than one means a second key was sent for one record."""
        return Counter(str(payment["reference"]) for payment in self._admin.payments())

    def modifications(self, kind: str) -> list[Modification]:
        """Every ``kind`` (``capture`` | ``refund``) that stands: a late CAPTURE_FAILED /
        REFUND_FAILED undoes one (its movement is then ``failed``)."""
        named = self._operations_by_psp()
        items = self._admin.movements()[f"{kind}s"]["items"]
        return [
            Modification(
                str(item["reference"]),
                named.get(str(item["pspReference"])),
                str(item["pspReference"]),
                int(item["amount"]["value"]),
                str(item["amount"]["currency"]),
            )
            for item in items
            if not item["failed"]
        ]

    def executed_modifications(self, event_code: str) -> dict[str, set[str]]:
        """Per operation id (the ``merchantReference``), the modifications Adyen executed for
        it, whatever their result (``CAPTURE`` or ``REFUND``; a refusal is one too): one
        notification item per execution, a replay under the same key makes none."""
        executed: dict[str, set[str]] = {}
        for item in self._admin.notification_items():
            if item["eventCode"] == event_code:
                operation = str(item["merchantReference"])
                executed.setdefault(operation, set()).add(str(item["pspReference"]))
        return executed

    def _operations_by_psp(self) -> dict[str, str]:
        return {
            str(item["pspReference"]): str(item["merchantReference"])
            for item in self._admin.notification_items()
            if item["eventCode"] in ("CAPTURE", "REFUND")
        }

    def history(self, record_id: str, *, operations: Collection[str] = ()) -> list[str]:
        """What Adyen received about the record and, named by ``operations`` (our capture
        and refund ids: the ``reference`` of a modification), about its modifications."""
        about = {record_id, *operations}
        lines = [
            "#{seq} {method} {path} key={idempotency_key} -> {status} fault={fault}"
            " replayed={replayed}".format(**request)
            for request in self._admin.requests()
            if request["reference"] in about
        ]
        lines += [
            f"notification {d['eventCode']} success={d['success']} psp={d['pspReference']}"
            f" ref={d['item'].get('merchantReference')}"
            f" attempt {d['attempt']} -> {d['status']} {d['outcome']} fault={d['fault']}"
            for d in self._admin.notification_deliveries()
            if d["item"].get("merchantReference") in about
        ]
        return lines
