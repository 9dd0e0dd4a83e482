"""``payorch relay --once`` as a process: one pass, its report, exit 0."""

from __future__ import annotations

import json
import subprocess

from tests.fakes.provider import FakeProvider
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.seeds import new_merchant
from tests.integration.webhook_helpers import delivery_rows, finished_payment
from tests.support.processes import payorch_command, process_environment
from tests.support.webhook_receiver import WebhookReceiver


def test_relay_once_delivers_what_is_due_and_prints_what_it_did(database_url: str) -> None:
    container = build_container(database_url, provider=FakeProvider(), webhook_allow_private=True)
    try:
        with WebhookReceiver() as receiver:
            merchant = new_merchant(container)
            created = container.endpoint_service().create(
                merchant.id, url=receiver.url, events=["*"], description=None
            )
            receiver.secrets.append(created.secret)
            finished_payment(container, merchant, "cli-1")
            env = {
                **process_environment(),
                "PAYORCH_ENV": "test",
                "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
                "PAYORCH_DATABASE_URL": database_url,
                "PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true",
                "PAYORCH_LOG_LEVEL": "WARNING",
            }
            completed = subprocess.run(
                [*payorch_command("relay", "--once", "--json")],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        assert completed.returncode == 0, completed.stderr[-2000:]
        report = json.loads(completed.stdout)
        assert report["published"] == 1 and report["delivered"] == 1
        assert receiver.unverified() == [] and len(receiver.delivered_ids()) == 1
        assert [d.status for d in delivery_rows(container)] == ["delivered"]
    finally:
        container.close()
