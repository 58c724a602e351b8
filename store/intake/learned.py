"""The rows of ``learned_secrets``: a secret written once per (source, token), and the
secrets of a source read back (``ingest.learned`` seals, opens and caches them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from store.models_learned import LEARNED_SECRETS

T = LEARNED_SECRETS


@dataclass(frozen=True, slots=True)
class LearnedRow:
    """One learned secret as it is stored (``secret`` sealed when ``encrypted``)."""

    opened_by: str
    secret: bytes
    encrypted: bool


async def learn(
    engine: AsyncEngine,
    source: str,
    *,
    opened_by: str,
    secret: bytes,
    encrypted: bool,
    at: datetime,
) -> bool:
    """Keep ``secret`` for (``source``, ``opened_by``) unless one is kept already: True
    when it was written, False when that token had opened a handshake before (the
    primary key refuses it, whichever process wrote first)."""
    values = {
        "source": source,
        "opened_by": opened_by,
        "secret": secret,
        "secret_encrypted": encrypted,
        "learned_at": at,
    }
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.insert(T).values(**values))
    except IntegrityError:
        return False
    return True


async def learned(engine: AsyncEngine, source: str) -> list[LearnedRow]:
    """Every secret learned for ``source``."""
    query = sa.select(T.c.opened_by, T.c.secret, T.c.secret_encrypted).where(T.c.source == source)
    async with engine.connect() as conn:
        rows = await conn.execute(query)
        return [LearnedRow(r.opened_by, bytes(r.secret), bool(r.secret_encrypted)) for r in rows]
