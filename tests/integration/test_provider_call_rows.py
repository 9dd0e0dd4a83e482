"""Provider-call rows ride along with the run's next fenced write (``engine.call_log``):
the rows must still be there when that write does not commit, or never comes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.bootstrap import Container
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.protocol_trace import traced_checkouts
from tests.harness.seeds import accept, force, new_merchant, reload


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider)
    yield built
    built.close()


def calls(container: Container, payment_id: str) -> list[tuple[str, str]]:
    with container.uow() as uow:
        return [(c.operation, c.outcome) for c in uow.history.provider_calls(payment_id)]


def lease_events(container: Container, payment_id: str) -> list[str]:
    with container.uow() as uow:
        return [e.event for e in uow.history.lease_events(payment_id)]


def run(container: Container, payment_id: str, token: int) -> ProcessResult:
    return process_payment(container.runner(), payment_id, token, sleep=lambda _s: None)


def test_a_completed_charge_records_each_call_with_the_step_after_it(container):
    record = accept(container, new_merchant(container), "rows-1")

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    assert calls(container, record.id) == [("create", "ok"), ("confirm", "ok")]
    assert lease_events(container, record.id) == ["claim", "finish"]


def test_a_fenced_out_finish_still_records_the_call_it_followed(container, provider):
    record = accept(container, new_merchant(container), "rows-2")
    original_confirm = provider.confirm_intent

    def confirm_then_lose_the_lease(intent_id: str, *, record_id: str, attempt: int):
        result = original_confirm(intent_id, record_id=record_id, attempt=attempt)
        current = reload(container, record_id)
        force(container, record_id, lease_token=current.lease_token + 1, lease_owner="other")
        return result

    provider.confirm_intent = confirm_then_lose_the_lease  # type: ignore[method-assign]

    assert run(container, record.id, record.lease_token) is ProcessResult.FENCED

    # The finish rolled back (no finish row, no outcome); the confirm's evidence did not.
    assert calls(container, record.id) == [("create", "ok"), ("confirm", "ok")]
    assert lease_events(container, record.id) == ["claim"]


def test_a_run_that_fails_after_a_call_still_records_it(container, provider):
    record = accept(container, new_merchant(container), "rows-3")

    def broken_confirm(intent_id: str, *, record_id: str, attempt: int):
        raise RuntimeError("a bug after the create")

    provider.confirm_intent = broken_confirm  # type: ignore[method-assign]

    with pytest.raises(RuntimeError):
        run(container, record.id, record.lease_token)

    recorded = calls(container, record.id)
    assert [operation for operation, _ in recorded] == ["create", "confirm"]
    assert recorded[1][1] != "ok"
    # The confirm number was durable before the call: the next holder queries first.
    assert reload(container, record.id).confirm_attempts == 1


@pytest.mark.postgres
def test_each_steps_call_rows_travel_with_its_commit(make_postgres_database, provider, tmp_path):
    """A charge's round trips, from libpq's protocol trace of every checkout: the claim
    (1); the write that stores the intent, with the create's row (BEGIN, the UPDATE, the
    row with the COMMIT: 3); the finish, with the confirm's row (BEGIN, the settlement,
    the event number, the final UPDATE, the deferred rows with the COMMIT: 5).  Measured
    on the second charge: the first prepares the statements on the connection."""
    container = build_container(make_postgres_database(), provider=provider)
    try:
        merchant = new_merchant(container)
        with traced_checkouts(container.engine, tmp_path) as traces:
            for n in range(2):
                record = accept(container, merchant, f"trips-{n}")
                traces.active = n == 1
                assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED
                traces.active = False
        assert calls(container, record.id) == [("create", "ok"), ("confirm", "ok")]
        assert len(traces.paths) == 3  # one checkout per transaction
        assert traces.round_trips() == 9
    finally:
        container.close()
