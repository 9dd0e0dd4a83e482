from __future__ import annotations

from typing import Any

from orchestrator.bootstrap import Container, bootstrap
from orchestrator.db.clock import Clock
from orchestrator.db.migrate import upgrade
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.providers.base import PaymentProvider
from orchestrator.settings import Settings
from tests.fakes.publisher import RecordingPublisher

TEST_SECRET_KEY = "test-secret-key-0123456789abcdef0123456789abcdef"


def test_settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "env": "test",
        "database_url": database_url,
        "secret_key": TEST_SECRET_KEY,
        "log_level": "WARNING",
        "db_pool_size": 5,
        "db_max_overflow": 10,
    }
    values.update(overrides)
    return Settings(**values)


def build_container(
    database_url: str,
    *,
    provider: PaymentProvider | None = None,
    publisher: TaskPublisher | None = None,
    clock: Clock | None = None,
    migrate: bool = True,
    **overrides: Any,
) -> Container:
    if migrate:
        upgrade(database_url)
    # A fake publisher sees only what the API publishes itself; the NOTIFY path (no
    # dispatcher runs here) is tested where a test asks for it (wake_up="notify").
    overrides.setdefault("wake_up", "publish")
    container = bootstrap(
        test_settings(database_url, **overrides),
        publisher=publisher if publisher is not None else RecordingPublisher(),
        provider_factory=(lambda: provider) if provider is not None else None,
        clock=clock,
    )
    # Tests never ask real DNS where a webhook host is (a generated URL would send a query
    # off this machine): a test that needs names injects a table.
    container.resolver = no_dns
    return container


def no_dns(host: str, port: int) -> list[str]:
    raise OSError(f"tests do not resolve {host!r}: inject a resolver table")
