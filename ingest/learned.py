"""Signing secrets learned in a handshake (``hookd.providers.base.LearnsSecret``):
kept in the database, sealed like bodies, read back by every receiver process.

Only the secrets learned through a token the source still configures verify: removing
a token from ``secrets`` retires the secret it opened. A process reads a source's
secrets once and keeps them; it reads again when a configured token has no secret yet
(another process may have learned it since), at most once per ``retry_s``, and in any
case every ``refresh_s``. A secret learned here is in this process's keys at once.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import ConfigError, PayloadError
from hookd.providers.base import HmacKey, Key
from hookd.sources import Source
from store.crypto import BodyCipher
from store.intake import learned as rows

log = logging.getLogger("hookd.receiver")

RETRY_S = 1.0
REFRESH_S = 60.0


class LearnedUnavailable(Exception):
    """The database could not be read or written: the sender is told to come back."""


def token_id(key: Key) -> str:
    """What a learned secret is kept under: the SHA-256 of the configured token that
    opened its handshake (never the token itself)."""
    assert isinstance(key, HmacKey)
    return hashlib.sha256(key.key).hexdigest()


@dataclass(slots=True)
class _Known:
    by_token: dict[str, Key]
    read_at: float


class LearnedKeys:
    """The learned secrets of every source that learns one, per process."""

    def __init__(
        self,
        engine: AsyncEngine,
        cipher: BodyCipher,
        *,
        retry_s: float = RETRY_S,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._cipher = cipher
        self._retry_s = retry_s
        self._refresh_s = refresh_s
        self._clock = clock
        self._known: dict[str, _Known] = {}

    async def keys(self, source: Source) -> tuple[Key, ...]:
        """The keys that verify ``source``'s deliveries: the secrets learned through
        the tokens it configures, in the order of those tokens."""
        tokens = [token_id(key) for key in source.keys]
        known = self._known.get(source.name)
        now = self._clock()
        stale = known is None or now - known.read_at >= self._refresh_s
        missing = known is not None and any(t not in known.by_token for t in tokens)
        if stale or (missing and known is not None and now - known.read_at >= self._retry_s):
            known = await self._read(source, now)
        assert known is not None
        return tuple(known.by_token[t] for t in tokens if t in known.by_token)

    async def learn(self, source: Source, index: int, secret: str) -> bool:
        """Keep ``secret``, learned through the source's ``index``-th token: False when
        that token had opened a handshake before (nothing is replaced)."""
        provider = source.adapter.learns_secret
        assert provider is not None
        key = provider.parse(secret)
        opened_by = token_id(source.keys[index])
        sealed, encrypted = self._cipher.seal(secret.encode("utf-8"))
        try:
            written = await rows.learn(
                self._engine,
                source.name,
                opened_by=opened_by,
                secret=sealed,
                encrypted=encrypted,
                at=datetime.now(UTC),
            )
        except SQLAlchemyError as exc:
            failed = {"source": source.name, "error": type(exc).__name__}
            log.warning("learned secret not kept", extra=failed)
            raise LearnedUnavailable from None
        if written:
            known = self._known.get(source.name)
            if known is not None:
                known.by_token[opened_by] = key
        return written

    async def _read(self, source: Source, now: float) -> _Known:
        provider = source.adapter.learns_secret
        assert provider is not None
        try:
            found: Sequence[rows.LearnedRow] = await rows.learned(self._engine, source.name)
        except SQLAlchemyError as exc:
            failed = {"source": source.name, "error": type(exc).__name__}
            log.warning("learned secrets not read", extra=failed)
            raise LearnedUnavailable from None
        by_token: dict[str, Key] = {}
        for row in found:
            try:
                text = self._cipher.open(row.secret, row.encrypted).decode("utf-8")
                by_token[row.opened_by] = provider.parse(text)
            except (ConfigError, PayloadError, UnicodeDecodeError, ValueError):
                # Sealed with a key no longer configured: said once per read, skipped.
                log.warning("a learned secret cannot be opened", extra={"source": source.name})
        known = _Known(by_token, now)
        self._known[source.name] = known
        return known
