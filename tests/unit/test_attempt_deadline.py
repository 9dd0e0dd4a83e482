"""The webhook attempt's watchdog (orchestrator/events/deadline.py) on a local socket pair:
it shuts the watched connection down when it fires, also when the connection is made after
it fired, and never once the attempt finished."""

from __future__ import annotations

import socket
import time
from typing import Any

from orchestrator.events.deadline import CONNECTED_EVENT, AttemptDeadline


class Stream:
    """What httpcore's trace reports for a new connection (only ``get_extra_info``)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def get_extra_info(self, info: str) -> Any:
        return self._sock if info == "socket" else None


def wait_expired(deadline: AttemptDeadline) -> None:
    give_up = time.monotonic() + 5
    while not deadline.expired and time.monotonic() < give_up:
        time.sleep(0.005)
    assert deadline.expired


def test_a_blocked_read_ends_when_the_deadline_fires() -> None:
    ours, peer = socket.socketpair()
    with ours, peer, AttemptDeadline(0.2) as deadline:
        deadline.trace(CONNECTED_EVENT, {"return_value": Stream(ours)})
        ours.settimeout(5)
        # The peer sends nothing: only the deadline's shutdown can end this read.
        assert ours.recv(1) == b""
        assert deadline.finish() is True


def test_a_connection_made_after_the_deadline_is_shut_at_once() -> None:
    ours, peer = socket.socketpair()
    with ours, peer, AttemptDeadline(0.01) as deadline:
        wait_expired(deadline)
        deadline.trace(CONNECTED_EVENT, {"return_value": Stream(ours)})
        ours.settimeout(5)
        assert ours.recv(1) == b""


def test_a_finished_attempt_is_left_alone() -> None:
    ours, peer = socket.socketpair()
    with ours, peer:
        deadline = AttemptDeadline(0.05)
        with deadline:
            deadline.trace(CONNECTED_EVENT, {"return_value": Stream(ours)})
            assert deadline.finish() is False
        time.sleep(0.1)  # past the deadline: the timer was cancelled
        peer.sendall(b"x")
        ours.settimeout(5)
        assert ours.recv(1) == b"x"
        assert deadline.expired is False


def test_other_trace_events_are_ignored() -> None:
    with AttemptDeadline(5) as deadline:
        deadline.trace("http11.send_request_headers.started", {"request": object()})
        assert deadline.finish() is False
