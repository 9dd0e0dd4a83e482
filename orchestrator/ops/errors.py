"""Why an operator command was refused.  Nothing was written when one of these is raised::

OpsError
├── InvalidReason            the reason is empty, too long or unprintable (HTTP 400)
├── InvalidFilter            a bulk retry's status, since or connector    (HTTP 400)
├── PaymentNotFound          no payment has this id                       (HTTP 404)
├── UnknownConnectorAccount  a bulk retry names an account that is not    (HTTP 404)
├── PreconditionFailed       If-Match names a lease state that is gone    (HTTP 412)
└── OpsConflict              the payment's state forbids the command      (HTTP 409)
    ├── PaymentFinished        succeeded or failed: nothing left to do
    ├── PaymentNeedsAttention  takeover of a parked payment: use retry
    ├── PaymentNotParked       retry of a payment that is not parked
    ├── LeaseStillLive         takeover of a live lease without force
    └── ConcurrentChange       the lease token moved while we looked
"""

from __future__ import annotations

from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.text import text_problem

MAX_REASON_LENGTH = 1000  # audit_log.reason


class OpsError(Exception):
    def __init__(self, message: str, record: PaymentRecord | OperationRecord | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.record = record


class InvalidReason(OpsError):
    pass


class InvalidFilter(OpsError):
    """A bulk retry's filter that cannot be right (a status that is not retried, a time
    without its zone, a connector id of the wrong shape)."""


class PaymentNotFound(OpsError):
    pass


class UnknownConnectorAccount(OpsError):
    """A bulk retry's connector account that does not exist: a typo would otherwise match
    nothing and look like "nothing parked"."""


class PreconditionFailed(OpsError):
    """The operator's ``If-Match`` tag is stale: someone (a worker, the sweeper, another
    operator) changed the lease since the operator looked."""


class OpsConflict(OpsError):
    pass


class PaymentFinished(OpsConflict):
    pass


class PaymentNeedsAttention(OpsConflict):
    pass


class PaymentNotParked(OpsConflict):
    pass


class LeaseStillLive(OpsConflict):
    pass


class ConcurrentChange(OpsConflict):
    pass


def clean_reason(reason: str) -> str:
    """Every operator action says why; the audit row is useless without it."""
    cleaned = reason.strip()
    if not cleaned:
        raise InvalidReason("Give a reason: it is recorded in the audit trail.")
    if len(cleaned) > MAX_REASON_LENGTH:
        raise InvalidReason(f"The reason may have at most {MAX_REASON_LENGTH} characters.")
    problem = text_problem(cleaned)  # NUL cannot even be stored: refused before any write
    if problem is not None:
        raise InvalidReason(f"The reason {problem}.")
    return cleaned


class InvalidCursor(OpsError):
    """A list cursor that this API did not hand out (HTTP 400)."""
