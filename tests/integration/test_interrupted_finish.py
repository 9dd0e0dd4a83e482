"""A finish an interruption split from its report (real database, scripted fake provider).

Celery's soft time limit raises asynchronously, anywhere: also after a finish's commit
reached the server and before its metric and log line.  The row is the truth: the run
reports the finish it finds there under its own token, instead of handing the work back
and logging ``fenced_out`` for an operation it finished itself.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import pytest
import structlog
from structlog.testing import LogCapture

from orchestrator.bootstrap import Container
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.metrics import OPERATIONS_FINISHED, PAYMENTS_FINISHED
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.refunds import reload_operation, request_refund, succeeded_payment
from tests.harness.seeds import accept, new_merchant, reload


class Interrupted(Exception):
    """Stands for Celery's SoftTimeLimitExceeded."""


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider)
    yield built
    built.close()


class CutAtCommit:
    """A unit of work whose commit raises ``Interrupted`` once, at the commit of the unit
    that called a repository's ``finish``: ``after`` the server committed, as a signal
    landing in the commit's return can, or ``before`` it, when the whole unit rolls back."""

    def __init__(self, uow: UnitOfWork, cut: Cut) -> None:
        self._uow = uow
        self._cut = cut
        self._finishes = False

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._uow, name)
        return _Watched(found, self) if name in ("leases", "operations") else found

    def commit(self) -> None:
        cut_here = self._finishes and not self._cut.fired
        if cut_here and self._cut.when == "before":
            self._cut.fired = True
            raise Interrupted()
        self._uow.commit()
        if cut_here:
            self._cut.fired = True
            raise Interrupted()


class _Watched:
    def __init__(self, repository: Any, unit: CutAtCommit) -> None:
        self._repository = repository
        self._unit = unit

    def __getattr__(self, name: str) -> Any:
        if name == "finish":
            self._unit._finishes = True
        return getattr(self._repository, name)


@dataclass
class Cut:
    when: Literal["before", "after"]
    fired: bool = False


@contextmanager
def info_lines() -> Iterator[list[dict[str, Any]]]:
    """The log lines at INFO and above, as structlog builds them (the suite logs WARNING)."""
    saved = structlog.get_config()
    capture = LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    )
    try:
        yield capture.entries
    finally:
        structlog.configure(**saved)


def run(container: Container, record_id: str, token: int, cut: Cut) -> tuple[Any, list[str]]:
    @contextmanager
    def unit() -> Iterator[Any]:
        with container.uow() as uow:
            yield CutAtCommit(uow, cut)

    runner = replace(container.runner(), uow=unit)
    with info_lines() as logs:
        result = process_operation(
            runner,
            record_id,
            token,
            owner="test-worker",
            sleep=lambda _s: None,
            rng=random.Random(5),
            interruptions=(Interrupted,),
        )
    assert cut.fired
    return result, [line["event"] for line in logs]


def test_a_charge_interrupted_after_its_finish_committed_is_reported_finished(container):
    record = accept(container, new_merchant(container), "order-cut-after-finish")

    before = PAYMENTS_FINISHED.labels(status="succeeded")._value.get()
    cut = Cut("after")
    result, events = run(container, record.id, record.lease_token, cut)

    assert result is ProcessResult.COMPLETED
    assert events.count("payment_finished") == 1
    assert "fenced_out" not in events and "payment_deferred" not in events
    assert PAYMENTS_FINISHED.labels(status="succeeded")._value.get() == before + 1
    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED


def test_a_refund_interrupted_after_its_finish_committed_is_reported_finished(container):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-refunded", amount=1500)
    refund = request_refund(container, merchant, payment.id, "refund-cut").record

    before = OPERATIONS_FINISHED.labels(kind="refund", status="succeeded")._value.get()
    result, events = run(container, refund.id, refund.lease_token, Cut("after"))

    assert result is ProcessResult.COMPLETED
    assert events.count("refund_finished") == 1
    assert "fenced_out" not in events and "operation_deferred" not in events
    assert OPERATIONS_FINISHED.labels(kind="refund", status="succeeded")._value.get() == before + 1
    assert reload_operation(container, refund.id).status is OperationStatus.SUCCEEDED


def test_an_interruption_before_the_finish_commits_still_hands_the_work_back(container):
    """The other side of the same check: a finish that did not land is not reported."""
    record = accept(container, new_merchant(container), "order-cut-before-finish")
    cut = Cut("before")

    result, events = run(container, record.id, record.lease_token, cut)

    assert result is ProcessResult.DEFERRED
    assert "payment_finished" not in events and "fenced_out" not in events
    assert "payment_deferred" in events
    assert reload(container, record.id).status is PaymentStatus.PROCESSING
