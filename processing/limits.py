"""Rate and concurrency limits per destination.

With Redis (``hookd worker``, several processes) the limits are kept there, so that
they hold across every worker: a sliding-window log per destination (a sorted set of
grant times, by Redis's own clock) for the rate, and a set of expiring slots for the
concurrency. Without Redis, one process does all the processing (``hookd serve``), and
the same two limits are kept in its memory.

What a destination measures is when each delivery arrives, which is some time after
the grant (a busy event loop, a new connection) and before the answer. So a grant is
logged as in flight (counted whatever the window) until its request ends, and then at
the time it ended: any second of arrivals then holds at most ``per_s`` deliveries,
however late some of them were sent. (A process that dies mid-request leaves its grant
counted until the request's time limit has passed.)

A caller that gets no grant within ``max_wait_s`` is told how long to wait, and puts
the delivery off (it does not fail: no attempt is used).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

log = logging.getLogger("hookd.processing")

# A hair over a second: the log's times are whole milliseconds.
RATE_WINDOW_S = 1.01
# How long an unreleased concurrency slot lasts (its process died mid-delivery).
SLOT_SLACK_S = 5.0
# Between looks at a full concurrency set in Redis.
SLOT_POLL_S = 0.02
KEY_PREFIX = "hookd:dest:"

# KEYS[1]: the log; ARGV: limit, window (ms), member, in flight at most (ms). 0: granted
# (logged as in flight: at now + in flight); else ms to wait, at most a window.
RATE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
local flight = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + flight, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], flight + window)
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.min(window, math.max(1, tonumber(oldest[2]) + window - now + 1))
"""
# KEYS[1]: the log; ARGV: member. The grant's request ended: logged at now.
RATE_DONE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])
return 0
"""
# KEYS[1]: the slots; ARGV: limit, lifetime (ms), member. 1: taken; 0: full.
SLOT_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return 1
end
return 0
"""


class Unavailable(Exception):
    """The shared limits cannot be reached (Redis is away): put the delivery off."""


@dataclass(frozen=True, slots=True)
class Wait:
    """No grant: how long to put the delivery off."""

    seconds: float


# A grant or a slot: entering gives None once held (the delivery may start), or how long
# to put the delivery off; leaving says its request ended.
Slot = AbstractAsyncContextManager[Wait | None]


class Limits(Protocol):
    def rate(self, key: str, per_s: float, flight_s: float, max_wait_s: float) -> Slot:
        """A grant of the rate limit for the ``async with`` block (the request, which
        ends within ``flight_s``)."""
        ...

    def slot(self, key: str, limit: int, hold_s: float, max_wait_s: float) -> Slot:
        """A concurrency slot, held for the ``async with`` block."""
        ...


def _window_limit(per_s: float) -> tuple[int, float]:
    """(grants per window, the window in seconds): ``per_s`` over ``RATE_WINDOW_S``,
    at least one."""
    if per_s >= 1:
        return int(per_s), RATE_WINDOW_S
    return 1, RATE_WINDOW_S / per_s


class LocalLimits:
    """The limits of the one process that processes (no Redis)."""

    def __init__(self) -> None:
        # Per key: grant -> when its request ended (inf while in flight).
        self._grants: dict[str, dict[int, float]] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._next = 0

    def rate(self, key: str, per_s: float, flight_s: float, max_wait_s: float) -> Slot:
        return self._rate(key, per_s, max_wait_s)

    @asynccontextmanager
    async def _rate(self, key: str, per_s: float, max_wait_s: float) -> AsyncIterator[Wait | None]:
        limit, window = _window_limit(per_s)
        grants = self._grants.setdefault(key, {})
        deadline = time.monotonic() + max_wait_s
        while True:
            now = time.monotonic()
            for gone in [g for g, at in grants.items() if at <= now - window]:
                del grants[gone]
            if len(grants) < limit:
                break
            wait = min(window, min(grants.values()) + window - now + 0.001)
            if now + wait > deadline:
                yield Wait(wait)
                return
            await asyncio.sleep(wait)
        self._next += 1
        grant = self._next
        grants[grant] = math.inf
        try:
            yield None
        finally:
            grants[grant] = time.monotonic()

    @asynccontextmanager
    async def _slot(self, key: str, limit: int, max_wait_s: float) -> AsyncIterator[Wait | None]:
        semaphore = self._slots.get(key)
        if semaphore is None:
            semaphore = self._slots[key] = asyncio.Semaphore(limit)
        try:
            await asyncio.wait_for(semaphore.acquire(), max_wait_s)
        except TimeoutError:
            yield Wait(max_wait_s)
            return
        try:
            yield None
        finally:
            semaphore.release()

    def slot(self, key: str, limit: int, hold_s: float, max_wait_s: float) -> Slot:
        return self._slot(key, limit, max_wait_s)


class RedisLimits:
    """Limits every worker shares, in Redis."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._rate_script = redis.register_script(RATE_LUA)
        self._rate_done = redis.register_script(RATE_DONE_LUA)
        self._take = redis.register_script(SLOT_LUA)
        self._warned = False

    def _unreachable(self, exc: Exception) -> Unavailable:
        if not self._warned:
            self._warned = True
            log.warning(
                "destination limits unreachable in Redis: limited deliveries wait",
                extra={"error": type(exc).__name__},
            )
        return Unavailable(type(exc).__name__)

    def rate(self, key: str, per_s: float, flight_s: float, max_wait_s: float) -> Slot:
        return self._rate(key, per_s, flight_s, max_wait_s)

    @asynccontextmanager
    async def _rate(
        self, key: str, per_s: float, flight_s: float, max_wait_s: float
    ) -> AsyncIterator[Wait | None]:
        limit, window = _window_limit(per_s)
        log_key = KEY_PREFIX + key + ":rate"
        deadline = time.monotonic() + max_wait_s
        member = uuid.uuid4().hex
        args: list[str | int] = [
            limit,
            int(window * 1000),
            member,
            int((flight_s + SLOT_SLACK_S) * 1000),
        ]
        while True:
            try:
                wait_ms = int(await self._rate_script(keys=[log_key], args=args))
            except Exception as exc:  # Redis is away: wait rather than exceed the limit
                raise self._unreachable(exc) from None
            self._warned = False
            if wait_ms == 0:
                break
            wait = wait_ms / 1000
            if time.monotonic() + wait > deadline:
                yield Wait(wait)
                return
            await asyncio.sleep(wait)
        try:
            yield None
        finally:
            try:
                await self._rate_done(keys=[log_key], args=[member])
            except Exception as exc:  # it stays counted until its flight time is over
                log.debug("rate grant not closed", extra={"error": type(exc).__name__})

    @asynccontextmanager
    async def _slot(
        self, key: str, limit: int, hold_s: float, max_wait_s: float
    ) -> AsyncIterator[Wait | None]:
        slots = KEY_PREFIX + key + ":slots"
        member = uuid.uuid4().hex
        deadline = time.monotonic() + max_wait_s
        life_ms = int((hold_s + SLOT_SLACK_S) * 1000)
        while True:
            try:
                taken = int(await self._take(keys=[slots], args=[limit, life_ms, member]))
            except Exception as exc:
                raise self._unreachable(exc) from None
            if taken:
                break
            if time.monotonic() + SLOT_POLL_S > deadline:
                yield Wait(SLOT_POLL_S * 5)
                return
            await asyncio.sleep(SLOT_POLL_S)
        try:
            yield None
        finally:
            try:
                await self._redis.zrem(slots, member)
            except Exception as exc:  # it expires on its own
                log.debug("slot release failed", extra={"error": type(exc).__name__})

    def slot(self, key: str, limit: int, hold_s: float, max_wait_s: float) -> Slot:
        return self._slot(key, limit, hold_s, max_wait_s)
