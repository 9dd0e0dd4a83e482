"""Endpoint signing secrets: made here, shown once, stored encrypted.

The relay must sign with the secret itself, so it cannot be stored as a hash.  It is
encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a key derived
from ``PAYORCH_SECRET_KEY`` with HKDF-SHA256 and a purpose label, so the key that HMACs log
lines is never used as-is for a second job.  A database dump alone reveals no secret.

Hazard: changing ``PAYORCH_SECRET_KEY`` makes every stored secret unreadable (the relay
records ``error`` attempts naming it); rotate each endpoint's secret after moving the key.
"""

from __future__ import annotations

import base64
import secrets

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format prefix, not a secret
SECRET_BYTES = 32  # 256-bit HMAC keys
_PURPOSE = b"payorch webhook endpoint secrets v1"


class UnreadableSecret(Exception):
    """The stored secret does not decrypt under the current PAYORCH_SECRET_KEY."""


def new_signing_secret() -> str:
    """``whsec_`` + base64 of 32 random bytes: the format the standardwebhooks library reads."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


class SecretBox:
    """``purpose``: the HKDF label; each kind of stored secret has its own (connector
    account credentials use ``services.connector_accounts``'s), so one key never serves
    two jobs."""

    def __init__(self, secret_key: str, *, purpose: bytes = _PURPOSE) -> None:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
            secret_key.encode("utf-8")
        )
        self._fernet = Fernet(base64.urlsafe_b64encode(derived))

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode("ascii")).decode("utf-8")
        except InvalidToken:
            raise UnreadableSecret(
                "the endpoint's secret does not decrypt with the current PAYORCH_SECRET_KEY "
                "(was the key changed?): rotate the endpoint's secret"
            ) from None
