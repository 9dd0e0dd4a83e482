"""The money lock on a payment's row (``MoneyRepository.lock_payment``) orders the writers
that take it and nothing else: a row that references the payment can still be inserted
meanwhile.  With ``FOR UPDATE`` the foreign key's ``KEY SHARE`` waited for the lock's
holder, and a Stripe event stored while a refund finished deadlocked with it: the event's
transaction had woken the refund's operation row (which the finish then updates) before
inserting the event (which waited for the finish)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import provider_events
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant

pytestmark = pytest.mark.postgres


@pytest.fixture
def container(make_postgres_database) -> Iterator[Container]:
    built = build_container(make_postgres_database())
    yield built
    built.close()


def test_an_event_for_a_payment_is_stored_while_its_money_lock_is_held(
    container: Container,
) -> None:
    merchant = new_merchant(container)
    payment = accept(container, merchant, "lock-1")
    with container.uow() as holder:
        assert holder.money.lock_payment(merchant.id, payment.id) is not None
        with container.engine.connect() as other:
            # Bounded: under the old lock this insert waits for the holder (for ever here,
            # since the holder waits for it), and fails after the timeout instead.
            other.execute(sa.text("SET LOCAL lock_timeout = '3s'"))
            other.execute(
                provider_events.insert().values(
                    id="evt_lock_1",
                    provider="stripe",
                    type="charge.refunded",
                    provider_created=1,
                    object_type="charge",
                    object_id="ch_lock_1",
                    provider_payment_id=None,
                    payment_id=payment.id,
                    payload={},
                    received_at=datetime.now(UTC),
                    woke_payment=False,
                )
            )
            other.commit()
        # The lock still orders the writers that take it: a second holder waits.
        with container.engine.connect() as second:
            second.execute(sa.text("SET LOCAL lock_timeout = '200ms'"))
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                second.execute(
                    sa.text("SELECT id FROM payments WHERE id = :id FOR NO KEY UPDATE"),
                    {"id": payment.id},
                )
    with container.engine.connect() as conn:
        stored = conn.execute(
            sa.select(provider_events.c.payment_id).where(provider_events.c.id == "evt_lock_1")
        ).scalar_one()
    assert stored == payment.id
