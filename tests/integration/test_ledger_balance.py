"""The ledger balances, enforced (decision 0101): the writer refuses an entry that does not
sum to zero per currency (SQLite and PostgreSQL), and on PostgreSQL the deferred constraint
trigger of migration 0031 refuses any commit that leaves a payment's lines out of balance,
however they were written, and leaves nothing of that transaction behind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.compiled import prepare_once
from orchestrator.db.session import Session
from orchestrator.db.tables import ledger_lines, payments
from orchestrator.domain.ledger import LedgerLine, UnbalancedEntry
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload

# The held (pipelined) write a finish uses for its lines: sent with the COMMIT.
HELD_LEDGER_INSERT = prepare_once(ledger_lines.insert())
CHECK_VIOLATION = "23514"


@pytest.fixture
def container(database_url: str) -> Iterator[Container]:
    built = build_container(database_url)
    yield built
    built.close()


@pytest.fixture
def postgres(make_postgres_database) -> Iterator[Container]:
    built = build_container(make_postgres_database())
    yield built
    built.close()


def _payment(container: Container) -> str:
    return accept(container, new_merchant(container), "ledger-1").id


def _line(payment_id: str, account: str, amount: int, currency: str = "usd") -> dict[str, Any]:
    return {
        "payment_id": payment_id,
        "account": account,
        "amount": amount,
        "currency": currency,
        "created_at": datetime.now(UTC),
    }


def _lines(container: Container, payment_id: str) -> list[tuple[str, int, str]]:
    with container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(ledger_lines.c.account, ledger_lines.c.amount, ledger_lines.c.currency)
            .where(ledger_lines.c.payment_id == payment_id)
            .order_by(ledger_lines.c.id)
        )
        return [(r.account, r.amount, r.currency) for r in rows]


def _refused_commit(
    container: Container, write: Callable[[Session], object]
) -> pytest.ExceptionInfo[sa.exc.IntegrityError]:
    """Run ``write`` in a unit of work whose commit must be refused."""
    with container.uow() as uow:
        write(uow.session)
        with pytest.raises(sa.exc.IntegrityError) as refused:
            uow.commit()
    return refused


def _refusal(error: pytest.ExceptionInfo[sa.exc.IntegrityError]) -> tuple[str, str | None]:
    """The server's SQLSTATE and the constraint it named."""
    orig: Any = error.value.orig
    return orig.sqlstate, orig.diag.constraint_name


# -- the writer's check, on both databases ---------------------------------------------------


def test_the_writer_refuses_an_unbalanced_entry_and_writes_nothing(container):
    payment_id = _payment(container)
    entry = [
        LedgerLine("provider_receivable:stripe", 1000, "usd"),
        LedgerLine("merchant_payable:cli_x", -900, "usd"),
    ]

    with container.uow() as uow:
        with pytest.raises(UnbalancedEntry, match=r"usd \+100"):
            uow.outcomes.add_ledger_lines(payment_id, entry, now=uow.now())
        uow.commit()  # what was written before the refusal: nothing

    assert _lines(container, payment_id) == []


def test_the_writer_balances_each_currency_on_its_own(container):
    payment_id = _payment(container)
    # Zero in total, but 500 usd owed to no one and 500 eur from no one.
    entry = [
        LedgerLine("provider_receivable:stripe", 500, "usd"),
        LedgerLine("merchant_payable:cli_x", -500, "eur"),
    ]

    with container.uow() as uow:
        with pytest.raises(UnbalancedEntry) as refused:
            uow.outcomes.add_ledger_lines(payment_id, entry, now=uow.now())
        uow.commit()

    assert refused.value.sums == {"usd": 500, "eur": -500}
    assert _lines(container, payment_id) == []


def test_a_balanced_entry_is_written_whole(container):
    payment_id = _payment(container)
    entry = [
        LedgerLine("provider_receivable:stripe", 1000, "usd"),
        LedgerLine("merchant_payable:cli_x", -1000, "usd"),
    ]

    with container.uow() as uow:
        uow.outcomes.add_ledger_lines(payment_id, entry, now=uow.now())
        uow.commit()

    assert _lines(container, payment_id) == [
        ("provider_receivable:stripe", 1000, "usd"),
        ("merchant_payable:cli_x", -1000, "usd"),
    ]


# -- the trigger, on PostgreSQL ----------------------------------------------------------------


def test_postgres_refuses_a_commit_that_leaves_a_payment_out_of_balance(postgres):
    """Lines written past the writer's check (a statement of its own, as a hand-written fix
    or a bug elsewhere would): the COMMIT fails with a check violation naming the payment,
    currency and sum, and nothing of that transaction stays, the other row included."""
    payment_id = _payment(postgres)

    def write(session: Session) -> None:
        session.execute(
            payments.update().where(payments.c.id == payment_id).values(last_error="written")
        )
        session.execute(
            ledger_lines.insert(), [_line(payment_id, "provider_receivable:stripe", 1000)]
        )

    refused = _refused_commit(postgres, write)

    assert _refusal(refused) == (CHECK_VIOLATION, "ledger_lines_balance")
    assert f"the ledger lines of payment {payment_id} do not balance in usd" in str(refused.value)
    assert "sum to 1000" in str(refused.value)
    assert _lines(postgres, payment_id) == []
    assert reload(postgres, payment_id).last_error is None


def test_postgres_refuses_unbalanced_lines_held_for_the_pipelined_commit(postgres):
    """The finish's path: the lines are held and sent with the COMMIT in one round trip.
    The refusal is raised from the commit as SQLAlchemy's error, nothing is committed, and
    the pooled connection works on."""
    payment_id = _payment(postgres)

    refused = _refused_commit(
        postgres,
        lambda session: session.write(
            HELD_LEDGER_INSERT,
            [
                _line(payment_id, "provider_receivable:stripe", 1000),
                _line(payment_id, "merchant_payable:cli_x", -999),
            ],
        ),
    )

    assert _refusal(refused) == (CHECK_VIOLATION, "ledger_lines_balance")
    assert _lines(postgres, payment_id) == []
    with postgres.uow() as uow:
        uow.session.write(
            HELD_LEDGER_INSERT,
            [
                _line(payment_id, "provider_receivable:stripe", 1000),
                _line(payment_id, "merchant_payable:cli_x", -1000),
            ],
        )
        uow.commit()
    assert len(_lines(postgres, payment_id)) == 2


def test_postgres_checks_at_the_commit_so_an_entry_may_take_several_statements(postgres):
    payment_id = _payment(postgres)

    with postgres.uow() as uow:
        # Out of balance between these two statements: the check waits for the commit.
        uow.session.execute(
            ledger_lines.insert(), [_line(payment_id, "provider_receivable:stripe", 700)]
        )
        uow.session.execute(ledger_lines.insert(), [_line(payment_id, "merchant_payable:x", -700)])
        uow.commit()

    assert [amount for _, amount, _ in _lines(postgres, payment_id)] == [700, -700]


def test_postgres_refuses_a_currency_out_of_balance_even_when_the_total_is_zero(postgres):
    payment_id = _payment(postgres)

    refused = _refused_commit(
        postgres,
        lambda session: session.execute(
            ledger_lines.insert(),
            [
                _line(payment_id, "provider_receivable:stripe", 500, "usd"),
                _line(payment_id, "merchant_payable:x", -500, "eur"),
            ],
        ),
    )

    assert _refusal(refused) == (CHECK_VIOLATION, "ledger_lines_balance")
    assert _lines(postgres, payment_id) == []


def test_postgres_refuses_deleting_or_changing_one_line_of_an_entry(postgres):
    payment_id = _payment(postgres)
    with postgres.uow() as uow:
        uow.session.execute(
            ledger_lines.insert(),
            [
                _line(payment_id, "provider_receivable:stripe", 1000),
                _line(payment_id, "merchant_payable:x", -1000),
            ],
        )
        uow.commit()
    receivable = ledger_lines.c.account == "provider_receivable:stripe"
    mine = ledger_lines.c.payment_id == payment_id

    one_line = ledger_lines.update().where(mine, receivable)
    other = _payment_of_another_merchant(postgres)

    deleted = _refused_commit(
        postgres, lambda session: session.execute(ledger_lines.delete().where(mine, receivable))
    )
    changed = _refused_commit(
        postgres, lambda session: session.execute(one_line.values(amount=900))
    )
    # Moved to another payment: both are out of balance, each is checked.
    moved = _refused_commit(
        postgres, lambda session: session.execute(one_line.values(payment_id=other))
    )

    for refused in (deleted, changed, moved):
        assert _refusal(refused) == (CHECK_VIOLATION, "ledger_lines_balance")
    assert [amount for _, amount, _ in _lines(postgres, payment_id)] == [1000, -1000]
    assert _lines(postgres, other) == []


def _payment_of_another_merchant(container: Container) -> str:
    return accept(container, new_merchant(container, "other"), "ledger-2").id
