"""Endpoint signing secrets: made here, shown once, stored encrypted.

The relay must sign with the secret itself, so it cannot be stored as a hash.  It is
encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a key derived
from ``PAYORCH_SECRET_KEY`` with HKDF-SHA256 and a purpose label, so the key that HMACs log
lines is never used as-is for a second job.  A database dump alone reveals no secret.

The box holds a key ring (``PAYORCH_SECRET_KEY`` first, then ``PAYORCH_PREVIOUS_SECRET_KEYS``):
it seals under the first and opens under any (``MultiFernet``), and ``reseal`` moves a
sealed secret to the first (``services.secret_rotation``, ``payorch secrets reencrypt``).

Hazard: a key dropped from the ring before everything sealed under it was resealed makes
those secrets unreadable (the relay records ``error`` attempts naming it; a connector
account's payments park); reseal first, then drop the previous key.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
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
    two jobs.  ``secret_keys``: one root secret, or the ring, current first."""

    def __init__(self, secret_keys: str | Sequence[str], *, purpose: bytes = _PURPOSE) -> None:
        ring = [secret_keys] if isinstance(secret_keys, str) else list(secret_keys)
        if not ring:
            raise ValueError("a secret box needs at least one key")
        fernets = [_fernet(key, purpose) for key in ring]
        self._current = fernets[0]
        self._ring = MultiFernet(fernets)

    def seal(self, secret: str) -> str:
        return self._current.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str:
        try:
            return self._ring.decrypt(sealed.encode("ascii")).decode("utf-8")
        except InvalidToken:
            raise UnreadableSecret(
                "the endpoint's secret does not decrypt with PAYORCH_SECRET_KEY or any of "
                "PAYORCH_PREVIOUS_SECRET_KEYS (was a key dropped?): rotate the endpoint's secret"
            ) from None

    def is_current(self, sealed: str) -> bool:
        """Whether ``sealed`` opens under the current key (nothing to reseal)."""
        try:
            self._current.decrypt(sealed.encode("ascii"))
        except InvalidToken:
            return False
        return True

    def reseal(self, sealed: str) -> str:
        """The same secret sealed under the current key; ``UnreadableSecret`` if no key of
        the ring opens it."""
        try:
            return self._ring.rotate(sealed.encode("ascii")).decode("ascii")
        except InvalidToken:
            raise UnreadableSecret(
                "a stored secret opens under no key of the ring: it cannot be resealed"
            ) from None


def _fernet(secret_key: str, purpose: bytes) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
        secret_key.encode("utf-8")
    )
    return Fernet(base64.urlsafe_b64encode(derived))
