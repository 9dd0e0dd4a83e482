"""``/readyz``'s broker check on real RabbitMQ: one connection kept between checks (counted
at a TCP relay in front of the broker), and a broker that goes away is seen on the next
check, which then opens a new connection once it is back."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from orchestrator.broker import BrokerProbe, create_celery_app
from tests.harness.containers import test_settings as settings_for


class CountingRelay:
    """A TCP relay that counts the connections it accepts and can cut every one of them."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            with self._lock:
                self.accepted += 1
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            opened, self._open = self._open, []
        for end in opened:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self._listener.close()
        self.cut()


@pytest.fixture
def relayed(broker_url: str, tmp_path: Path) -> Iterator[tuple[BrokerProbe, CountingRelay]]:
    parts = urlsplit(broker_url)
    relay = CountingRelay((parts.hostname or "127.0.0.1", parts.port or 5672))
    through = urlunsplit(parts._replace(netloc=f"guest:guest@127.0.0.1:{relay.port}"))
    probe = BrokerProbe(
        create_celery_app(settings_for(f"sqlite:///{tmp_path}/unused.db", broker_url=through))
    )
    try:
        yield probe, relay
    finally:
        probe.close()
        relay.close()


def test_checks_reuse_one_connection_and_a_lost_one_is_seen_then_replaced(
    relayed: tuple[BrokerProbe, CountingRelay],
) -> None:
    probe, relay = relayed

    assert all(probe.reachable() for _ in range(5))
    assert relay.accepted == 1

    relay.cut()  # the broker's side of the connection is gone
    assert probe.reachable() is False
    assert probe.reachable() is True  # a new connection
    assert relay.accepted == 2
