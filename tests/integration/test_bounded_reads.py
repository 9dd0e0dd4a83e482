"""No request makes the API buffer more than its caps, whatever its headers say or omit
(issue 43): a chunked body without a Content-Type to refund, capture or cancel is refused
(413) once it passes 64 KiB, and a request head of megabytes is refused (431) by
``payorch api``'s HTTP server while it arrives.

Memory is judged by what the server reads, not by timing: each test offers 64 MiB and
counts what the server took before it answered and closed the connection.  What a client
can push into a closed connection is bounded by the kernels' socket buffers (a few MiB);
a server that kept reading would take all 64 MiB.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from orchestrator.api import middleware
from orchestrator.api.problems import problem_body
from orchestrator.cli import http_protocol
from orchestrator.db.migrate import upgrade
from tests.harness.captures import authorized_payment
from tests.harness.refunds import operation_count
from tests.integration.hardening_helpers import Api, payorch_environment, running_api, sqlite_url
from tests.integration.webhook_helpers import client_of
from tests.support.processes import ProcessManager, free_port, wait_for_http

OFFERED = 64 * 1024 * 1024
# Socket buffers on both sides hold a few MiB: more than this means the server kept reading.
TAKEN_AT_MOST = 16 * 1024 * 1024


@dataclass
class Exchange:
    sent: int
    answer: bytes

    @property
    def status_line(self) -> bytes:
        return self.answer.split(b"\r\n", 1)[0]


def offer(port: int, head: bytes, piece: bytes, total: int = OFFERED) -> Exchange:
    """Send ``head``, then ``piece`` until ``total`` bytes or the server closes; a reader
    thread collects the answer as it comes (once the server closes with data unread, the
    next send is reset, and an answer not yet read could be lost with it)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(30)
        answer = bytearray()

        def read() -> None:
            while True:
                try:
                    chunk = sock.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                answer.extend(chunk)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        sent = 0
        try:
            sock.sendall(head)
            while sent < total:
                sock.sendall(piece)
                sent += len(piece)
        except OSError:
            pass  # reset or broken pipe: the server closed the connection
        reader.join(timeout=30)
        return Exchange(sent, bytes(answer))


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.fixture
def api(tmp_path) -> Iterator[Api]:
    with running_api(sqlite_url(tmp_path)) as running:
        yield running


@pytest.mark.parametrize("action", ["refunds", "capture", "cancel"])
@pytest.mark.parametrize("content_type", [None, "application/json"])
def test_a_chunked_body_is_refused_at_64_kib_and_the_rest_is_never_read(
    api: Api, action: str, content_type: str | None
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, f"order-{action}", amount=1500)
    head = (
        f"POST /v1/payments/{payment.id}/{action} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {api.key_a}\r\nIdempotency-Key: big-{action}\r\n"
        + (f"Content-Type: {content_type}\r\n" if content_type else "")
        + "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    port = int(api.url.rsplit(":", 1)[1])

    exchange = offer(port, head, chunk(b"x" * 65536))

    assert exchange.status_line.startswith(b"HTTP/1.1 413"), exchange.answer[:300]
    assert b"application/problem+json" in exchange.answer
    assert b"payload-too-large" in exchange.answer
    assert exchange.sent < TAKEN_AT_MOST, exchange.sent
    assert operation_count(api.container, payment.id) == 0


def test_an_empty_chunked_body_without_a_content_type_is_still_the_empty_object(
    api: Api,
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-empty", amount=1500)
    with api.client() as client:
        answer = client.post(
            f"/v1/payments/{payment.id}/capture",
            content=iter([b""]),  # chunked, nothing in it
            headers={"Idempotency-Key": "empty-capture"},
        )
    assert answer.status_code == 202, answer.text


def test_payorch_api_refuses_megabytes_of_headers_with_a_431_while_they_arrive(
    processes: ProcessManager, tmp_path
) -> None:
    port = free_port()
    url = sqlite_url(tmp_path)
    upgrade(url)  # payorch api refuses a database without its tables (decision 0090)
    server = processes.payorch("api", "--port", str(port), env=payorch_environment(url))
    wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=60, process=server, status=None)
    line = b"X-Padding: " + b"p" * 1000 + b"\r\n"

    exchange = offer(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", line * 64)

    assert exchange.status_line.startswith(b"HTTP/1.1 431"), exchange.answer[:300]
    assert b"application/problem+json" in exchange.answer
    problem = json.loads(exchange.answer.split(b"\r\n\r\n", 1)[1])
    assert problem == problem_body(431, "request-header-too-large", problem["detail"])
    assert exchange.sent < TAKEN_AT_MOST, exchange.sent
    # A head under the limit is still served (the middleware's own 16 KiB check answers).
    small = offer(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"", 0)
    assert small.status_line.startswith(b"HTTP/1.1 200") or small.status_line.startswith(
        b"HTTP/1.1 503"
    ), small.answer[:200]


def test_the_servers_head_limit_leaves_room_for_every_head_the_middleware_accepts() -> None:
    assert http_protocol.MAX_HEADER_BYTES == middleware.MAX_HEADER_BYTES
    assert http_protocol.MAX_REQUEST_HEAD_BYTES > middleware.MAX_HEADER_BYTES
