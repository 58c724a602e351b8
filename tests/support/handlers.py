"""Handlers named in test configs as ``tests.support.handlers:NAME``.

They write to tables in the same database hookd uses (``HOOKD_DATABASE_URL``):
- ``effects``: one row per (event, handler) effect, keyed by the idempotency key;
  ``effect_strict`` inserts without ON CONFLICT, so a second run of a finished
  handler raises (and shows as a failure), ``effect_idempotent`` is what a real
  handler does: it skips a key it has already applied, in the same transaction.
- ``calls``: every invocation, to count runs (``effect_pid`` records there, as its
  handler name, the pid of the process that ran it).
- ``switches``: ``broken`` on means ``until_fixed`` raises.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from hookd import Event
from tests.support.constants import SECRETS
from tests.support.data import engine_of

# A handler's own logger, as a user's module has it: not under "hookd".
log = logging.getLogger(__name__)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS effects (idempotency_key VARCHAR(64) PRIMARY KEY, "
    "event_id VARCHAR(26) NOT NULL, handler VARCHAR(64) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY {auto}, "
    "event_id VARCHAR(26) NOT NULL, handler VARCHAR(64) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS switches (name VARCHAR(32) PRIMARY KEY, value INTEGER NOT NULL)",
)

_engines: dict[int, AsyncEngine] = {}


def _engine() -> AsyncEngine:
    loop_id = id(asyncio.get_running_loop())
    if loop_id not in _engines:
        url = os.environ["HOOKD_DATABASE_URL"]
        kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
        _engines[loop_id] = create_async_engine(url, **kwargs)
    return _engines[loop_id]


def github_source(path: Path, handler: str, extra: str = "") -> Path:
    """``path``, written as a sources file of one GitHub source that runs ``handler``
    (``module:name``), with ``extra`` added to its table."""
    path.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
handlers = ["{handler}"]
{extra}"""
    )
    return path


def config(tmp_path: Path, handler: str, max_attempts: int = 8) -> Path:
    """A sources file with one GitHub source whose handler is ``NAME`` of this module."""
    return github_source(
        tmp_path / "pipeline.toml",
        f"tests.support.handlers:{handler}",
        f"max_attempts = {max_attempts}\n",
    )


async def prepare(url: str) -> None:
    """This module's tables in hookd's database at ``url``."""
    async with engine_of(url) as engine:
        await create_tables(engine)


async def prepared_env(tmp_path: Path, url: str, handler: str, **extra: str) -> dict[str, str]:
    """The environment of a ``hookd serve`` or ``hookd worker`` on the database at ``url``
    (this module's tables made there), its GitHub source running handler ``handler``;
    ``extra`` is more of it."""
    await prepare(url)
    return {"HOOKD_CONFIG": str(config(tmp_path, handler)), "HOOKD_DATABASE_URL": url, **extra}


async def create_tables(engine: AsyncEngine) -> None:
    auto = "" if engine.dialect.name == "sqlite" else "GENERATED ALWAYS AS IDENTITY"
    async with engine.begin() as conn:
        for statement in SCHEMA:
            await conn.execute(sa.text(statement.format(auto=auto)))


async def _call(event: Event, handler: str) -> None:
    async with _engine().begin() as conn:
        await conn.execute(
            sa.text("INSERT INTO calls (event_id, handler) VALUES (:e, :h)"),
            {"e": event.id, "h": handler},
        )


async def effect_strict(event: Event) -> None:
    await _call(event, "strict")
    async with _engine().begin() as conn:
        await conn.execute(
            sa.text("INSERT INTO effects VALUES (:k, :e, 'strict')"),
            {"k": event.idempotency_key, "e": event.id},
        )


async def _effect_once(event: Event, handler: str) -> None:
    """After ``TEST_HANDLER_SLEEP_S``, the event's effect, skipped if its key is already
    applied (in the same transaction), recorded as ``handler``'s."""
    await asyncio.sleep(float(os.environ.get("TEST_HANDLER_SLEEP_S", "0")))
    async with _engine().begin() as conn:
        seen = await conn.execute(
            sa.text("SELECT 1 FROM effects WHERE idempotency_key = :k"),
            {"k": event.idempotency_key},
        )
        if seen.first() is None:
            await conn.execute(
                sa.text("INSERT INTO effects VALUES (:k, :e, :h)"),
                {"k": event.idempotency_key, "e": event.id, "h": handler},
            )


async def effect_idempotent(event: Event) -> None:
    await _call(event, "idempotent")
    await _effect_once(event, "idempotent")


async def effect_pid(event: Event) -> None:
    """``effect_idempotent`` that names, in ``calls``, the process it ran in: ``pid N``."""
    await _call(event, f"pid {os.getpid()}")
    await _effect_once(event, "pid")


async def until_fixed(event: Event) -> None:
    await _call(event, "until_fixed")
    async with _engine().connect() as conn:
        broken = await conn.execute(sa.text("SELECT value FROM switches WHERE name = 'broken'"))
        if broken.scalar():
            raise RuntimeError("the downstream is broken")


async def echo_failure(event: Event) -> None:
    """Fails with the payload in its message: logs must not print it."""
    raise RuntimeError(event.body.decode(errors="replace"))


async def hostile_error(event: Event) -> None:
    """Fails for an event whose body says "poison", its error quoting what a payload
    can hold and no database column can (a NUL, a lone surrogate); others succeed."""
    if b"poison" in event.body:
        raise ValueError("bad value \x00 and \ud800 from the payload")


async def value_error(_: Event) -> None:
    """Always fails the same way: a retrying event's error is predictable."""
    raise ValueError("boom")


_failed_once: set[str] = set()


async def fails_once(event: Event) -> None:
    """Fails an event's first run in this process, then succeeds: two attempts."""
    if event.id not in _failed_once:
        _failed_once.add(event.id)
        raise RuntimeError("the first attempt fails")


async def slow_once(event: Event) -> None:
    """The run that takes the ``slow`` switch (set to 1 by the test) sleeps TEST_SLOW_S;
    every other run is quick. Each run is in ``calls`` as ``slow`` or ``quick``."""
    async with _engine().begin() as conn:
        taken = await conn.execute(
            sa.text("UPDATE switches SET value = 0 WHERE name = 'slow' AND value = 1")
        )
    slow = bool(taken.rowcount)
    await _call(event, "slow" if slow else "quick")
    if slow:
        await asyncio.sleep(float(os.environ.get("TEST_SLOW_S", "20")))


_runs = itertools.count(1)


async def effect_at_end(event: Event) -> None:
    """Works, then records its effect in ``calls`` (``at_end``) as its last act: a run
    killed before the end leaves nothing, a run that ended leaves one row. Every
    TEST_SLOW_EVERY-th run in a process works TEST_SLOW_S, the others
    TEST_HANDLER_SLEEP_S."""
    every = int(os.environ.get("TEST_SLOW_EVERY", "0"))
    slow = bool(every) and next(_runs) % every == 0
    await asyncio.sleep(
        float(os.environ.get("TEST_SLOW_S" if slow else "TEST_HANDLER_SLEEP_S", "0"))
    )
    await _call(event, "at_end")


async def logs_its_own(event: Event) -> None:
    """Logs under its own module's logger, without passing any ids: an INFO line, a
    DEBUG one (below INFO, never printed) and a WARNING from a task it starts. Then
    sleeps TEST_HANDLER_SLEEP_S, between "handler sleeping" and "handler done"."""
    log.debug("handler debug line")
    log.info("handler says hello", extra={"size": len(event.body)})
    await asyncio.create_task(_warn())
    if (sleep_s := float(os.environ.get("TEST_HANDLER_SLEEP_S", "0"))) > 0:
        log.info("handler sleeping", extra={"sleep_s": sleep_s})
        await asyncio.sleep(sleep_s)
        log.info("handler done")


async def _warn() -> None:
    log.warning("handler warns from a task")
