"""Which broker errors end a running worker (``workers.consumer``, decision 0100): a broker
that refuses who or where ends it; one that is away, or restarting a vhost, is retried."""

from __future__ import annotations

import amqp.exceptions
import pytest

from workers.consumer import is_refusal


@pytest.mark.parametrize(
    "error",
    [
        amqp.exceptions.NotAllowed("NOT_ALLOWED - vhost shop not found", reply_code=530),
        amqp.exceptions.NotAllowed(
            "NOT_ALLOWED - access to vhost 'shop' refused for user 'payorch'", reply_code=530
        ),
        amqp.exceptions.AccessRefused(
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN",
            reply_code=403,
        ),
    ],
)
def test_a_missing_vhost_or_a_refused_login_ends_the_worker(error: Exception) -> None:
    assert is_refusal(error)


@pytest.mark.parametrize(
    "error",
    [
        amqp.exceptions.NotAllowed("NOT_ALLOWED - vhost shop is down", reply_code=530),
        ConnectionRefusedError(111, "Connection refused"),
        amqp.exceptions.ConnectionForced("CONNECTION_FORCED - shutdown", reply_code=320),
        OSError("Server unexpectedly closed connection"),
    ],
)
def test_a_broker_away_or_restarting_a_vhost_is_retried(error: Exception) -> None:
    assert not is_refusal(error)
