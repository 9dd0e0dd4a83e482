"""Which credentials a connector account of each provider takes (decision 0062), and the
provider-specific facts the accept needs about saved payment methods (decision 0063).

The provider package owns these because they are each provider's vocabulary: the core
stores and encrypts a credentials object without knowing its fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

STRIPE = "stripe"
ADYEN = "adyen"
PROVIDERS: tuple[str, ...] = (STRIPE, ADYEN)

# Stripe's test tokens (pm_card_visa, pm_card_threeDSecure2Required, …): the same string
# in every account, so they can name no one's saved card.
SHARED_TEST_METHOD_PREFIX = "pm_card_"


def is_shared_test_method(payment_method: str) -> bool:
    """A method that is the same in every account (belongs to nobody)."""
    return payment_method.startswith(SHARED_TEST_METHOD_PREFIX)


class InvalidCredentials(ValueError):
    """A credentials object a provider cannot use; ``field`` names what to fix
    (``credentials.api_key``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


_STRIPE_KEY = re.compile(r"^(sk|rk)_(test|live)_[A-Za-z0-9]{8,247}$")
_STRIPE_ACCOUNT = re.compile(r"^acct_[A-Za-z0-9]{8,250}$")
_HEX = re.compile(r"^(?:[0-9A-Fa-f]{2}){16,128}$")
_ADYEN_TEXT = re.compile(r"^[\x21-\x7E]{1,500}$")
# Adyen's live endpoints are https://{prefix}-checkout-live.adyenpayments.com/…
_ADYEN_PREFIX = re.compile(r"^[a-z0-9]{1,40}-[A-Za-z0-9]{1,60}$")

_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # (required, optional); Stripe's two shapes are checked apart below.
    STRIPE: (frozenset(), frozenset({"api_key", "stripe_account"})),
    ADYEN: (
        frozenset({"api_key", "merchant_account", "hmac_key"}),
        frozenset({"live_url_prefix"}),
    ),
}


def validate_credentials(provider: str, given: Any) -> dict[str, str]:
    """The credentials a provider's account takes, or ``InvalidCredentials`` naming the
    first field to fix.  Stripe: ``{"api_key": "sk_…"|"rk_…"}`` or ``{"stripe_account":
    "acct_…"}`` (a connected account under the platform key), never both.  Adyen:
    ``api_key``, ``merchant_account``, ``hmac_key`` (hex), optional ``live_url_prefix``."""
    if provider not in _FIELDS:
        raise InvalidCredentials("provider", f"must be one of: {', '.join(PROVIDERS)}")
    if not isinstance(given, Mapping):
        raise InvalidCredentials("credentials", "must be an object")
    required, optional = _FIELDS[provider]
    for name, value in given.items():
        if name not in required | optional:
            allowed = ", ".join(sorted(required | optional))
            raise InvalidCredentials(
                f"credentials.{name}", f"is not a {provider} credential ({allowed})"
            )
        if not isinstance(value, str):
            raise InvalidCredentials(f"credentials.{name}", "must be a string")
    for name in sorted(required):
        if name not in given:
            raise InvalidCredentials(f"credentials.{name}", "is required")
    credentials = {str(k): str(v) for k, v in given.items()}
    if provider == STRIPE:
        _check_stripe(credentials)
    else:
        _check_adyen(credentials)
    return credentials


def _check_stripe(credentials: dict[str, str]) -> None:
    if len(credentials) != 1:
        raise InvalidCredentials(
            "credentials",
            'give exactly one of "api_key" (sk_… or rk_…: the account\'s own key) or '
            '"stripe_account" (acct_…: a connected account under the platform key)',
        )
    if "api_key" in credentials and not _STRIPE_KEY.fullmatch(credentials["api_key"]):
        raise InvalidCredentials(
            "credentials.api_key", "must be a Stripe secret or restricted key (sk_… or rk_…)"
        )
    if "stripe_account" in credentials and not _STRIPE_ACCOUNT.fullmatch(
        credentials["stripe_account"]
    ):
        raise InvalidCredentials(
            "credentials.stripe_account", "must be a Stripe account id (acct_…)"
        )


def _check_adyen(credentials: dict[str, str]) -> None:
    for name in ("api_key", "merchant_account"):
        if not _ADYEN_TEXT.fullmatch(credentials[name]):
            raise InvalidCredentials(
                f"credentials.{name}", "must be 1-500 printable characters without spaces"
            )
    if not _HEX.fullmatch(credentials["hmac_key"]):
        raise InvalidCredentials(
            "credentials.hmac_key",
            "must be the hexadecimal HMAC key from Adyen's Customer Area (32-256 hex digits)",
        )
    prefix = credentials.get("live_url_prefix")
    if prefix is not None and not _ADYEN_PREFIX.fullmatch(prefix):
        raise InvalidCredentials(
            "credentials.live_url_prefix",
            "must be the live URL prefix Adyen assigned ([random]-[company name])",
        )
