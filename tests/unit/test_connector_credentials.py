"""Connector account credentials: what each provider takes (each refusal names its field),
what answers show (``…last4``), the box (its own purpose label), and the worker's registry
of providers per account (platform for none, cached per account and version, a clear
``Permanent`` for a provider without an adapter)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.bootstrap import ProviderRegistry
from orchestrator.domain.connector_accounts import (
    AccountStatus,
    ConnectorAccount,
    credential_hints,
    is_connector_account_id,
    new_connector_account_id,
)
from orchestrator.events.secret_box import SecretBox, UnreadableSecret
from orchestrator.providers.base import Permanent
from orchestrator.providers.credentials import (
    InvalidCredentials,
    is_shared_test_method,
    validate_credentials,
)
from orchestrator.services.connector_accounts import (
    UnreadableCredentials,
    credentials_box,
    open_credentials,
    seal_credentials,
)

SECRET = "a-test-secret-key-of-enough-length-0123456789"
HMAC = "44782DEF547AAA06C910C43932B1EB0C"


def test_a_stripe_account_takes_its_own_key_or_a_connected_account_never_both() -> None:
    assert validate_credentials("stripe", {"api_key": "sk_live_abcdefgh1234"}) == {
        "api_key": "sk_live_abcdefgh1234"
    }
    assert validate_credentials("stripe", {"api_key": "rk_test_abcdefgh1234"})
    assert validate_credentials("stripe", {"stripe_account": "acct_1Nabcdefgh"})
    for given, field_name in [
        ({}, "credentials"),
        ({"api_key": "sk_test_abcdefgh1234", "stripe_account": "acct_1Nabcdefgh"}, "credentials"),
        ({"api_key": "pk_test_abcdefgh1234"}, "credentials.api_key"),
        ({"api_key": 42}, "credentials.api_key"),
        ({"stripe_account": "cus_123456789"}, "credentials.stripe_account"),
        ({"secret": "x"}, "credentials.secret"),
        ("sk_test_abcdefgh1234", "credentials"),
    ]:
        with pytest.raises(InvalidCredentials) as refused:
            validate_credentials("stripe", given)
        assert refused.value.field == field_name, given


def test_an_adyen_account_needs_its_key_merchant_account_and_a_hex_hmac_key() -> None:
    good = {"api_key": "AQEkey_1", "merchant_account": "ShopEU", "hmac_key": HMAC}
    assert validate_credentials("adyen", good) == good
    assert validate_credentials("adyen", {**good, "live_url_prefix": "1797a841fbb37ca7-Shop"})
    for given, field_name in [
        ({k: v for k, v in good.items() if k != "hmac_key"}, "credentials.hmac_key"),
        ({**good, "hmac_key": "zz" * 16}, "credentials.hmac_key"),
        ({**good, "hmac_key": "ABC"}, "credentials.hmac_key"),
        ({**good, "merchant_account": "has space"}, "credentials.merchant_account"),
        ({**good, "live_url_prefix": "https://evil.example/"}, "credentials.live_url_prefix"),
        ({**good, "stripe_account": "acct_1"}, "credentials.stripe_account"),
    ]:
        with pytest.raises(InvalidCredentials) as refused:
            validate_credentials("adyen", given)
        assert refused.value.field == field_name, given
    with pytest.raises(InvalidCredentials) as unknown:
        validate_credentials("paypal", good)
    assert unknown.value.field == "provider"


def test_answers_show_the_last_four_and_never_a_short_value_whole() -> None:
    assert credential_hints({"api_key": "sk_test_abcdefgh1234", "x": "abc", "y": ""}) == {
        "api_key": "…1234",
        "x": "…c",
        "y": "…",
    }


def test_ids_and_shared_test_tokens() -> None:
    made = new_connector_account_id()
    assert is_connector_account_id(made) and not is_connector_account_id(made + "0")
    assert not is_connector_account_id("ca_../../etc")
    assert is_shared_test_method("pm_card_visa")
    assert not is_shared_test_method("pm_1SavedCard")


def test_credentials_are_sealed_under_their_own_purpose() -> None:
    box = credentials_box(SECRET)
    sealed = seal_credentials(box, {"api_key": "sk_test_abcdefgh1234"})
    assert "abcdefgh" not in sealed
    account = _account(credentials_encrypted=sealed)
    assert open_credentials(box, account) == {"api_key": "sk_test_abcdefgh1234"}
    with pytest.raises(UnreadableSecret):
        SecretBox(SECRET).open(sealed)  # the webhook secrets' key cannot open it
    with pytest.raises(UnreadableCredentials):
        open_credentials(credentials_box(SECRET + "-moved"), account)


# -- the registry -----------------------------------------------------------------------


def _account(**changes: Any) -> ConnectorAccount:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    values: dict[str, Any] = {
        "id": "ca_" + "1" * 24,
        "client_id": "cli_1",
        "provider": "stripe",
        "name": "main",
        "credentials_encrypted": "",
        "credential_hints": {},
        "status": AccountStatus.ENABLED,
        "disabled_reason": None,
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }
    values.update(changes)
    return ConnectorAccount(**values)


@dataclass
class _Accounts:
    rows: dict[str, ConnectorAccount] = field(default_factory=dict)
    payments: dict[str, str | None] = field(default_factory=dict)
    reads: int = 0

    def get(self, account_id: str) -> ConnectorAccount | None:
        self.reads += 1
        return self.rows.get(account_id)

    def account_of_payment(self, payment_id: str) -> str | None:
        return self.payments.get(payment_id)


@dataclass
class _Unit:
    connector_accounts: _Accounts

    def __enter__(self) -> _Unit:
        return self

    def __exit__(self, *_: object) -> None:
        return None


@dataclass
class _Built:
    account_id: str
    credentials: dict[str, str]


def _registry(accounts: _Accounts) -> tuple[ProviderRegistry, list[_Built], object]:
    built: list[_Built] = []
    platform = object()
    box = credentials_box(SECRET)

    def stripe(account: ConnectorAccount, credentials: dict[str, str], events: Any) -> Any:
        made = _Built(account.id, credentials)
        built.append(made)
        return made

    registry = ProviderRegistry(
        platform=lambda: platform,
        uow=lambda: _Unit(accounts),
        box=box,
        factories={"stripe": stripe},
        observe=lambda provider: provider,
    )
    return registry, built, platform


def test_the_registry_builds_one_provider_per_account_version_and_none_is_the_platform() -> None:
    box = credentials_box(SECRET)
    accounts = _Accounts()
    account = _account(credentials_encrypted=seal_credentials(box, {"api_key": "sk_test_one1"}))
    accounts.rows[account.id] = account
    registry, built, platform = _registry(accounts)

    assert registry.provider_for(None) is platform
    first = registry.provider_for(account.id)
    again = registry.provider_for(account.id)
    accounts.rows[account.id] = replace(
        account,
        version=2,
        credentials_encrypted=seal_credentials(box, {"api_key": "sk_test_two2"}),
    )
    rotated = registry.provider_for(account.id)

    assert first is again
    assert [b.credentials for b in built] == [
        {"api_key": "sk_test_one1"},
        {"api_key": "sk_test_two2"},
    ]
    assert rotated is built[1]


def test_an_account_without_an_adapter_or_that_is_gone_is_permanent() -> None:
    accounts = _Accounts()
    adyen = _account(id="ca_" + "2" * 24, provider="adyen")
    accounts.rows[adyen.id] = adyen
    registry, built, _platform = _registry(accounts)

    with pytest.raises(Permanent, match="no adapter for provider adyen yet"):
        registry.provider_for(adyen.id)
    with pytest.raises(Permanent, match="does not exist"):
        registry.provider_for("ca_" + "3" * 24)
    assert built == []


def test_each_accounts_provider_is_guarded_by_its_own_circuit() -> None:
    """Decision 0082: the registry hands each account's observed provider to ``guard`` with
    the account's id (its circuit key), once per account version."""
    box = credentials_box(SECRET)
    accounts = _Accounts()
    one = _account(credentials_encrypted=seal_credentials(box, {"api_key": "sk_test_one1"}))
    two = _account(
        id="ca_" + "4" * 24,
        credentials_encrypted=seal_credentials(box, {"api_key": "sk_test_two2"}),
    )
    accounts.rows.update({one.id: one, two.id: two})
    guarded: list[tuple[Any, str]] = []

    def guard(provider: Any, key: str) -> Any:
        guarded.append((provider, key))
        return ("guarded", key)

    registry = ProviderRegistry(
        platform=lambda: object(),
        uow=lambda: _Unit(accounts),
        box=box,
        factories={"stripe": lambda account, credentials, events: _Built(account.id, credentials)},
        observe=lambda provider: provider,
        guard=guard,
    )

    assert registry.provider_for(one.id) == ("guarded", one.id)
    assert registry.provider_for(two.id) == ("guarded", two.id)
    assert registry.provider_for(one.id) == ("guarded", one.id)
    assert [(built.account_id, key) for built, key in guarded] == [
        (one.id, one.id),
        (two.id, two.id),
    ]
