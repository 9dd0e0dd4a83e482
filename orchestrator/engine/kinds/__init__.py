"""Operation kinds: each supplies its steps and how it reads the provider's truth.

    charge/         create + confirm one provider payment (lease on the payment row): the
                    recovery-point loop in its __init__, one module per step
    capture.py      capture an authorised provider payment (manual capture; its operation row)
    cancel.py       cancel a provider payment: release an authorisation, or stop an unfinished
                    charge before it moves money (its operation row)
    payment_step.py  what capture and cancel share: one call on the provider payment, query first
    payment_match.py, payment_reading.py, lost_create_lookup.py
                    the charge's: is a provider payment ours, what its status means, and the
                    lookup after a create whose outcome is unknown
    refund.py       one refund of a succeeded payment (lease on its operation row)
    refund_sync.py  record the refunds made at the provider outside payorch (its own row)
    refund_reads.py what refund and refund_sync share: a provider payment's refunds page by page,
                    and what a provider refund's status means
    refund_books.py what they share in the finish: money, ledger, event, stored answer
    operation_row.py  what every kind on an operation row shares: its lease's place, its
                    log fields, and (OperationSteps) what one run of a kind's steps holds

``run_kind`` picks the kind an id names and runs it under the engine.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operations import OperationKindName, kind_of
from orchestrator.engine.kinds.cancel import CANCEL
from orchestrator.engine.kinds.capture import CAPTURE
from orchestrator.engine.kinds.charge import CHARGE
from orchestrator.engine.kinds.refund import REFUND
from orchestrator.engine.kinds.refund_sync import REFUND_SYNC
from orchestrator.engine.lease import ProcessResult
from orchestrator.engine.runner import Runner, run_operation
from orchestrator.logging import get_logger

log = get_logger(__name__)

OPERATION_KINDS: dict[OperationKindName, Any] = {
    OperationKindName.REFUND: REFUND,
    OperationKindName.REFUND_SYNC: REFUND_SYNC,
    OperationKindName.CAPTURE: CAPTURE,
    OperationKindName.CANCEL: CANCEL,
}


def process_operation(
    runner: Runner, operation_id: str, lease_token: int, **options: Any
) -> ProcessResult:
    """Run the operation ``operation_id`` names (its kind is in its id)."""
    if is_payment_id(operation_id):
        return run_operation(runner, CHARGE, operation_id, lease_token, **options)
    name = kind_of(operation_id)
    kind = OPERATION_KINDS.get(name) if name is not None else None
    if kind is None:
        log.warning("operation_kind_unknown", operation_id=operation_id)
        return ProcessResult.NOT_CLAIMED
    return run_operation(runner, kind, operation_id, lease_token, **options)
