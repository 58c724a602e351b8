"""Optional encryption of stored bodies with Fernet (``HOOKD_ENCRYPTION_KEYS``)."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from hookd.errors import ConfigError


class BodyCipher:
    """The first key encrypts; every key decrypts (rotation)."""

    def __init__(self, keys_csv: str) -> None:
        raw = [k.strip() for k in keys_csv.split(",") if k.strip()]
        try:
            self._fernet = MultiFernet([Fernet(k) for k in raw]) if raw else None
        except (ValueError, TypeError):
            raise ConfigError(
                "environment: HOOKD_ENCRYPTION_KEYS: each key must be a url-safe base64 Fernet key"
            ) from None

    @property
    def enabled(self) -> bool:
        return self._fernet is not None

    def seal(self, body: bytes) -> tuple[bytes, bool]:
        if self._fernet is None:
            return body, False
        return self._fernet.encrypt(body), True

    def open(self, body: bytes, encrypted: bool) -> bytes:
        if not encrypted:
            return body
        if self._fernet is None:
            raise ConfigError("stored body is encrypted but HOOKD_ENCRYPTION_KEYS is not set")
        try:
            return self._fernet.decrypt(body)
        except InvalidToken:
            raise ConfigError("no key in HOOKD_ENCRYPTION_KEYS opens this stored body") from None

    def reseal(self, body: bytes, encrypted: bool) -> bytes:
        """``body`` encrypted with the first key: re-encrypted if it was (by any
        key), encrypted if it was stored in plain text."""
        if self._fernet is None:
            raise ConfigError("HOOKD_ENCRYPTION_KEYS is not set: there is no key to rotate to")
        if not encrypted:
            return self._fernet.encrypt(body)
        try:
            return self._fernet.rotate(body)
        except InvalidToken:
            raise ConfigError("no key in HOOKD_ENCRYPTION_KEYS opens a stored body") from None
