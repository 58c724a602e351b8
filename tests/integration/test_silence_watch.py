"""The silence watch's passes (``reconcile.silence.watch``) on SQLite and PostgreSQL,
given the moments to judge at (no waiting): webhooks stored at chosen moments, a
window with enough is heard, silent ones become one extended hole, two passes at once
judge each window once, a webhook in the window under way ends the silence at once,
and what a reconciliation run stored is not the sender being heard from."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.ops.coverage import CoverageOps
from hookd.ops.sources import SourceOps
from hookd.sources import Sources, parse_sources
from reconcile import silence
from store.crypto import BodyCipher
from store.ids import new_id
from store.intake.events import prepare
from store.models import EVENTS, RECONCILE_COVERAGE, SOURCE_WATCH
from tests.support.constants import SECRETS
from tests.support.data import new_event

pytestmark = pytest.mark.anyio
W = 60


def sources() -> Sources:
    text = (
        '[[sources]]\nname = "github"\nprovider = "github"\n'
        f'secrets = ["{SECRETS["github"]}"]\n'
        f"[sources.expect]\nmin_events = 2\nwindow_s = {W}\n"
    )
    return parse_sources(text, Path("hookd.toml"), {})


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def store(engine: AsyncEngine, moment: float, origin: str = "webhook") -> None:
    """One event of the source, received at ``moment`` (its id minted then)."""
    event = dataclasses.replace(
        new_event(f"k-{time.time_ns()}"), origin=origin, received_at=at(moment)
    )
    row = prepare([event], BodyCipher("")).rows[0]
    row["id"] = new_id(int(moment * 1000))
    async with engine.begin() as conn:
        await conn.execute(sa.insert(EVENTS), [row])


async def silent(engine: AsyncEngine) -> list[tuple[float, float]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(RECONCILE_COVERAGE.c.start_at, RECONCILE_COVERAGE.c.end_at)
            .where(RECONCILE_COVERAGE.c.outcome == "silent")
            .order_by(RECONCILE_COVERAGE.c.start_at)
        )
        return [(r.start_at.timestamp(), r.end_at.timestamp()) for r in rows]


async def watch_state(engine: AsyncEngine) -> tuple[float, float | None]:
    async with engine.connect() as conn:
        row = (await conn.execute(sa.select(SOURCE_WATCH))).one()
    since = row.silent_since
    return row.judged_until.timestamp(), None if since is None else since.timestamp()


async def test_windows_are_judged_once_and_silence_extends_then_ends(engine: AsyncEngine) -> None:
    watched = sources()
    a = math.floor(time.time() / W) * W  # the window under way: the watch begins there
    await store(engine, a + 5)
    await store(engine, a + 6)
    first = await silence.watch(engine, watched, at(a + 10))
    assert first.judged == {} and await watch_state(engine) == (a, None)

    # Four windows later, two passes at once: the first window heard (two webhooks),
    # the next three silent, one interval; each judged once, whoever judged it.
    later = at(a + 4 * W + 10)
    one, two = await asyncio.gather(
        silence.watch(engine, watched, later), silence.watch(engine, watched, later)
    )
    assert one.judged.get("github", 0) + two.judged.get("github", 0) == 4
    assert await silent(engine) == [(a + W, a + 4 * W)]
    assert await watch_state(engine) == (a + 4 * W, a + W)
    again = await silence.watch(engine, watched, later)
    assert again.judged == {} and await silent(engine) == [(a + W, a + 4 * W)]

    # One webhook in the window under way is not enough (min_events = 2); two are:
    # the silence ends before the window does.
    await store(engine, a + 4 * W + 20)
    await silence.watch(engine, watched, at(a + 4 * W + 30))
    assert await watch_state(engine) == (a + 4 * W, a + W)
    await store(engine, a + 4 * W + 40)
    ended = await silence.watch(engine, watched, at(a + 4 * W + 45))
    assert ended.ended == ["github"]
    assert await watch_state(engine) == (a + 4 * W, None)

    # What reconciliation stored does not count: that window is silent, a new hole.
    await store(engine, a + 5 * W + 1, origin="reconcile")
    await store(engine, a + 5 * W + 2, origin="reconcile")
    await silence.watch(engine, watched, at(a + 6 * W + 10))
    assert await silent(engine) == [(a + W, a + 4 * W), (a + 5 * W, a + 6 * W)]
    assert await watch_state(engine) == (a + 6 * W, a + 5 * W)

    # The source's coverage, as `hookd coverage` reads it: heard, silent, heard, silent.
    ops = CoverageOps(engine, SourceOps(engine, watched))
    report = await ops.report("github", now=at(a + 6 * W + 10))
    assert [(s.start - a, s.end - a, s.checked) for s in report.spans] == [
        (0, W, True),
        (W, 4 * W, False),
        (4 * W, 5 * W, True),
        (5 * W, 6 * W, False),
    ]
    assert {r.kind for h in report.holes for r in h.reasons} == {"silent"}
    heard = await ops.report("github", since=str(a), until=str(a + W), now=at(a + 6 * W + 10))
    assert heard.covered


async def test_a_new_window_length_begins_the_watch_again(engine: AsyncEngine) -> None:
    a = math.floor(time.time() / 3600) * 3600
    await silence.watch(engine, sources(), at(a + 10))
    text = (
        '[[sources]]\nname = "github"\nprovider = "github"\n'
        f'secrets = ["{SECRETS["github"]}"]\n[sources.expect]\nwindow_s = 3600\n'
    )
    hourly = parse_sources(text, Path("hookd.toml"), {})
    await silence.watch(engine, hourly, at(a + 5 * W + 10))
    assert await watch_state(engine) == (a, None)
    assert await silent(engine) == []


async def test_like_last_week_and_hours(engine: AsyncEngine) -> None:
    """A window with fewer than half of last week's same window is silent; outside the
    hours a window is passed over, no hole, and the silence goes on across it."""
    a = math.floor(time.time() / W) * W
    start = time.strftime("%H:%M", time.gmtime(a))
    end = time.strftime("%H:%M", time.gmtime(a + 3 * W))  # windows a, a+W, a+2W judged
    text = (
        '[[sources]]\nname = "github"\nprovider = "github"\n'
        f'secrets = ["{SECRETS["github"]}"]\n[sources.expect]\nmin_events = 1\n'
        f'window_s = {W}\nlike_last_week = 0.5\nhours = "{start}-{end}"\n'
    )
    watched = parse_sources(text, Path("hookd.toml"), {})
    week = 7 * 86_400
    for i in range(4):  # last week: 4 in the first window, 2 in the second
        await store(engine, a - week + 1 + i)
    for i in range(2):
        await store(engine, a + W - week + 1 + i)
    await store(engine, a + 1)  # 1 < 0.5 x 4: silent
    await store(engine, a + W + 1)  # 1 >= 0.5 x 2: heard
    await silence.watch(engine, watched, at(a + 1))
    await silence.watch(engine, watched, at(a + 4 * W + 10))
    # a + 2W: nothing, silent; a + 3W: outside the hours, passed over.
    assert await silent(engine) == [(a, a + W), (a + 2 * W, a + 3 * W)]
    assert await watch_state(engine) == (a + 4 * W, a + 2 * W)
