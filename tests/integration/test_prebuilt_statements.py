"""The worker's prebuilt statements on psycopg itself (orchestrator.db.prebuilt) answer as
SQLAlchemy's execution does: the same row, the same types, SQLAlchemy's exceptions, a lost
connection invalidated, every statement seen by ``before_cursor_execute``.  Real
PostgreSQL, and SQLite through SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from orchestrator.bootstrap import Container
from orchestrator.db import prebuilt
from orchestrator.db.tables import ledger_lines, payment_outcomes, payments
from tests.harness.containers import build_container
from tests.harness.protocol_trace import round_trips, start_trace
from tests.harness.seeds import accept, new_merchant

BY_ID = sa.select(payments).where(payments.c.id == sa.bindparam("p_id"))
MARK = (
    payments.update()
    .where(payments.c.id == sa.bindparam("p_id"))
    .values(last_error=sa.bindparam("p_error"), next_action=None)
    .returning(payments.c.id, payments.c.last_error, payments.c.next_action)
)
OUTCOME = payment_outcomes.insert()
LEDGER = ledger_lines.insert()


@pytest.fixture
def container(database_url: str) -> Iterator[Container]:
    built = build_container(database_url)
    yield built
    built.close()


def _payment(container: Container) -> str:
    return accept(container, new_merchant(container), "prebuilt-1").id


def _outcome(payment_id: str, provider_payment_id: str) -> dict[str, Any]:
    return {
        "payment_id": payment_id,
        "client_id": "cli_x",
        "provider": "stripe",
        "provider_payment_id": provider_payment_id,
        "provider_charge_id": None,
        "outcome": "succeeded",
        "amount": 1000,
        "currency": "usd",
        "failure_code": None,
        "decline_code": None,
        "created_at": datetime.now(UTC),
    }


def test_a_row_reads_as_sqlalchemy_reads_it(container: Container) -> None:
    payment_id = _payment(container)
    with container.engine.connect() as connection:
        expected = dict(connection.execute(BY_ID, {"p_id": payment_id}).one()._mapping)
        found = prebuilt.first(connection, BY_ID, {"p_id": payment_id})
    assert found is not None and dict(found) == expected
    assert found["created_at"].utcoffset() is not None  # UTC-aware through the processors
    assert isinstance(found["metadata"], dict)  # the JSON document, decoded


def test_values_go_through_the_bind_processors_and_none_is_stored(container: Container) -> None:
    payment_id = _payment(container)
    with container.engine.begin() as connection:
        row = prebuilt.first(connection, MARK, {"p_id": payment_id, "p_error": "x" * 10})
        assert row == {"id": payment_id, "last_error": "x" * 10, "next_action": None}
        assert prebuilt.first(connection, MARK, {"p_id": "pay_none", "p_error": ""}) is None
        now = datetime.now(UTC)
        lines = [
            {
                "payment_id": payment_id,
                "account": a,
                "amount": n,
                "currency": "usd",
                "created_at": now,
            }
            for a, n in (("a", 10), ("b", -10))
        ]
        prebuilt.execute_many(connection, LEDGER, lines)
    with container.engine.connect() as connection:
        stored = connection.execute(
            sa.select(ledger_lines.c.account, ledger_lines.c.amount)
            .where(ledger_lines.c.payment_id == payment_id)
            .order_by(ledger_lines.c.account)
        ).all()
    assert [tuple(r) for r in stored] == [("a", 10), ("b", -10)]


def test_a_constraint_violation_is_sqlalchemys_integrity_error_and_rolls_back(
    container: Container,
) -> None:
    payment_id = _payment(container)
    values = _outcome(payment_id, "pi_1")
    with container.engine.connect() as connection:
        with connection.begin():
            prebuilt.execute(connection, OUTCOME, values)
        with pytest.raises(sa.exc.IntegrityError), connection.begin():
            prebuilt.execute(connection, OUTCOME, values)  # one outcome per payment
        # Rolled back, and the same connection works on.
        count = sa.select(sa.func.count()).select_from(payment_outcomes)
        assert prebuilt.scalar(connection, count, {}) == 1


@pytest.mark.postgres
def test_a_lost_connection_is_invalidated_as_sqlalchemy_would(make_postgres_database) -> None:
    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)
        with container.engine.connect() as connection:
            pid = prebuilt.scalar(connection, sa.select(sa.func.pg_backend_pid()), {})
            url = container.engine.url.set(drivername="postgresql")
            with psycopg.connect(url.render_as_string(hide_password=False)) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                admin.commit()
            with pytest.raises(sa.exc.OperationalError) as raised:
                prebuilt.first(connection, BY_ID, {"p_id": payment_id})
            assert raised.value.connection_invalidated
            assert connection.invalidated
        with container.engine.connect() as connection:  # the pool hands out a live one
            assert prebuilt.first(connection, BY_ID, {"p_id": payment_id}) is not None
    finally:
        container.close()


def test_every_statement_is_seen_by_before_cursor_execute(container: Container) -> None:
    payment_id = _payment(container)
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    event.listen(container.engine, "before_cursor_execute", count)
    try:
        with container.engine.begin() as connection:
            prebuilt.first(connection, BY_ID, {"p_id": payment_id})
            prebuilt.execute(connection, MARK, {"p_id": payment_id, "p_error": "e"})
    finally:
        event.remove(container.engine, "before_cursor_execute", count)
    assert [word for word in seen if word != "BEGIN"] == ["SELECT", "UPDATE"]  # SQLite's BEGIN


# -- deferred answers (UnitOfWork.defer_answers: psycopg's pipeline mode on PostgreSQL) ------


def _outcomes(container: Container) -> int:
    with container.uow() as uow:
        count = sa.select(sa.func.count()).select_from(payment_outcomes)
        return int(prebuilt.scalar(uow.connection, count, {}))


def test_deferred_statements_commit_with_the_unit(container: Container) -> None:
    payment_id = _payment(container)
    with container.uow() as uow:
        uow.defer_answers()
        prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_1"))
        uow.commit()
    assert _outcomes(container) == 1


def test_a_deferred_statements_failure_is_raised_at_the_commit_and_nothing_stays(
    container: Container,
) -> None:
    payment_id = _payment(container)
    with container.uow() as uow:
        prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_1"))
        uow.commit()

    def mark_and_add_a_second_outcome() -> None:
        with container.uow() as uow:
            prebuilt.first(uow.connection, MARK, {"p_id": payment_id, "p_error": "deferred"})
            uow.defer_answers()
            prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_2"))
            uow.commit()

    # One outcome per payment: on PostgreSQL the violation arrives with the commit.
    with pytest.raises(sa.exc.IntegrityError):
        mark_and_add_a_second_outcome()
    assert _outcomes(container) == 1
    with container.uow() as uow:  # the UPDATE before it rolled back with it
        row = prebuilt.first(uow.connection, BY_ID, {"p_id": payment_id})
        assert row is not None and row["last_error"] is None


@pytest.mark.postgres
def test_a_deferred_failure_answered_before_the_commit_is_sent_is_the_one_raised(
    make_postgres_database,
) -> None:
    """The COMMIT rides behind the deferred statements.  When a deferred statement's
    failure is already on the socket as the COMMIT is sent, psycopg raises it there: it
    must still be that failure (not the skipped COMMIT's "pipeline aborted"), nothing may
    stay, and the pooled connection must work on."""
    import select

    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)
        with container.uow() as uow:
            prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_1"))
            uow.commit()

        def second_outcome_answered_before_the_commit() -> None:
            with container.uow() as uow:
                prebuilt.first(uow.connection, MARK, {"p_id": payment_id, "p_error": "late"})
                uow.defer_answers()
                prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_2"))
                pgconn = uow.connection.connection.driver_connection.pgconn
                readable, _, _ = select.select([pgconn.socket], [], [], 10)
                assert readable, "the server never answered the deferred INSERT"
                uow.commit()

        with pytest.raises(sa.exc.IntegrityError):
            second_outcome_answered_before_the_commit()
        assert _outcomes(container) == 1
        with container.uow() as uow:
            row = prebuilt.first(uow.connection, BY_ID, {"p_id": payment_id})
            assert row is not None and row["last_error"] is None
    finally:
        container.close()


def test_a_unit_that_defers_and_does_not_commit_writes_nothing(container: Container) -> None:
    payment_id = _payment(container)
    with container.uow() as uow:
        uow.defer_answers()
        prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_1"))
    assert _outcomes(container) == 0
    with container.uow() as uow:  # and the pooled connection works on
        prebuilt.execute(uow.connection, OUTCOME, _outcome(payment_id, "pi_1"))
        uow.commit()
    assert _outcomes(container) == 1


@pytest.mark.postgres
def test_a_statement_sqlalchemy_runs_itself_is_refused_while_answers_are_deferred(
    make_postgres_database,
) -> None:
    # In pipeline mode psycopg has no result description until the next sync, so
    # SQLAlchemy would read a SELECT as returning no rows: refused instead, loudly.
    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)

        def read_through_sqlalchemy_while_deferring() -> None:
            with container.uow() as uow:
                uow.defer_answers()
                uow.connection.execute(BY_ID, {"p_id": payment_id}).first()

        with pytest.raises(RuntimeError, match="defers answers"):
            read_through_sqlalchemy_while_deferring()
        with container.uow() as uow:
            assert uow.connection.execute(BY_ID, {"p_id": payment_id}).first() is not None
    finally:
        container.close()


# -- round trips (libpq's protocol trace: each turn from sending to reading is one) ---------


def _traced_round_trips(container: Container, unit: Any, tmp_path: Any) -> int:
    """Round trips of ``unit(uow)`` run in a unit of work that commits, measured on its
    second run: the first prepares the statements on the connection (psycopg's cache,
    one round trip each, once per connection)."""
    for run in range(2):
        with container.uow() as uow:
            pgconn = uow.connection.connection.driver_connection.pgconn
            path = tmp_path / f"protocol-{run}.trace"
            trace = start_trace(pgconn, path)
            try:
                unit(uow)
                uow.commit()
            finally:
                pgconn.untrace()
                trace.close()
    return round_trips(path.read_text())


@pytest.mark.postgres
def test_the_commit_travels_with_the_deferred_statements(make_postgres_database, tmp_path) -> None:
    """A finish's shape: an UPDATE whose answer is read, then writes deferred.  BEGIN,
    the UPDATE, then the deferred INSERT with the COMMIT: three round trips (four when
    the COMMIT waited for the deferred answers first), and the rows committed."""
    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)
        read: list[Any] = []

        def finish_shape(uow: Any) -> None:
            read.append(prebuilt.first(uow.connection, MARK, {"p_id": payment_id, "p_error": "x"}))
            uow.defer_answers()
            prebuilt.execute(uow.connection, LEDGER, _ledger_line(payment_id))

        assert _traced_round_trips(container, finish_shape, tmp_path) == 3
        assert all(row is not None and row["last_error"] == "x" for row in read)
        assert _ledger_lines(container, payment_id) == 2
    finally:
        container.close()


def _ledger_line(payment_id: str) -> dict[str, Any]:
    return {
        "payment_id": payment_id,
        "account": "provider_receivable",
        "amount": 1000,
        "currency": "usd",
        "created_at": datetime.now(UTC),
    }


def _ledger_lines(container: Container, payment_id: str) -> int:
    with container.uow() as uow:
        count = (
            sa.select(sa.func.count())
            .select_from(ledger_lines)
            .where(ledger_lines.c.payment_id == sa.bindparam("p_id"))
        )
        return int(prebuilt.scalar(uow.connection, count, {"p_id": payment_id}))
