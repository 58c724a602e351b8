"""Key rotation for stored bodies (``hookd keys rotate``), and for the signing secrets
learned in handshakes (``learned_secrets``), sealed with the same keys."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import ConfigError
from store.crypto import BodyCipher
from store.models import EVENTS
from store.models_learned import LEARNED_SECRETS

BATCH = 500
# How many ids of bodies no key opens a rotation keeps, to name them (it counts all).
SHOWN_IDS = 10


@dataclass
class Rotated:
    reencrypted: int = 0
    encrypted: int = 0
    # Encrypted bodies no key of the cipher opens: left as they were.
    unopened: int = 0
    unopened_ids: list[str] = field(default_factory=list)  # the first SHOWN_IDS
    # Learned signing secrets (Asana's) sealed again with the first key.
    learned: int = 0


class BodyUnopened(Exception):
    """``stop_on_error``: the rotation stopped at this event, whose body no key opens;
    ``done`` is what it had committed before it."""

    def __init__(self, event_id: str, done: Rotated) -> None:
        super().__init__(event_id)
        self.event_id = event_id
        self.done = done


async def rotate_bodies(
    engine: AsyncEngine, cipher: BodyCipher, batch: int = BATCH, *, stop_on_error: bool = False
) -> Rotated:
    """Re-encrypt every stored body with the first key of ``cipher``, in id order,
    one transaction per ``batch`` rows; plain bodies get encrypted too.

    A body no key opens (its key was lost, or is missing from the list) is left as it
    was, counted and named in ``Rotated``, and the rotation goes on; with
    ``stop_on_error`` it stops there instead (``BodyUnopened``, after committing the
    rows before it). When no key opens any of the encrypted bodies, the keys are
    wrong rather than one lost: ``ConfigError``, before anything is changed (plain
    bodies would otherwise be encrypted with a key nobody keeps).

    Each row is updated only if its body is still the one that was read, so an
    event whose body changed meanwhile is left to the next run. Safe to stop
    and run again: a body already under the first key is simply re-encrypted.
    Old keys can be removed from ``HOOKD_ENCRYPTION_KEYS`` once it has finished.
    """
    if not await _opens_any(engine, cipher, batch):
        raise ConfigError(
            "environment: HOOKD_ENCRYPTION_KEYS: no key opens any stored encrypted body: "
            "nothing changed; list the new key first, then the key(s) the bodies were "
            "stored with"
        )
    done = Rotated()
    after = ""
    while True:
        stopped: str | None = None
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
                done.learned = await _reseal_learned(engine, cipher)
                return done
            for row in rows:
                try:
                    sealed = cipher.reseal(row.body, row.body_encrypted)
                except ConfigError:
                    if stop_on_error:
                        stopped = row.id
                        break  # what came before it in this batch is committed
                    done.unopened += 1
                    if len(done.unopened_ids) < SHOWN_IDS:
                        done.unopened_ids.append(row.id)
                    continue
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
        if stopped is not None:
            raise BodyUnopened(stopped, done)


async def _reseal_learned(engine: AsyncEngine, cipher: BodyCipher) -> int:
    """Seal every learned secret with the first key (a handful of rows: one
    transaction); one no key opens is left as it was (its source logs it when read)."""
    t = LEARNED_SECRETS
    resealed = 0
    async with engine.begin() as conn:
        rows = (
            await conn.execute(
                sa.select(t.c.source, t.c.opened_by, t.c.secret, t.c.secret_encrypted)
            )
        ).all()
        for row in rows:
            try:
                sealed = cipher.reseal(bytes(row.secret), row.secret_encrypted)
            except ConfigError:
                continue
            await conn.execute(
                sa.update(t)
                .where(t.c.source == row.source, t.c.opened_by == row.opened_by)
                .values(secret=sealed, secret_encrypted=True)
            )
            resealed += 1
    return resealed


async def _opens_any(engine: AsyncEngine, cipher: BodyCipher, batch: int) -> bool:
    """Whether some key of ``cipher`` opens some stored encrypted body (True when none
    is encrypted). Reads in id order until one opens: at once, unless the keys are
    wrong."""
    after = ""
    while True:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(EVENTS.c.id, EVENTS.c.body)
                    .where(
                        EVENTS.c.id > after,
                        EVENTS.c.body.is_not(None),
                        EVENTS.c.body_encrypted.is_(True),
                    )
                    .order_by(EVENTS.c.id)
                    .limit(batch)
                )
            ).all()
        if not rows:
            return after == ""
        for row in rows:
            try:
                cipher.open(row.body, True)
            except ConfigError:
                continue
            return True
        after = rows[-1].id
