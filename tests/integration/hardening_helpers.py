"""Helpers of the security and observability tests (issue 7): an API under test with
clients of both roles, problem assertions, metric readings, raw HTTP, and the environment
of ``payorch`` subprocesses."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import payments
from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.server import ServerThread

BODY: dict[str, Any] = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}


@dataclass
class Api:
    """A real uvicorn server on a migrated database, with fakes at the provider and broker,
    two merchants (``a``, ``b``) and an operator."""

    container: Container
    url: str
    publisher: RecordingPublisher
    provider: FakeProvider
    key_a: str
    key_b: str
    ops_key: str
    client_a_id: str
    client_b_id: str

    def client(self, api_key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key or self.key_a}"}
        return httpx.Client(
            base_url=self.url, headers=headers, timeout=30, trust_env=False, **kwargs
        )

    def count(self, **where: str) -> int:
        query = sa.select(sa.func.count()).select_from(payments)
        for column, value in where.items():
            query = query.where(payments.c[column] == value)
        with self.container.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def raw(self, request: bytes) -> bytes:
        """Send bytes as they are (no HTTP client in between) and read the whole answer."""
        with socket.create_connection(("127.0.0.1", int(self.url.rsplit(":", 1)[1]))) as sock:
            sock.settimeout(10)
            sock.sendall(request)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


@contextlib.contextmanager
def running_api(database_url: str, **overrides: Any) -> Iterator[Api]:
    publisher = RecordingPublisher()
    provider = FakeProvider()
    container = build_container(database_url, publisher=publisher, provider=provider, **overrides)
    a = create_client(container.uow, "merchant a", Role.MERCHANT)
    b = create_client(container.uow, "merchant b", Role.MERCHANT)
    ops = create_client(container.uow, "operator", Role.OPS)
    try:
        with ServerThread(create_app(container)) as server:
            yield Api(
                container,
                server.url,
                publisher,
                provider,
                a.api_key,
                b.api_key,
                ops.api_key,
                a.client.id,
                b.client.id,
            )
    finally:
        container.close()


def sqlite_url(directory: Any) -> str:
    return f"sqlite:///{directory / 'payorch.sqlite3'}"


def post_payment(
    client: httpx.Client,
    key: str | bytes | None,
    body: object = BODY,
    *,
    content_type: str | None = "application/json",
    headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """POST /v1/payments; ``body`` as bytes or str is sent verbatim, anything else as JSON."""
    sent: dict[str, str | bytes] = {}
    if key is not None:
        sent["Idempotency-Key"] = key
    if content_type is not None:
        sent["Content-Type"] = content_type
    sent.update(headers or {})
    content = body if isinstance(body, bytes | str) else json.dumps(body).encode()
    return client.post("/v1/payments", content=content, headers=sent)


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json", response.headers
    problem: dict[str, Any] = response.json()
    assert problem["type"] == f"https://payorch.dev/problems/{slug}", problem
    assert problem["status"] == status
    assert problem["title"] and problem["detail"]
    assert "Traceback" not in response.text
    return problem


def metric_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text exposition, by name and label set."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value; KeyError (with what exists) when the series is absent."""
    samples = metric_samples(text)
    key = (name, frozenset(labels.items()))
    if key not in samples:
        known = sorted({n for n, _ in samples if n.startswith(name.rsplit("_", 1)[0])})
        raise KeyError(f"{name}{labels} not exposed; similar: {known}")
    return samples[key]


def payorch_environment(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a ``payorch`` subprocess: a real secret, as outside dev (``test``,
    not ``production``, which refuses the simulator)."""
    env = {
        "PAYORCH_ENV": "test",
        "PAYORCH_DATABASE_URL": database_url,
        "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
    }
    env.update(extra)
    return env
