"""The silence watch: for each source with ``[sources.expect]``, each window that has
ended is judged once, and a silent one is recorded in the coverage ledger as a hole
(outcome ``silent``).

- The watch of a source begins with the window under way when it first looks (nothing
  before is judged); a change of ``window_s`` begins it again.
- A window is judged once it ended ``grace_s`` ago (what was received just before its
  end has been committed by then), in the transaction that records it
  (``store.reconcile.silence.judge``): every window once, over restarts and in any
  number of processes. One process at a time watches (``hookd.runtime.silence``'s lease).
- Consecutive silent windows make one interval; a window outside the expected
  ``hours`` is passed over (not judged, not a hole) and the silence's next interval is
  another one, while the silence itself goes on (``silent_since``).
- The silence ends with the first window that has what it needs, and as soon as the
  window under way has it (``hookd_source_silent_seconds`` is back to 0 then, not at
  the window's end).

For a source that is reconciled too, a silent interval is a hole until a
reconciliation run checks that time (``complete``: the provider had nothing to send;
``repaired``: it had, and the run stored it): a checked moment is checked whatever
else the ledger says of it (``reconcile.coverage``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.sources import Sources
from hookd.sources.expect import WEEK_S, ExpectConfig
from store.reconcile import silence as state_store
from store.reconcile.silence import Judged, WatchRow

# How long after its end a window is judged, at most: receipts committed late (a
# commit may wait for company, or for a busy database) are counted.
GRACE_MAX_S = 5.0
# Windows one source judges per pass: a long catch-up after an outage goes on at the next.
MAX_WINDOWS = 256


def grace_s(expect: ExpectConfig) -> float:
    return min(GRACE_MAX_S, expect.window_s / 2)


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@dataclass
class Watched:
    """What one pass did: windows judged per source, and the silent ones."""

    judged: dict[str, int] = field(default_factory=dict)
    silent: dict[str, int] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)  # sources whose silence ended
    lost: list[str] = field(default_factory=list)  # another process judged first


def watched(sources: Sources) -> list[tuple[str, ExpectConfig]]:
    return [(s.name, s.config.expect) for s in sources if s.config.expect is not None]


async def watch(engine: AsyncEngine, sources: Sources, now: datetime) -> Watched:
    """Judge every window of every watched source that is due."""
    done = Watched()
    for name, expect in watched(sources):
        await _watch(engine, name, expect, now, done)
    return done


async def needed(
    conn: AsyncConnection, source: str, expect: ExpectConfig, start: datetime, end: datetime
) -> int:
    """The webhooks the window ``[start, end)`` must have."""
    need = expect.min_events
    if expect.like_last_week is not None:
        week = timedelta(seconds=WEEK_S)
        last = await state_store.webhooks(conn, source, start - week, end - week, None)
        need = max(need, math.ceil(expect.like_last_week * last))
    return need


async def judge_window(
    conn: AsyncConnection, source: str, expect: ExpectConfig, start: datetime, end: datetime
) -> Judged:
    need = await needed(conn, source, expect, start, end)
    got = await state_store.webhooks(conn, source, start, end, need)
    return Judged(got < need, got, need)


async def _watch(
    engine: AsyncEngine, name: str, expect: ExpectConfig, now: datetime, done: Watched
) -> None:
    async with engine.begin() as conn:
        state = await state_store.get(conn, name)
        if state is None or state.window_s != expect.window_s:
            start = _at(expect.window_start(now.timestamp()))
            await state_store.begin(conn, name, expect.window_s, start, now)
            return
    due = now.timestamp() - grace_s(expect)
    reason = expect.describe()
    for _ in range(MAX_WINDOWS):
        start = state.judged_until
        end = start + timedelta(seconds=expect.window_s)
        if end.timestamp() > due:
            break
        async with engine.begin() as conn:
            verdict = None
            if expect.judged(start.timestamp()):
                verdict = await judge_window(conn, name, expect, start, end)
            moved = await state_store.judge(
                conn, state, end, verdict=verdict, reason=reason, now=now
            )
            if moved is None:
                await conn.rollback()
                done.lost.append(name)
                return
        state = moved
        if verdict is not None:
            done.judged[name] = done.judged.get(name, 0) + 1
            if verdict.silent:
                done.silent[name] = done.silent.get(name, 0) + 1
    else:
        return  # more to catch up: the next pass goes on
    if state.silent_since is not None:
        await _heard_yet(engine, name, expect=expect, state=state, now=now, done=done)


async def _heard_yet(
    engine: AsyncEngine,
    name: str,
    *,
    expect: ExpectConfig,
    state: WatchRow,
    now: datetime,
    done: Watched,
) -> None:
    """End the silence if the window under way already has what it needs."""
    start = state.judged_until
    end = start + timedelta(seconds=expect.window_s)
    async with engine.begin() as conn:
        verdict = await judge_window(conn, name, expect, start, min(end, now))
        if verdict.silent:
            return
        if await state_store.heard(conn, state, now) is not None:
            done.ended.append(name)
