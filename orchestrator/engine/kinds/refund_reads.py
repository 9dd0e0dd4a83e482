"""What the refund and the refund sync both read at the provider: a provider payment's refunds,
page by page under the lease, and what one provider refund's status means.  Shared, so
that a refund asked through payorch and a refund made outside it are read and judged alike.

``refund_pages``: every page of a provider payment's refunds (newest first), the lease renewed
before each request.  A page that failed proves nothing, neither "ours is absent" nor "ours is
there"::

    429 (Retryable) ....... the lease backs off (or hands the work back: Deferred), then
    timeout, 5xx             ``None`` is yielded: the caller gives up (stops iterating) or
    (OutcomeUnknown)         reads the same page again (iterates on); ``on_unknown`` is
                             told of an unknown outcome first (the refund counts it)
    refused (Permanent) ... the operation parks for an operator

``judge_refund``: succeeded, failed (the provider's failure reason), or still pending at the
provider; a status payorch does not know parks the operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from orchestrator.domain.operations import OperationRecord, OperationStatus
from orchestrator.engine.lease import Lease, Parked, describe_error
from orchestrator.providers.base import (
    OutcomeUnknown,
    PaymentProvider,
    Permanent,
    ProviderRefund,
    RefundPage,
    Retryable,
)

PAGE_SIZE = 100
# The protocol's refund statuses: pending, requires_action, succeeded, failed, canceled.
_PENDING = frozenset({"pending", "requires_action"})
_FAILED = frozenset({"failed", "canceled"})


def refund_pages(
    lease: Lease[OperationRecord],
    provider: PaymentProvider,
    provider_payment_id: str,
    *,
    label: str,
    on_unknown: Callable[[OutcomeUnknown], None] | None = None,
) -> Iterator[RefundPage | None]:
    """The provider payment's refunds, a page at a time; ``None`` for a page that failed (see the
    module docstring).  ``label`` starts the reason a backoff is logged and stored with."""
    cursor: str | None = None
    while True:
        lease.renew()
        page: RefundPage | None = None
        try:
            page = provider.list_refunds(
                provider_payment_id, starting_after=cursor, limit=PAGE_SIZE
            )
        except Retryable as error:
            lease.wait(error.retry_after, f"{label}: {describe_error(error)}")
        except OutcomeUnknown as error:
            if on_unknown is not None:
                on_unknown(error)
            lease.wait(None, f"{label}: {describe_error(error)}")
        except Permanent as error:
            raise Parked(f"cannot list refunds: {describe_error(error)}") from error
        yield page
        if page is None:
            continue  # the same page again, if the caller asks for it
        if not page.has_more or not page.refunds:
            return
        cursor = page.refunds[-1].id


@dataclass(frozen=True)
class RefundVerdict:
    """What a provider refund's status means: ``outcome`` succeeded or failed (with the
    failure recorded on the refund row), or None while the provider has not settled it."""

    outcome: OperationStatus | None
    failure_code: str | None = None
    failure_message: str | None = None

    @property
    def pending(self) -> bool:
        return self.outcome is None


def judge_refund(refund: ProviderRefund) -> RefundVerdict:
    """Raises Parked for a status payorch does not know (an operator looks)."""
    if refund.status == "succeeded":
        return RefundVerdict(OperationStatus.SUCCEEDED)
    if refund.status in _FAILED:
        return RefundVerdict(
            OperationStatus.FAILED,
            failure_code=refund.failure_reason or f"refund_{refund.status}",
            failure_message=refund.failure_message
            or f"the provider's refund {refund.id} is {refund.status}",
        )
    if refund.status in _PENDING:
        return RefundVerdict(None)
    raise Parked(f"provider refund {refund.id} has an unknown status {refund.status!r}")
