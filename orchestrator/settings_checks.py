"""What a configuration must satisfy before any process starts, and the placeholder values
it refuses (``orchestrator.settings`` runs these checks when it is built).

Each check names the hazard it guards against in its message: a process that starts with
a placeholder secret, a fake provider in production, or timeouts out of their order would
run, and go wrong later, where nobody looks.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import SecretStr

PLACEHOLDER_SECRETS = frozenset({"", "changeme", "change-me", "secret", "dev-secret-key"})
MIN_SECRET_LENGTH = 32
DEV_SECRET_KEY = "dev-secret-key"  # noqa: S105 - the dev-only placeholder, refused outside dev
# The key the simulator accepts; a production process configured with it (or with a
# plain-http provider) would "charge" a fake and report success: refused in production.
SIMULATOR_STRIPE_API_KEY = "sk_test_payorch_simulator"
STRIPE_KEY_PREFIXES = ("sk_live_", "sk_test_", "rk_live_", "rk_test_")


class CheckedSettings(Protocol):
    """The settings these checks read (``orchestrator.settings.Settings``)."""

    @property
    def env(self) -> Literal["dev", "test", "production"]: ...
    @property
    def secret_key(self) -> SecretStr: ...
    @property
    def previous_secret_keys(self) -> list[SecretStr]: ...
    @property
    def stripe_api_base(self) -> str: ...
    @property
    def stripe_api_key(self) -> SecretStr: ...
    @property
    def adyen_api_base(self) -> str: ...
    @property
    def adyen_reports_base(self) -> str: ...
    @property
    def webhook_connect_timeout_seconds(self) -> float: ...
    @property
    def webhook_timeout_seconds(self) -> float: ...
    @property
    def webhook_lease_seconds(self) -> float: ...
    @property
    def wake_up(self) -> Literal["notify", "publish"] | None: ...
    @property
    def is_sqlite(self) -> bool: ...
    @property
    def provider_timeout_seconds(self) -> float: ...
    @property
    def task_soft_time_limit(self) -> float: ...


def check_settings(settings: CheckedSettings) -> None:
    """Raise ``ValueError`` (which pydantic reports as a validation error) for a
    configuration no process may start with."""
    if settings.env != "dev":
        check_secret_keys(settings)
    if settings.env == "production":
        check_real_provider(settings)
    attempt = settings.webhook_connect_timeout_seconds + settings.webhook_timeout_seconds
    if settings.webhook_lease_seconds < 2 * attempt:
        raise ValueError(
            "PAYORCH_WEBHOOK_LEASE_SECONDS must be at least twice "
            "PAYORCH_WEBHOOK_CONNECT_TIMEOUT_SECONDS + PAYORCH_WEBHOOK_TIMEOUT_SECONDS "
            f"({attempt:.1f}s): a lease that ends mid-attempt lets a second relay send the "
            "same delivery at the same time"
        )
    if settings.wake_up == "notify" and settings.is_sqlite:
        raise ValueError(
            "PAYORCH_WAKE_UP=notify needs PostgreSQL (LISTEN/NOTIFY); SQLite publishes "
            "from the API (PAYORCH_WAKE_UP=publish, its default)"
        )
    if settings.provider_timeout_seconds >= settings.task_soft_time_limit:
        raise ValueError(
            "PAYORCH_PROVIDER_TIMEOUT_SECONDS must be well below PAYORCH_LEASE_SECONDS "
            f"(a provider call must fit in the task's soft limit of "
            f"{settings.task_soft_time_limit:.1f}s, which is 0.6 x the lease)"
        )


def check_secret_keys(settings: CheckedSettings) -> None:
    """The current key and every previous one: a weak key still accepted is as good as a
    weak current one to someone forging a console cookie."""
    secret_key = settings.secret_key.get_secret_value()
    if _weak(secret_key):
        # A short key makes the HMACs in logs guessable for short idempotency keys.
        raise ValueError(
            "PAYORCH_SECRET_KEY is missing or a placeholder (or shorter than "
            f"{MIN_SECRET_LENGTH} characters); set it to a long random value "
            "(for example: python -c 'import secrets; print(secrets.token_urlsafe(48))') "
            "or run with PAYORCH_ENV=dev"
        )
    for position, previous in enumerate(settings.previous_secret_keys):
        value = previous.get_secret_value()
        if _weak(value):
            raise ValueError(
                f"PAYORCH_PREVIOUS_SECRET_KEYS[{position}] is a placeholder or shorter than "
                f"{MIN_SECRET_LENGTH} characters: a key still accepted must be as strong as "
                "the current one (drop it, or run with PAYORCH_ENV=dev)"
            )
        if value == secret_key:
            raise ValueError(
                f"PAYORCH_PREVIOUS_SECRET_KEYS[{position}] is PAYORCH_SECRET_KEY itself: "
                "list only keys being rotated out"
            )


def _weak(key: str) -> bool:
    return key in PLACEHOLDER_SECRETS or len(key) < MIN_SECRET_LENGTH


def check_real_provider(settings: CheckedSettings) -> None:
    """Production talks to a real provider: a forgotten variable must not leave it
    "charging" the simulator (or anything else over plain http) and reporting success."""
    if not settings.stripe_api_base.startswith("https://"):
        raise ValueError(
            "PAYORCH_STRIPE_API_BASE must be an https:// URL in production (Stripe's is "
            "https://api.stripe.com); the simulator is for PAYORCH_ENV=dev or test"
        )
    if not settings.adyen_api_base.startswith("https://"):
        raise ValueError(
            "PAYORCH_ADYEN_API_BASE must be an https:// URL in production (Adyen's test "
            "endpoint is https://checkout-test.adyen.com; live accounts use their URL prefix); "
            "the simulator is for PAYORCH_ENV=dev or test"
        )
    if not settings.adyen_reports_base.startswith("https://"):
        # Reconciliation sends the account's API key there and believes what it answers.
        raise ValueError(
            "PAYORCH_ADYEN_REPORTS_BASE must be an https:// URL in production (Adyen's test "
            "reports are at https://ca-test.adyen.com/reports/download; live accounts read "
            "ca-live.adyen.com); the simulator is for PAYORCH_ENV=dev or test"
        )
    key = settings.stripe_api_key.get_secret_value()
    if key == SIMULATOR_STRIPE_API_KEY or not key.startswith(STRIPE_KEY_PREFIXES):
        raise ValueError(
            "PAYORCH_STRIPE_API_KEY must be set to a Stripe secret or restricted key "
            "(sk_live_..., rk_live_..., or sk_test_... for Stripe's test mode) in production"
        )
