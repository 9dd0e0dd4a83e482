"""The API's 503 when the database cannot be used names the cause in its log line (issue 44,
decision 0090), not only the exception's class; the client's problem says only to retry.

The database is one that does not exist on the real server: a connection to it fails the
way a wrong URL or a dropped database does in production.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import structlog
from structlog.testing import LogCapture

from orchestrator.api.app import create_app
from orchestrator.services.api_keys import KEY_PREFIX
from tests.harness.containers import build_container
from tests.harness.server import ServerThread
from tests.integration.hardening_helpers import assert_problem

pytestmark = pytest.mark.postgres


@contextmanager
def log_lines() -> Iterator[list[dict[str, Any]]]:
    """The log lines as structlog builds them.  Entered after the container is built: its
    bootstrap configures logging (once per process) and would replace the capture."""
    saved = structlog.get_config()
    capture = LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    )
    try:
        yield capture.entries
    finally:
        structlog.configure(**saved)


def test_the_503_log_line_names_the_cause(make_postgres_database: Callable[[], str]) -> None:
    name = f"payorch_missing_{secrets.token_hex(6)}"
    missing = sa.make_url(make_postgres_database()).set(database=name)
    container = build_container(missing.render_as_string(hide_password=False), migrate=False)
    try:
        with (
            log_lines() as lines,
            ServerThread(create_app(container)) as server,
            httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client,
        ):
            # A key of the right shape: its lookup is the first query, and it fails.
            response = client.get(
                "/v1/payments",
                headers={"Authorization": f"Bearer {KEY_PREFIX}{secrets.token_urlsafe(32)}"},
            )
    finally:
        container.close()

    problem = assert_problem(response, 503, "service-unavailable")
    assert response.headers["Retry-After"]
    assert name not in problem["detail"]  # the cause is for the log, not the client
    [line] = [e for e in lines if e["event"] == "database_unavailable"]
    assert line["error"] == "OperationalError"
    assert f'database "{name}" does not exist' in line["cause"]
    assert "PAYORCH_DATABASE_URL" in line["check"]
    assert line["path"] == "/v1/payments"
