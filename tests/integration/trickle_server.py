"""An HTTP endpoint that answers one byte a second and never finishes (tests only).

It reads the request, then sends a 200's status line and headers a byte at a time, so every
socket read of the client returns within its read timeout while the answer never ends.  It
records each connection's lifetime and how many were open at once.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@dataclass
class Connection:
    opened: float
    closed: float | None = None


@dataclass
class TrickleServer:
    byte_interval: float = 1.0
    connections: list[Connection] = field(default_factory=list)
    max_open: int = 0
    _open: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> TrickleServer:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="trickle", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def snapshot(self) -> list[Connection]:
        with self._lock:
            return [Connection(c.opened, c.closed) for c in self.connections]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            record = Connection(time.monotonic())
            with self._lock:
                self.connections.append(record)
                self._open += 1
                self.max_open = max(self.max_open, self._open)
            threading.Thread(target=self._trickle, args=(conn, record), daemon=True).start()

    def _trickle(self, conn: socket.socket, record: Connection) -> None:
        try:
            conn.settimeout(0.5)
            conn.recv(65536)  # the request (its end does not matter: we never answer fully)
            for byte in ANSWER:
                # Wait a byte's interval, noticing at once when the client shuts the
                # connection (readable, then EOF), so a connection's lifetime is exact.
                readable, _, _ = select.select([conn], [], [], self.byte_interval)
                if self._stop.is_set() or (readable and not conn.recv(1024)):
                    return
                conn.sendall(bytes([byte]))
            # Answered completely (never within a test): wait for the client to close.
            conn.settimeout(None)
            while conn.recv(1024):
                pass
        except OSError:
            pass  # the client shut the connection: the attempt ended
        finally:
            with self._lock:
                record.closed = time.monotonic()
                self._open -= 1
            conn.close()
