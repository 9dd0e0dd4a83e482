"""Settings keep secrets out of every text they produce; production refuses a fake
provider; validation messages carry no pydantic prefix and name the offending metadata key."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.api.body import validation_problem
from orchestrator.api.schemas import PaymentCreate
from orchestrator.cli.config import describe_configuration_error
from orchestrator.settings import Settings

STRIPE_KEY = "sk_live_never_print_me_4242"
SECRET = "a-secret-key-that-is-long-enough-0123456789"
BODY = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}


def _settings(**values: Any) -> Settings:
    # _env_file=None and explicit values: the developer's environment plays no part.
    values.setdefault("env", "dev")
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_secrets_do_not_appear_in_repr_or_str() -> None:
    password = "db-password-never-printed"
    settings = _settings(
        stripe_api_key=STRIPE_KEY,
        secret_key=SECRET,
        database_url=f"postgresql+psycopg://payorch:{password}@db/payorch",
        broker_url=f"amqp://payorch:{password}@mq//",
    )
    for text in (repr(settings), str(settings), repr(settings.model_dump())):
        assert STRIPE_KEY not in text and SECRET not in text
    assert password not in repr(settings) and password not in str(settings)
    assert settings.stripe_api_key.get_secret_value() == STRIPE_KEY


@pytest.mark.parametrize(
    "broken",
    [
        {"provider_timeout_seconds": 100},  # a model-level error: the whole input at stake
        {"lease_seconds": -5},
        {"env": "production", "stripe_api_base": "http://127.0.0.1:12111"},
    ],
)
def test_validation_errors_never_carry_the_input(broken: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        _settings(stripe_api_key=STRIPE_KEY, secret_key=SECRET, **broken)
    for text in (str(caught.value), repr(caught.value), describe_configuration_error(caught.value)):
        assert STRIPE_KEY not in text and SECRET not in text
    assert "Value error" not in describe_configuration_error(caught.value)


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"stripe_api_base": "http://provider-sim:12111"}, "PAYORCH_STRIPE_API_BASE"),
        (
            {"stripe_api_key": "sk_live_abc", "adyen_api_base": "http://adyen-sim:12112"},
            "PAYORCH_ADYEN_API_BASE",
        ),
        (
            {"stripe_api_key": "sk_live_abc", "adyen_reports_base": "http://adyen-sim:12112"},
            "PAYORCH_ADYEN_REPORTS_BASE",
        ),
        ({}, "PAYORCH_STRIPE_API_KEY"),  # the simulator's default key
        ({"stripe_api_key": "sk_test_payorch_simulator"}, "PAYORCH_STRIPE_API_KEY"),
        ({"stripe_api_key": "not-a-stripe-key"}, "PAYORCH_STRIPE_API_KEY"),
    ],
)
def test_production_refuses_a_provider_that_is_not_real(
    overrides: dict[str, Any], variable: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        _settings(env="production", secret_key=SECRET, **overrides)
    assert variable in describe_configuration_error(caught.value)


@pytest.mark.parametrize("key", ["sk_live_abc", "rk_live_abc", "sk_test_abc"])
def test_production_accepts_a_stripe_key_over_https(key: str) -> None:
    settings = _settings(env="production", secret_key=SECRET, stripe_api_key=key)
    assert settings.stripe_api_base == "https://api.stripe.com"


def test_an_unset_env_is_refused_in_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PAYORCH_ENV", raising=False)
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, secret_key=SECRET)  # type: ignore[call-arg]

    message = describe_configuration_error(caught.value)
    assert message.startswith("PAYORCH_ENV: not set: set it to production")
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("env", ["test", "production"])
@pytest.mark.parametrize("secret", [None, "dev-secret-key", "changeme", "short"])
def test_outside_dev_a_missing_or_placeholder_secret_key_is_refused(
    env: str, secret: str | None
) -> None:
    values: dict[str, Any] = {"env": env, "stripe_api_key": STRIPE_KEY}
    if secret is not None:
        values["secret_key"] = secret
    with pytest.raises(ValidationError) as caught:
        _settings(**values)
    assert "PAYORCH_SECRET_KEY is missing or a placeholder" in describe_configuration_error(
        caught.value
    )


def test_dev_and_test_may_use_the_simulator() -> None:
    for env in ("dev", "test"):
        _settings(env=env, secret_key=SECRET, stripe_api_base="http://127.0.0.1:12111")


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ValidationError) as caught:
        PaymentCreate.model_validate(body)
    errors: list[dict[str, str]] = validation_problem(caught.value).extensions["errors"]
    return errors


def test_field_errors_have_no_pydantic_prefix() -> None:
    [error] = _messages({**BODY, "currency": "zzz"})
    assert error["field"] == "currency"
    assert error["message"].startswith("must be a three-letter ISO 4217")


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ({"order": "1", "k" * 41: "v"}, "k" * 40),  # pydantic's own check: in the field path
        ({"long": "v" * 501}, "metadata.long"),
        ({"ok": "v", "a[b]": "v"}, "key 'a[b]' must not contain square brackets"),
        ({"ok": "v", "bad\x07key": "v"}, "key 'bad\\x07key' must not contain control"),
        ({"nul": "a\x00b"}, "the value of key 'nul' must not contain control"),
    ],
)
def test_metadata_errors_name_the_offending_key(metadata: dict[str, str], named: str) -> None:
    [error] = _messages({**BODY, "metadata": metadata})
    assert error["field"].startswith("metadata")
    assert named in f"{error['field']} {error['message']}", error
    assert "Value error" not in error["message"]


@pytest.mark.parametrize(
    ("previous", "named"),
    [
        (["changeme"], "PAYORCH_PREVIOUS_SECRET_KEYS[0] is a placeholder"),
        ([SECRET + "-old", "short"], "PAYORCH_PREVIOUS_SECRET_KEYS[1] is a placeholder"),
        ([SECRET], "PAYORCH_PREVIOUS_SECRET_KEYS[0] is PAYORCH_SECRET_KEY itself"),
    ],
)
def test_outside_dev_a_previous_secret_key_is_held_to_the_current_keys_rules(
    previous: list[str], named: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(named)):
        _settings(env="test", secret_key=SECRET, previous_secret_keys=previous)


def test_the_key_ring_is_the_current_key_then_the_previous_ones_in_order() -> None:
    older, old = SECRET + "-older", SECRET + "-old"
    settings = _settings(env="test", secret_key=SECRET, previous_secret_keys=[old, older])
    assert settings.secret_key_ring == (SECRET, old, older)
    assert old not in repr(settings)


@pytest.mark.parametrize(
    ("after", "max_attempts", "threshold"),
    [(3, 8, 3), (3, 3, 2), (7, 4, 3), (3, 1, 1), (1, 8, 1)],
)
def test_the_adyen_technical_cancel_threshold_stays_below_the_attempts_that_park(
    after: int, max_attempts: int, threshold: int
) -> None:
    settings = _settings(adyen_technical_cancel_after=after, max_attempts=max_attempts)

    assert settings.technical_cancel_threshold == threshold
