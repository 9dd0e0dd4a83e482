"""The load generator: a minimal HTTP/1.1 client on raw asyncio streams.

Why not httpx: at 50 concurrent clients a pure-Python client costs as much CPU per request
as the server's bare endpoint does, and on a 2-core machine that would make the client the
bottleneck of the baseline and squash every ratio towards 1.  This client does one
``write`` and a header parse per request (tens of microseconds), keeps connections alive,
and understands exactly what uvicorn sends back: a status line, headers, a Content-Length
body.  Anything else is counted as an error, never guessed at.

Two shapes of load:

* ``closed_loop``: N connections, each sending its next request as soon as the previous
  answer arrived, for a fixed time (throughput and latency at a given concurrency);
* ``burst``: N connections opened first, then one request on each at the same instant
  (latency of a thundering herd: the retry storm).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bench.stats import percentile

# Builds the request for (connection number, request number on it).
RequestFactory = Callable[[int, int], "Request"]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""

    def encode(self, host: str) -> bytes:
        lines = [f"{self.method} {self.path} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def json_post(path: str, body: dict[str, Any], headers: dict[str, str]) -> Request:
    return Request(
        "POST",
        path,
        {"Content-Type": "application/json", **headers},
        json.dumps(body, separators=(",", ":")).encode(),
    )


@dataclass
class Samples:
    """Latencies (seconds) of the answered requests, by status."""

    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0

    def add(self, status: int, latency: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.latencies.append(latency)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def merge(self, other: Samples) -> None:
        self.latencies += other.latencies
        for status, count in other.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count
        for what, count in other.errors.items():
            self.errors[what] = self.errors.get(what, 0) + count
        self.elapsed += other.elapsed

    @property
    def count(self) -> int:
        return len(self.latencies)

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.count,
            "seconds": round(self.elapsed, 3),
            "rps": round(self.count / self.elapsed, 1) if self.elapsed else 0.0,
            "p50_ms": round(percentile(self.latencies, 50) * 1000, 2),
            "p90_ms": round(percentile(self.latencies, 90) * 1000, 2),
            "p99_ms": round(percentile(self.latencies, 99) * 1000, 2),
            "max_ms": round(max(self.latencies, default=0.0) * 1000, 2),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "errors": dict(self.errors),
        }


class ProtocolError(Exception):
    pass


class Connection:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.authority = f"{self.host}:{self.port}"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        # Bytes of every answer read on this connection (status line, headers, body), and
        # the headers of the last one (lower-case names): the polling scenario needs both.
        self.received = 0
        self.last_headers: dict[str, str] = {}

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None

    async def send(self, request: Request) -> tuple[int, bytes]:
        """One request, one answer: ``(status, body)``.  Reconnects when needed."""
        if self._writer is None:
            await self.open()
        assert self._reader is not None and self._writer is not None
        self._writer.write(request.encode(self.authority))
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise ProtocolError(f"bad status line {status_line!r}") from None
        length = None
        close = False
        self.last_headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            self.last_headers[name] = value.strip()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
            elif name == "transfer-encoding":
                raise ProtocolError("chunked answers are not expected from these endpoints")
        body = await self._reader.readexactly(length or 0)
        self.received += len(head) + len(body)
        if close:
            await self.close()
        return status, body


async def closed_loop(
    url: str, make: RequestFactory, *, concurrency: int, seconds: float
) -> Samples:
    """``concurrency`` keep-alive connections sending back to back for ``seconds``."""
    samples = Samples()
    connections = [Connection(url) for _ in range(concurrency)]
    await asyncio.gather(*(c.open() for c in connections))
    started = time.perf_counter()
    deadline = started + seconds

    async def client(number: int, connection: Connection) -> None:
        sequence = 0
        while time.perf_counter() < deadline:
            request = make(number, sequence)
            sequence += 1
            sent = time.perf_counter()
            try:
                status, _ = await connection.send(request)
            except (OSError, asyncio.IncompleteReadError, ProtocolError) as error:
                samples.error(type(error).__name__)
                await connection.close()
                continue
            samples.add(status, time.perf_counter() - sent)

    await asyncio.gather(*(client(n, c) for n, c in enumerate(connections)))
    samples.elapsed = time.perf_counter() - started
    await asyncio.gather(*(c.close() for c in connections))
    return samples


async def fixed_count(url: str, make: RequestFactory, *, concurrency: int, total: int) -> Samples:
    """``total`` requests over ``concurrency`` keep-alive connections, as fast as answered;
    request ``i`` (0..total-1) is ``make(0, i)``."""
    samples = Samples()
    connections = [Connection(url) for _ in range(concurrency)]
    await asyncio.gather(*(c.open() for c in connections))
    numbers = iter(range(total))
    started = time.perf_counter()

    async def client(connection: Connection) -> None:
        for number in numbers:  # shared: each number is taken by one client
            sent = time.perf_counter()
            try:
                status, _ = await connection.send(make(0, number))
            except (OSError, asyncio.IncompleteReadError, ProtocolError) as error:
                samples.error(type(error).__name__)
                await connection.close()
                continue
            samples.add(status, time.perf_counter() - sent)

    await asyncio.gather(*(client(c) for c in connections))
    samples.elapsed = time.perf_counter() - started
    await asyncio.gather(*(c.close() for c in connections))
    return samples


async def burst(url: str, make: RequestFactory, *, size: int) -> tuple[Samples, list[bytes]]:
    """``size`` connections opened first, then one request on each at the same moment.
    Returns the samples and the answer bodies (in connection order)."""
    samples = Samples()
    connections = [Connection(url) for _ in range(size)]
    await asyncio.gather(*(c.open() for c in connections))
    requests = [make(n, 0) for n in range(size)]
    bodies: list[bytes] = [b""] * size
    go = asyncio.Event()

    async def client(number: int, connection: Connection) -> None:
        await go.wait()
        sent = time.perf_counter()
        try:
            status, body = await connection.send(requests[number])
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as error:
            samples.error(type(error).__name__)
            return
        samples.add(status, time.perf_counter() - sent)
        bodies[number] = body

    tasks = [asyncio.create_task(client(n, c)) for n, c in enumerate(connections)]
    await asyncio.sleep(0)  # every client is now waiting on the event
    started = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    samples.elapsed = time.perf_counter() - started
    await asyncio.gather(*(c.close() for c in connections))
    return samples, bodies
