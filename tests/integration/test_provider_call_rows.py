"""Provider-call rows ride along with the run's next fenced write (``engine.call_log``):
the rows must still be there when that write does not commit, or never comes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

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
    original_confirm = provider.confirm_payment

    def confirm_then_lose_the_lease(
        provider_payment_id: str, *, record_id: str, attempt: int, **options
    ):
        result = original_confirm(
            provider_payment_id, record_id=record_id, attempt=attempt, **options
        )
        current = reload(container, record_id)
        force(container, record_id, lease_token=current.lease_token + 1, lease_owner="other")
        return result

    provider.confirm_payment = confirm_then_lose_the_lease  # type: ignore[method-assign]

    assert run(container, record.id, record.lease_token) is ProcessResult.FENCED

    # The finish rolled back (no finish row, no outcome); the confirm's evidence did not.
    assert calls(container, record.id) == [("create", "ok"), ("confirm", "ok")]
    assert lease_events(container, record.id) == ["claim"]


def test_a_run_that_fails_after_a_call_still_records_it(container, provider):
    record = accept(container, new_merchant(container), "rows-3")

    def broken_confirm(provider_payment_id: str, *, record_id: str, attempt: int, **options):
        raise RuntimeError("a bug after the create")

    provider.confirm_payment = broken_confirm  # type: ignore[method-assign]

    with pytest.raises(RuntimeError):
        run(container, record.id, record.lease_token)

    recorded = calls(container, record.id)
    assert [operation for operation, _ in recorded] == ["create", "confirm"]
    assert recorded[1][1] != "ok"
    # The confirm number was durable before the call: the next holder queries first.
    assert reload(container, record.id).confirm_attempts == 1


@pytest.fixture
def pg_container(make_postgres_database, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(make_postgres_database(), provider=provider)
    yield built
    built.close()


def lose_the_lease_after(container: Container, provider: FakeProvider, method: str) -> None:
    """``provider.method`` answers, then another holder takes the record's lease."""
    original = getattr(provider, method)

    def then_lose_the_lease(*args, **kwargs):
        result = original(*args, **kwargs)
        current = reload(container, kwargs["record_id"])
        force(container, current.id, lease_token=current.lease_token + 1, lease_owner="other")
        return result

    setattr(provider, method, then_lose_the_lease)


@pytest.mark.postgres
def test_a_fenced_out_intent_write_records_the_create_once(pg_container, provider):
    """The write after the create carries the create's row in its own statement
    (``carried_calls``), which inserts it even when the UPDATE finds the lease taken: the
    row is stored by that statement and must not be written again."""
    record = accept(pg_container, new_merchant(pg_container), "rows-4")
    lose_the_lease_after(pg_container, provider, "create_payment")

    assert run(pg_container, record.id, record.lease_token) is ProcessResult.FENCED

    assert calls(pg_container, record.id) == [("create", "ok")]
    assert reload(pg_container, record.id).provider_payment_id is None


@pytest.mark.postgres
def test_a_failed_intent_write_leaves_the_create_to_be_written_alone(pg_container):
    """A database error in the statement that carries the row stores none of it (one
    statement, one transaction): the row is written on its own afterwards."""
    record = accept(pg_container, new_merchant(pg_container), "rows-5")
    with pg_container.engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE FUNCTION refuse_intents() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.provider_payment_id IS NOT NULL THEN RAISE EXCEPTION 'refused'; END IF; "
            "RETURN NEW; END $$"
        )
        connection.exec_driver_sql(
            "CREATE TRIGGER refuse_intents BEFORE UPDATE ON payments "
            "FOR EACH ROW EXECUTE FUNCTION refuse_intents()"
        )

    with pytest.raises(sa.exc.DBAPIError, match="refused"):
        run(pg_container, record.id, record.lease_token)

    assert calls(pg_container, record.id) == [("create", "ok")]
    assert reload(pg_container, record.id).provider_payment_id is None


@pytest.mark.postgres
def test_each_steps_call_rows_travel_with_its_commit(
    make_postgres_database, provider, tmp_path, monkeypatch
):
    """A charge's round trips, from libpq's protocol trace of every checkout: the claim
    (1); the write that stores the intent, one statement that also inserts the create's
    row (1); the finish, with the confirm's row (BEGIN, the settlement, which also reads
    the event number under its row lock, the final UPDATE, the deferred rows with the
    COMMIT: 4).  Measured on the third
    charge: the first ones prepare the statements on the pool's connections (the circuit's
    first read, ``engine.circuits``, takes one of its own)."""
    # The circuit's state is read once a second per process, not per charge: held for the
    # test, so a slow machine does not count that read in the measured charge.
    monkeypatch.setattr("orchestrator.engine.circuits.CACHE_SECONDS", 600.0)
    container = build_container(make_postgres_database(), provider=provider)
    try:
        merchant = new_merchant(container)
        with traced_checkouts(container.engine, tmp_path) as traces:
            for n in range(3):
                record = accept(container, merchant, f"trips-{n}")
                traces.active = n == 2
                assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED
                traces.active = False
        assert calls(container, record.id) == [("create", "ok"), ("confirm", "ok")]
        assert len(traces.paths) == 3  # one checkout per transaction
        assert traces.round_trips() == 6
    finally:
        container.close()
