"""A provider event and an operation's finish take a payment's locks in one order: the
payment's row, then its operation rows (PostgreSQL).

The event's transaction used to wake the payment's operations first (``woken_at`` on the
cancel a worker held) and lock the payment after, to queue an authorisation check for
``payment_intent.canceled``; the cancel's finish locks the payment, then updates its
operation row.  A cancel finishing as its own event arrived deadlocked (the getting-started
page's run, under load), and PostgreSQL failed one side: the finish, whose lease then had to
expire before anyone finished the cancel."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import operations, payments, provider_events
from orchestrator.domain.operations import OperationKindName, new_operation_id
from orchestrator.domain.states import PaymentStatus
from orchestrator.providers.base import PAYMENT_CANCELED_EVENT, ProviderEvent
from orchestrator.services.operation_accept import new_operation_values
from orchestrator.services.provider_events import store_event
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force, new_merchant

pytestmark = pytest.mark.postgres

CANCEL = OperationKindName.CANCEL


@pytest.fixture
def container(make_postgres_database) -> Iterator[Container]:
    built = build_container(make_postgres_database())
    yield built
    built.close()


def lock_waiters(container: Container, besides: int) -> list[int]:
    """Backends of this database, other than ``besides``, waiting for a lock."""
    with container.engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> :pid"
                ),
                {"pid": besides},
            ).scalars()
        )


def test_a_cancel_finishes_while_its_own_canceled_event_is_stored(container: Container) -> None:
    payment = accept(container, new_merchant(container), "order-1", capture_method="manual")
    payment = force(
        container,
        payment.id,
        status=PaymentStatus.REQUIRES_CAPTURE.value,
        amount_capturable=payment.request.amount,
        provider_payment_id="pi_lock_order",
        lease_owner=None,
        locked_until=None,
    )
    cancel_id = new_operation_id(CANCEL)
    values = new_operation_values(
        cancel_id, CANCEL, payment, idempotency_key="cancel-1", fingerprint="f", amount=None,
        reason=None,
    )  # fmt: skip
    values.update(lease_owner="worker:1", locked_until=sa.func.now(), created_at=sa.func.now())
    values.update(updated_at=sa.func.now())
    with container.engine.begin() as conn:
        conn.execute(operations.insert().values(**values))

    event = ProviderEvent(
        id="evt_lock_order",
        type=PAYMENT_CANCELED_EVENT,
        created=1,
        object_id="pi_lock_order",
        object_type="payment_intent",
        provider_payment_id="pi_lock_order",
    )
    stored: list[object] = []
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            stored.append(store_event(event, uow=container.uow, provider="stripe"))
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    # The worker's finish, as finish_payment_operation orders it: the payment first ...
    with container.engine.connect() as finish:
        finish.execute(sa.text("SET LOCAL deadlock_timeout = '100ms'"))
        own_pid = finish.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        finish.execute(
            sa.text("SELECT id FROM payments WHERE id = :id FOR NO KEY UPDATE"),
            {"id": payment.id},
        )
        deliverer = threading.Thread(target=deliver)
        deliverer.start()
        deadline = time.monotonic() + 30
        while not lock_waiters(container, own_pid):
            assert deliverer.is_alive() and time.monotonic() < deadline, "the event never waited"
            time.sleep(0.02)
        # ... its books (the payment canceled) ...
        finish.execute(
            payments.update()
            .where(payments.c.id == payment.id)
            .values(status=PaymentStatus.CANCELED.value, amount_capturable=0)
        )
        # ... then its operation row, while the event waits.  Under the old order the
        # event held this row already: a deadlock, and this statement failed.
        finish.execute(
            operations.update()
            .where(operations.c.id == cancel_id)
            .values(
                status="succeeded", recovery_point="completed", lease_owner=None, locked_until=None
            )
        )
        finish.commit()
    deliverer.join(30)

    assert not deliverer.is_alive()
    assert errors == []
    with container.engine.connect() as conn:
        kept = conn.execute(
            sa.select(provider_events.c.payment_id).where(provider_events.c.id == "evt_lock_order")
        ).scalar_one()
        cancel_status = conn.execute(
            sa.select(operations.c.status).where(operations.c.id == cancel_id)
        ).scalar_one()
    assert kept == payment.id
    assert cancel_status == "succeeded"
    assert len(stored) == 1
