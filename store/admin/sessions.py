"""Admin UI sessions, kept in the database so that every process (``serve --workers
N``, several receivers) agrees on them.

A session is known by the SHA-256 of the random id its signed cookie carries: a
read of this table opens no session. Logging out deletes the row. Every statement
is a primary-key or index lookup. Refused logins (and wrong bearer tokens) are
counted by ``store.admin.auth_attempts``.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.models import ADMIN_SESSIONS

# Expired sessions deleted at each login, at most: a bounded statement.
EXPIRED_PER_LOGIN = 100


def _id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


async def open_session(
    engine: AsyncEngine, *, can_act: bool, now: datetime, max_age_s: float
) -> str:
    """A new session's id (for the cookie); expired ones are deleted on the way."""
    session_id = secrets.token_urlsafe(32)
    expired = (
        sa.select(ADMIN_SESSIONS.c.id_hash)
        .where(ADMIN_SESSIONS.c.expires_at < now)
        .limit(EXPIRED_PER_LOGIN)
        .scalar_subquery()
    )
    async with engine.begin() as conn:
        await conn.execute(ADMIN_SESSIONS.delete().where(ADMIN_SESSIONS.c.id_hash.in_(expired)))
        await conn.execute(
            ADMIN_SESSIONS.insert().values(
                id_hash=_id_hash(session_id),
                can_act=can_act,
                created_at=now,
                expires_at=now + timedelta(seconds=max_age_s),
            )
        )
    return session_id


async def session_open(
    engine: AsyncEngine, session_id: str, *, can_act: bool, now: datetime
) -> bool:
    """Whether ``session_id`` is a session not logged out, not expired, with these rights."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(ADMIN_SESSIONS.c.can_act, ADMIN_SESSIONS.c.expires_at).where(
                    ADMIN_SESSIONS.c.id_hash == _id_hash(session_id)
                )
            )
        ).first()
    return row is not None and bool(row.can_act) == can_act and row.expires_at > now


async def close_session(engine: AsyncEngine, session_id: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            ADMIN_SESSIONS.delete().where(ADMIN_SESSIONS.c.id_hash == _id_hash(session_id))
        )
