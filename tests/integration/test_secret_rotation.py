"""``PAYORCH_SECRET_KEY`` rotation on PostgreSQL: with the old key among
``PAYORCH_PREVIOUS_SECRET_KEYS``, stored secrets still open; ``payorch secrets reencrypt``
(run as an operator runs it, a subprocess) moves every one to the new key, names what opens
under no key and exits 1 for it, and a second run finds nothing to do."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import connector_accounts, webhook_endpoints
from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from orchestrator.services.connector_accounts import open_credentials
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.support.processes import payorch_command, process_environment

OLD = TEST_SECRET_KEY
NEW = "the-new-root-secret-0123456789abcdef-0123456789"
DROPPED = "a-key-nobody-holds-any-more-0123456789abcdef01"
STRIPE_KEY = "sk_test_51RotationKeyValue000ABCD"


@dataclass
class Stored:
    database_url: str
    endpoint_id: str
    endpoint_secret: str
    account_id: str
    lost_account_id: str

    def sealed(self) -> dict[str, Any]:
        container = build_container(self.database_url, migrate=False)
        try:
            with container.engine.connect() as conn:
                endpoints = conn.execute(
                    sa.select(
                        webhook_endpoints.c.id,
                        webhook_endpoints.c.secret_encrypted,
                        webhook_endpoints.c.previous_secret_encrypted,
                    )
                ).all()
                accounts = conn.execute(
                    sa.select(connector_accounts.c.id, connector_accounts.c.credentials_encrypted)
                ).all()
        finally:
            container.close()
        return {
            "endpoints": sorted(map(tuple, endpoints)),
            "accounts": sorted(map(tuple, accounts)),
        }

    def reencrypt(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = process_environment(
            {
                "PAYORCH_ENV": "test",
                "PAYORCH_SECRET_KEY": NEW,
                "PAYORCH_PREVIOUS_SECRET_KEYS": json.dumps([OLD]),
                "PAYORCH_DATABASE_URL": self.database_url,
                "PAYORCH_LOG_LEVEL": "WARNING",
            }
        )
        return subprocess.run(
            payorch_command("secrets", "reencrypt", "--json", *args),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def stored(database_url: str) -> Iterator[Stored]:
    """An endpoint (its secret rotated once: a previous secret too) and an account sealed
    under the old key, and an account sealed under a key that is then dropped."""
    old = build_container(database_url, secret_key=OLD, webhook_allow_private=True)
    dropped = build_container(database_url, secret_key=DROPPED, migrate=False)
    try:
        merchant = create_client(old.uow, "shop", Role.MERCHANT).client
        endpoints = old.endpoint_service()
        created = endpoints.create(
            merchant.id, url="https://hooks.example/in", events=["*"], description=None
        )
        rotated = endpoints.rotate_secret(merchant.id, created.endpoint.id, if_match=None)
        account = old.connector_account_service().create(
            merchant.id, provider="stripe", name="main", credentials={"api_key": STRIPE_KEY}
        )
        lost = dropped.connector_account_service().create(
            merchant.id, provider="stripe", name="lost", credentials={"api_key": STRIPE_KEY}
        )
        yield Stored(database_url, created.endpoint.id, rotated.secret, account.id, lost.id)
    finally:
        old.close()
        dropped.close()


def _columns(answer: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {c["column"]: c for c in json.loads(answer.stdout)["columns"]}


def test_reencrypt_moves_every_readable_secret_to_the_new_key_and_names_the_rest(
    stored: Stored,
) -> None:
    before = stored.sealed()
    dry = stored.reencrypt("--dry-run")
    assert stored.sealed() == before  # a dry run changes nothing
    assert _columns(dry)["connector_accounts.credentials_encrypted"]["resealed"] == 1

    first = stored.reencrypt()

    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    assert f"connector_accounts.credentials_encrypted of {stored.lost_account_id}" in first.stderr
    columns = _columns(first)
    assert columns["webhook_endpoints.secret_encrypted"]["resealed"] == 1
    assert columns["webhook_endpoints.previous_secret_encrypted"]["resealed"] == 1
    assert columns["connector_accounts.credentials_encrypted"]["resealed"] == 1
    assert columns["connector_accounts.credentials_encrypted"]["unreadable"] == [
        stored.lost_account_id
    ]
    # The new key alone now opens everything that was readable.
    new_only = build_container(stored.database_url, secret_key=NEW, migrate=False)
    try:
        endpoint = new_only.endpoint_service().get(
            _merchant_of(new_only, stored.endpoint_id), stored.endpoint_id
        )
        assert new_only.secret_box().open(endpoint.secret_encrypted) == stored.endpoint_secret
        assert endpoint.previous_secret_encrypted is not None
        new_only.secret_box().open(endpoint.previous_secret_encrypted)
        with new_only.uow() as uow:
            account = uow.connector_accounts.get(stored.account_id)
        assert account is not None
        box = new_only.connector_account_service().box
        assert open_credentials(box, account) == {"api_key": STRIPE_KEY}
    finally:
        new_only.close()

    second = stored.reencrypt()
    assert second.returncode == 1  # the lost account is still unreadable: still said
    again = _columns(second)
    assert {c: again[c]["resealed"] for c in again} == dict.fromkeys(again, 0)
    assert again["connector_accounts.credentials_encrypted"]["already_current"] == 1


def _merchant_of(container: Container, endpoint_id: str) -> str:
    with container.engine.connect() as conn:
        return str(
            conn.execute(
                sa.select(webhook_endpoints.c.client_id).where(
                    webhook_endpoints.c.id == endpoint_id
                )
            ).scalar_one()
        )
