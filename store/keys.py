"""Key rotation for stored bodies (``hookd keys rotate``)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.crypto import BodyCipher
from store.models import EVENTS

BATCH = 500


@dataclass
class Rotated:
    reencrypted: int = 0
    encrypted: int = 0


async def rotate_bodies(engine: AsyncEngine, cipher: BodyCipher, batch: int = BATCH) -> Rotated:
    """Re-encrypt every stored body with the first key of ``cipher``, in id order,
    one transaction per ``batch`` rows; plain bodies get encrypted too.

    Each row is updated only if its body is still the one that was read, so an
    event whose body changed meanwhile is left to the next run. Safe to stop
    and run again: a body already under the first key is simply re-encrypted.
    Old keys can be removed from ``HOOKD_ENCRYPTION_KEYS`` once it has finished.
    """
    done = Rotated()
    after = ""
    while True:
        async with engine.begin() as conn:
            rows = (
                await conn.execute(
                    sa.select(EVENTS.c.id, EVENTS.c.body, EVENTS.c.body_encrypted)
                    .where(EVENTS.c.id > after, EVENTS.c.body.is_not(None))
                    .order_by(EVENTS.c.id)
                    .limit(batch)
                )
            ).all()
            if not rows:
                return done
            for row in rows:
                sealed = cipher.reseal(row.body, row.body_encrypted)
                await conn.execute(
                    sa.update(EVENTS)
                    .where(EVENTS.c.id == row.id, EVENTS.c.body == row.body)
                    .values(body=sealed, body_encrypted=True)
                )
                if row.body_encrypted:
                    done.reencrypted += 1
                else:
                    done.encrypted += 1
            after = rows[-1].id
