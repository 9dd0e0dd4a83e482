"""The session's statements (orchestrator.db.session): on PostgreSQL the ones marked
``prepare_once`` run prepared on psycopg itself and answer as SQLAlchemy's execution does
(the same row, the same types, SQLAlchemy's exceptions, a lost connection invalidated,
every statement seen by ``before_cursor_execute``), and the writes left after the last read
go with the COMMIT.  Real PostgreSQL, and SQLite through SQLAlchemy."""

from __future__ import annotations

import select
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from orchestrator.bootstrap import Container
from orchestrator.db.compiled import prepare_once
from orchestrator.db.session import Session
from orchestrator.db.tables import ledger_lines, payment_outcomes, payments
from tests.harness.containers import build_container
from tests.harness.protocol_trace import round_trips, start_trace
from tests.harness.seeds import accept, new_merchant

BY_ID = prepare_once(sa.select(payments).where(payments.c.id == sa.bindparam("p_id")))
MARK = prepare_once(
    payments.update()
    .where(payments.c.id == sa.bindparam("p_id"))
    .values(last_error=sa.bindparam("p_error"), next_action=None)
    .returning(payments.c.id, payments.c.last_error, payments.c.next_action)
)
OUTCOME = prepare_once(payment_outcomes.insert())
LEDGER = prepare_once(ledger_lines.insert())
OUTCOMES = sa.select(sa.func.count()).select_from(payment_outcomes)


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


def _driver(session: Session) -> Any:
    return session.connection.connection.driver_connection


def test_a_row_reads_as_sqlalchemy_reads_it(container: Container) -> None:
    payment_id = _payment(container)
    with container.database.transaction() as session:
        plain = session.connection.execute(BY_ID, {"p_id": payment_id}).one()
        expected = dict(plain._mapping)
        found = session.one(BY_ID, {"p_id": payment_id})
    assert found is not None and dict(found) == expected
    assert found["created_at"].utcoffset() is not None  # UTC-aware through the processors
    assert isinstance(found["metadata"], dict)  # the JSON document, decoded


def test_values_go_through_the_bind_processors_and_none_is_stored(container: Container) -> None:
    payment_id = _payment(container)
    with container.database.transaction() as session:
        row = session.one(MARK, {"p_id": payment_id, "p_error": "x" * 10})
        assert row == {"id": payment_id, "last_error": "x" * 10, "next_action": None}
        assert session.one(MARK, {"p_id": "pay_none", "p_error": ""}) is None
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
        session.execute(LEDGER, lines)
        session.commit()
    with container.database.transaction() as session:
        stored = session.all(
            sa.select(ledger_lines.c.account, ledger_lines.c.amount)
            .where(ledger_lines.c.payment_id == payment_id)
            .order_by(ledger_lines.c.account)
        )
    assert [(r["account"], r["amount"]) for r in stored] == [("a", 10), ("b", -10)]


def test_a_constraint_violation_is_sqlalchemys_integrity_error_and_rolls_back(
    container: Container,
) -> None:
    payment_id = _payment(container)
    values = _outcome(payment_id, "pi_1")
    with container.database.transaction() as session:
        session.execute(OUTCOME, values)
        session.commit()
    with container.database.transaction() as session:
        with pytest.raises(sa.exc.IntegrityError):
            session.execute(OUTCOME, values)  # one outcome per payment
        session.rollback()
    with container.database.transaction() as session:
        assert session.scalar(OUTCOMES) == 1


@pytest.mark.postgres
def test_a_lost_connection_is_invalidated_as_sqlalchemy_would(make_postgres_database) -> None:
    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)
        with container.database.transaction() as session:
            pid = session.scalar(sa.select(sa.func.pg_backend_pid()))
            url = container.engine.url.set(drivername="postgresql")
            with psycopg.connect(url.render_as_string(hide_password=False)) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                admin.commit()
            with pytest.raises(sa.exc.OperationalError) as raised:
                session.one(BY_ID, {"p_id": payment_id})
            assert raised.value.connection_invalidated
            assert session.connection.invalidated
        with container.database.transaction() as session:  # the pool hands out a live one
            assert session.one(BY_ID, {"p_id": payment_id}) is not None
    finally:
        container.close()


def test_every_statement_is_seen_by_before_cursor_execute(container: Container) -> None:
    payment_id = _payment(container)
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    event.listen(container.engine, "before_cursor_execute", count)
    try:
        with container.database.transaction() as session:
            session.one(BY_ID, {"p_id": payment_id})
            session.execute(MARK, {"p_id": payment_id, "p_error": "e"})
            session.write(OUTCOME, _outcome(payment_id, "pi_1"))
            session.commit()
    finally:
        event.remove(container.engine, "before_cursor_execute", count)
    # SQLite's BEGIN aside.
    assert [word for word in seen if word != "BEGIN"] == ["SELECT", "UPDATE", "INSERT"]


# -- the writes held back (Session.write: with the COMMIT, in pipeline mode on PostgreSQL) --


def _outcomes(container: Container) -> int:
    with container.database.transaction() as session:
        return int(session.scalar(OUTCOMES))


def test_held_writes_commit_with_the_unit(container: Container) -> None:
    payment_id = _payment(container)
    with container.uow() as uow:
        uow.session.write(OUTCOME, _outcome(payment_id, "pi_1"))
        uow.commit()
    assert _outcomes(container) == 1


def test_a_held_writes_failure_is_raised_at_the_commit_and_nothing_stays(
    container: Container,
) -> None:
    payment_id = _payment(container)
    with container.uow() as uow:
        uow.session.write(OUTCOME, _outcome(payment_id, "pi_1"))
        uow.commit()

    def mark_and_add_a_second_outcome() -> None:
        with container.uow() as uow:
            uow.session.one(MARK, {"p_id": payment_id, "p_error": "held"})
            uow.session.write(OUTCOME, _outcome(payment_id, "pi_2"))
            uow.commit()

    # One outcome per payment: on PostgreSQL the violation arrives with the commit.
    with pytest.raises(sa.exc.IntegrityError):
        mark_and_add_a_second_outcome()
    assert _outcomes(container) == 1
    with container.uow() as uow:  # the UPDATE before it rolled back with it
        row = uow.session.one(BY_ID, {"p_id": payment_id})
        assert row is not None and row["last_error"] is None


def test_a_held_write_is_sent_before_a_statement_that_answers(container: Container) -> None:
    """A read after a held write sees it: the write goes first, answered, as if it had run
    when asked (its failure is raised there at the latest; on SQLite at the write)."""
    payment_id = _payment(container)
    with container.uow() as uow:
        uow.session.write(OUTCOME, _outcome(payment_id, "pi_1"))
        assert uow.session.scalar(OUTCOMES) == 1

        def write_again_then_read() -> None:
            uow.session.write(OUTCOME, _outcome(payment_id, "pi_2"))
            uow.session.scalar(OUTCOMES)

        with pytest.raises(sa.exc.IntegrityError):
            write_again_then_read()
    assert _outcomes(container) == 0


@pytest.mark.postgres
def test_a_held_failure_answered_before_the_commit_is_sent_is_the_one_raised(
    make_postgres_database,
) -> None:
    """The COMMIT rides behind the held statements.  When a held statement's failure is
    already on the socket as the next is sent, psycopg raises it there: it must still be
    that failure (not the skipped COMMIT's "pipeline aborted"), nothing may stay, and the
    pooled connection must work on."""
    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)
        with container.uow() as uow:
            uow.session.write(OUTCOME, _outcome(payment_id, "pi_1"))
            uow.commit()

        def wait_for_the_failed_insert(conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
            if sql.startswith("INSERT INTO ledger_lines"):
                pgconn = conn.connection.driver_connection.pgconn
                readable, _, _ = select.select([pgconn.socket], [], [], 10)
                assert readable, "the server never answered the held INSERT"

        def mark_then_hold_a_failing_insert_and_another() -> None:
            with container.uow() as uow:
                uow.session.one(MARK, {"p_id": payment_id, "p_error": "late"})
                uow.session.write(OUTCOME, _outcome(payment_id, "pi_2"))
                uow.session.write(LEDGER, _ledger_entry(payment_id))
                uow.commit()

        event.listen(container.engine, "before_cursor_execute", wait_for_the_failed_insert)
        try:
            with pytest.raises(sa.exc.IntegrityError):
                mark_then_hold_a_failing_insert_and_another()
        finally:
            event.remove(container.engine, "before_cursor_execute", wait_for_the_failed_insert)
        assert _outcomes(container) == 1
        assert _ledger_lines(container, payment_id) == 0
        with container.uow() as uow:
            row = uow.session.one(BY_ID, {"p_id": payment_id})
            assert row is not None and row["last_error"] is None
    finally:
        container.close()


def test_a_unit_that_holds_writes_and_does_not_commit_writes_nothing(
    container: Container,
) -> None:
    payment_id = _payment(container)
    with container.uow() as uow:
        uow.session.write(OUTCOME, _outcome(payment_id, "pi_1"))
    assert _outcomes(container) == 0
    with container.uow() as uow:  # and the pooled connection works on
        uow.session.write(OUTCOME, _outcome(payment_id, "pi_1"))
        uow.commit()
    assert _outcomes(container) == 1


def test_a_rollback_drops_the_held_writes(container: Container) -> None:
    payment_id = _payment(container)
    with container.database.transaction() as session:
        session.write(OUTCOME, _outcome(payment_id, "pi_1"))
        session.rollback()
        # A held write would be sent before this read, in the transaction that follows.
        assert session.scalar(OUTCOMES) == 0


# -- round trips (libpq's protocol trace: each turn from sending to reading is one) ---------


def _traced_round_trips(container: Container, unit: Any, tmp_path: Any) -> int:
    """Round trips of ``unit(uow)`` run in a unit of work that commits, measured on its
    second run: the first prepares the statements on the connection (psycopg's cache,
    one round trip each, once per connection)."""
    for run in range(2):
        with container.uow() as uow:
            pgconn = _driver(uow.session).pgconn
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
def test_the_commit_travels_with_the_held_writes(make_postgres_database, tmp_path) -> None:
    """A finish's shape: an UPDATE whose answer is read, then writes held.  BEGIN, the
    UPDATE, then the held INSERT with the COMMIT: three round trips (four when the COMMIT
    waited for the held answers first), and the rows committed."""
    container = build_container(make_postgres_database())
    try:
        payment_id = _payment(container)
        read: list[Any] = []

        def finish_shape(uow: Any) -> None:
            read.append(uow.session.one(MARK, {"p_id": payment_id, "p_error": "x"}))
            uow.session.write(LEDGER, _ledger_entry(payment_id))

        assert _traced_round_trips(container, finish_shape, tmp_path) == 3
        assert all(row is not None and row["last_error"] == "x" for row in read)
        assert _ledger_lines(container, payment_id) == 4  # two runs of a two-line entry
    finally:
        container.close()


def _ledger_entry(payment_id: str) -> list[dict[str, Any]]:
    """Two lines that balance (PostgreSQL refuses a commit that leaves them unbalanced)."""
    return [
        {
            "payment_id": payment_id,
            "account": account,
            "amount": amount,
            "currency": "usd",
            "created_at": datetime.now(UTC),
        }
        for account, amount in (("provider_receivable", 1000), ("merchant_payable", -1000))
    ]


def _ledger_lines(container: Container, payment_id: str) -> int:
    with container.uow() as uow:
        count = (
            sa.select(sa.func.count())
            .select_from(ledger_lines)
            .where(ledger_lines.c.payment_id == sa.bindparam("p_id"))
        )
        return int(uow.session.scalar(count, {"p_id": payment_id}))
