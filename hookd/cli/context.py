"""What a command of the ``hookd`` command line opens, and closes however it ends.

The heavy modules are imported inside, as in the commands: ``hookd --help`` and
``hookd serve`` do not pay for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

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
