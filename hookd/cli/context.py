"""What a command of the ``hookd`` command line opens, and closes however it ends; and
the check before it (``preflight``: the database answers, at this version's schema).

The heavy modules are imported inside, as in the commands: ``hookd --help`` and
``hookd serve`` do not pay for them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from hookd.logs import say
from hookd.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from hookd.ops import Wake


@contextlib.asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[AsyncEngine]:
    """The command's one engine, disposed when it is done (its pool's connections
    closed, not left to the interpreter's exit)."""
    from store import db

    engine = db.create_engine(settings.database_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def waking(settings: Settings) -> AsyncIterator[Wake]:
    """What wakes processing after a replay: an arq job for a ``hookd worker``. Without
    Redis nothing: ``hookd serve`` processes in-process and its sweep finds the events."""
    if not settings.redis_url:
        yield nothing_to_wake
        return
    from processing.wakeups import ArqWaker

    waker = ArqWaker(settings.redis_url)
    try:
        yield lambda: waker.on_commit(())
    finally:
        await waker.close()  # waits for the wake-up job to be enqueued


async def nothing_to_wake() -> None:
    """The wake of a command that changes no event, or of one without Redis."""


async def preflight(settings: Settings) -> None:
    """The database answers and is at this version's schema, or one clear line."""
    from hookd.runtime.app import check_schema
    from store import db

    # Only `hookd db upgrade` may create a SQLite file; every command after this
    # check reuses the file it found.
    db.require_existing(settings.database_url)
    async with database(settings) as engine:
        with db.opening(settings.database_url):
            await check_schema(engine, settings.database_url)


AUTOVACUUM_OFF = (
    "PostgreSQL has autovacuum off: the events table will bloat and its query plans go "
    "stale, and processing slows as it grows (see docs/scaling.md); turn it on, or run "
    "VACUUM ANALYZE events, handler_runs regularly"
)


async def database_warnings(settings: Settings) -> list[str]:
    """What is worth a warning about a database that works: PostgreSQL's autovacuum
    off. Said once, by the commands that run hookd on it (``serve``, ``worker``) and
    by ``db upgrade``, after their own checks passed; not by every command."""
    from store import db

    async with database(settings) as engine:
        with db.opening(settings.database_url):
            return [] if await db.autovacuum_on(engine) else [AUTOVACUUM_OFF]


def warn(lines: list[str]) -> None:
    """Each line as hookd's warnings are said: plain, or a JSON record (``say``)."""
    for line in lines:
        say(line, level=logging.WARNING)
