"""The dispatcher's batch publisher writes exactly the message Celery's ``send_task``
writes (orchestrator.broker_batch), on a real RabbitMQ vhost of this test's own.  That a
worker consumes it is shown by the worker tests, whose stacks dispatch through it."""

from __future__ import annotations

from typing import Any

import kombu
import pytest

from orchestrator.broker import PAYMENTS_QUEUE, PROCESS_PAYMENT, CeleryPublisher, create_celery_app
from orchestrator.broker_batch import BatchPublisher
from orchestrator.engine.publisher import BatchPublishFailed, BatchTaskPublisher
from tests.harness.containers import test_settings as settings_for

TASK_ID = "0d1f0c2e-6a55-4f7e-9d0b-3b1f2a9c7e11"


def drain(url: str) -> list[Any]:
    messages = []
    with kombu.Connection(url) as connection:
        channel = connection.default_channel
        while (message := channel.basic_get(PAYMENTS_QUEUE, no_ack=True)) is not None:
            messages.append(message)
    return messages


def test_a_batched_message_is_the_message_send_task_publishes(make_broker_url) -> None:
    url = make_broker_url()
    app = create_celery_app(settings_for("sqlite://", broker_url=url))
    batch = BatchPublisher(app)
    try:
        # Before any worker or send_task declared the queue: the publisher declares it.
        batch.publish([(PROCESS_PAYMENT, "pay_" + "a" * 32, 7)], task_ids=[TASK_ID])
        app.send_task(PROCESS_PAYMENT, args=["pay_" + "a" * 32, 7], task_id=TASK_ID, retry=False)
    finally:
        batch.close()
    ours, celerys = drain(url)
    assert ours.body == celerys.body
    assert ours.properties == celerys.properties  # headers, ids, reply_to, delivery mode
    assert ours.headers == celerys.headers
    for field in ("exchange", "routing_key", "redelivered"):
        assert ours.delivery_info[field] == celerys.delivery_info[field]


def test_a_batch_arrives_whole_and_in_order_after_one_wait(make_broker_url) -> None:
    url = make_broker_url()
    publisher = CeleryPublisher(create_celery_app(settings_for("sqlite://", broker_url=url)))
    assert isinstance(publisher, BatchTaskPublisher)
    wakeups = [(f"pay_{n:032x}", n) for n in range(1, 301)]
    try:
        publisher.publish_process_payments(wakeups[:100])
        publisher.publish_process_payments(wakeups[100:])  # the same channel, tags go on
    finally:
        publisher.close_batches()
    got = [message.headers["argsrepr"] for message in drain(url)]
    assert got == [repr([payment_id, token]) for payment_id, token in wakeups]


def test_an_unreachable_broker_fails_the_batch_with_nothing_confirmed() -> None:
    app = create_celery_app(
        settings_for(
            "sqlite://",
            broker_url="amqp://guest:guest@127.0.0.1:1//",
            publish_timeout_seconds=1,
        )
    )
    with pytest.raises(BatchPublishFailed) as failed:
        CeleryPublisher(app).publish_process_payments([("pay_" + "b" * 32, 1)])
    assert failed.value.confirmed == 0
