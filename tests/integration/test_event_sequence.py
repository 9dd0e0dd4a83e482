"""Event sequence numbers per payment under concurrency (PostgreSQL): a writer outside the
payment's lease (a provider event) racing the charge's finish waits for it and takes the
next number, instead of failing on the unique (payment, sequence)."""

from __future__ import annotations

import threading
import time
from typing import Any

import sqlalchemy as sa

from orchestrator.db.tables import payments
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant


def test_a_second_writer_waits_for_the_first_and_takes_the_next_sequence(
    make_postgres_database,
) -> None:
    # Its own database, so its events never reach another test's counts.
    container = build_container(make_postgres_database(), provider=FakeProvider())
    payment_id = accept(container, new_merchant(container), "seq-1").id
    first = container.uow().__enter__()
    try:
        # The finish: it updates the payment (taking its row lock), then writes its event.
        first.session.execute(
            payments.update().where(payments.c.id == payment_id).values(attempts=1)
        )
        first.outcomes.add_outbox_event(payment_id, "payment.succeeded", {}, now=first.now())
        second_done = threading.Event()
        errors: list[BaseException] = []

        def second_writer() -> None:
            try:
                with container.uow() as uow:
                    uow.outcomes.add_outbox_event(payment_id, "payment.disputed", {}, now=uow.now())
                    uow.commit()
            except BaseException as error:  # reported below
                errors.append(error)
            finally:
                second_done.set()

        thread = threading.Thread(target=second_writer)
        thread.start()
        # It waits for the first (PostgreSQL shows a lock not granted) ...
        deadline = time.monotonic() + 30
        while not _someone_waits_for_a_lock(container):
            assert time.monotonic() < deadline, "the second writer never waited"
            time.sleep(0.05)
        assert not second_done.is_set()
        first.commit()
        thread.join(timeout=30)
        assert errors == []
        with container.uow() as uow:
            events = uow.events.for_payment(payment_id)
        # ... and then numbers its event after the first's.
        assert [(e.event_type, e.sequence) for e in events] == [
            ("payment.succeeded", 1),
            ("payment.disputed", 2),
        ]
    finally:
        first.__exit__(None, None, None)
        container.close()


def test_a_finish_that_waited_for_the_lock_numbers_its_event_after_the_writer_it_waited_for(
    make_postgres_database,
) -> None:
    """The charge's finish takes its event number from its settlement's row (the number is
    a column of the payment, raised under the row lock).  A provider event written while
    the confirm was in flight holds that lock: the settlement waits, then reads the number
    the writer committed, and the finish's event comes after it.  A number read before
    the lock (the record the run held since its claim) would collide with the writer's."""
    provider = FakeProvider()
    container = build_container(make_postgres_database(), provider=provider)
    try:
        record = accept(container, new_merchant(container), "seq-2")
        writer = container.uow().__enter__()
        original_confirm = provider.confirm_payment

        def confirm_while_an_event_is_written(*args: Any, **kwargs: Any) -> Any:
            answer = original_confirm(*args, **kwargs)
            writer.outcomes.add_outbox_event(
                record.id, "payment.disputed", {}, now=writer.now()
            )  # holds the row lock until it commits (below)
            return answer

        provider.confirm_payment = confirm_while_an_event_is_written  # type: ignore[method-assign]
        results: list[ProcessResult] = []
        finishing = threading.Thread(
            target=lambda: results.append(
                process_payment(container.runner(), record.id, record.lease_token)
            )
        )
        try:
            finishing.start()
            deadline = time.monotonic() + 30
            while not _someone_waits_for_a_lock(container):
                assert time.monotonic() < deadline, "the finish never waited for the lock"
                time.sleep(0.05)
            writer.commit()
        finally:
            writer.__exit__(None, None, None)
        finishing.join(timeout=30)
        assert results == [ProcessResult.COMPLETED]
        with container.uow() as uow:
            events = uow.events.for_payment(record.id)
            latest = uow.payments.get(record.id)
        assert [(e.event_type, e.sequence) for e in events] == [
            ("payment.disputed", 1),
            ("payment.succeeded", 2),
        ]
        assert latest is not None and latest.latest_event_sequence == 2
    finally:
        container.close()


def _someone_waits_for_a_lock(container) -> bool:
    with container.engine.connect() as conn:
        waiting = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE NOT l.granted AND a.datname = current_database()"
            )
        ).scalar_one()
    return bool(waiting)
