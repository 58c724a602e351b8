"""What wakes processing up after a commit.

Without Redis, ``hookd serve`` runs processor processes (``hookd.runtime.local``)
beside its receivers, each running an ``InProcessConsumer``, and a ``LocalWaker`` in
every receiver sends them a datagram after commits; with ``HOOKD_PROCESSORS=0``, the
``InProcessConsumer`` runs inside the receiver itself. With Redis,
``ArqWaker`` enqueues a wake-up job that a ``hookd worker`` answers by starting a
drain (``Drains``) that claims due events from the database. Either way the
database decides who runs what; a lost wake-up only delays an event until the
next sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit

from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool, Redis

from hookd import tracing
from hookd.backoff import capped
from processing.pool import ProcessorPool
from processing.processor import Processor

log = logging.getLogger("hookd.dispatch")

WAKE_JOB = "hookd_wake"
# At most this many wake-up jobs per second reach Redis, however busy the receiver.
WAKES_PER_S = 10


class InProcessConsumer:
    """Drains whenever woken, and every ``sweep_s`` for a wake-up that was lost. A
    wake-up during a drain reaches the drain itself (``Processor.wake``): it claims
    for its free slots while slow events run."""

    def __init__(self, processor: Processor | ProcessorPool, sweep_s: float = 1.0) -> None:
        self._processor = processor
        self._sweep_s = sweep_s
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    async def on_commit(self, _ids: Sequence[str]) -> None:
        self.wake()

    def wake(self) -> None:
        """Look now: in the drain that runs, or in a new one."""
        self._wake.set()
        self._processor.wake()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="hookd-consumer")

    async def stop(self, grace_s: float = 10.0) -> None:
        """Claim no more and let what runs finish within ``grace_s``; then cancel it
        (cancelled, each event hands its claim back with what it finished)."""
        if self._task is None:
            return
        self._stopping = True
        self._processor.stop_claiming()
        self._wake.set()
        finishing = asyncio.ensure_future(self._finish(self._task))
        try:
            await asyncio.wait_for(asyncio.shield(finishing), grace_s)
        except TimeoutError:
            finishing.cancel()  # and with it the drain it waits for
            with contextlib.suppress(asyncio.CancelledError):
                await finishing
        self._task = None

    async def _finish(self, task: asyncio.Task[None]) -> None:
        """This consumer's loop ended, then any drain that handed events started
        (``Processor.accept``): the events it runs have the same grace."""
        await task
        await self._processor.drain(0)

    async def _loop(self) -> None:
        failures = 0
        while not self._stopping:
            woken = False
            with contextlib.suppress(TimeoutError):
                woken = await asyncio.wait_for(self._wake.wait(), self._sweep_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                # A wake-up's drain (not a sweep's) is a ``hookd.wake`` span when tracing
                # is on: the parent of the claims it makes.
                if woken and tracing.enabled():
                    with tracing.span("hookd.wake", {"hookd.wake.via": "local"}):
                        await self._processor.drain(math.inf)
                else:
                    await self._processor.drain(math.inf)
                failures = 0
            except Exception as exc:  # the database is away: back off, then look again
                failures += 1
                log.warning("consumer pass failed", extra={"error": type(exc).__name__})
                await asyncio.sleep(capped(0.5, failures, 30.0))


# The datagram a LocalWaker sends: its content does not matter, only that it came.
WAKE_DATAGRAM = b"w"
# While commits keep coming, a LocalWaker sends at most one datagram per processor
# per this many seconds (and always one after the last commit of a burst).
LOCAL_WAKE_INTERVAL_S = 0.005


class LocalWaker:
    """Wakes the processor processes of ``hookd serve`` (no Redis): one small datagram
    to each one's Unix socket, coalesced, never blocking or failing an acknowledgement.

    A processor that is restarting (no socket: ENOENT, ECONNREFUSED) or busy (its
    queue full: EAGAIN) misses the wake-up; its sweep every HOOKD_SWEEP_S, or the
    drain it is in, finds the event.
    """

    def __init__(self, paths: Sequence[str], interval_s: float = LOCAL_WAKE_INTERVAL_S) -> None:
        self._paths = list(paths)
        self._interval_s = interval_s
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._handle: asyncio.Handle | None = None
        self._last = float("-inf")
        self.sent = 0  # datagrams handed to the kernel, for tests and debugging

    async def on_commit(self, _ids: Sequence[str]) -> None:
        self.wake()

    def wake(self) -> None:
        if self._handle is not None:  # a send is already due: it covers this commit too
            return
        loop = asyncio.get_running_loop()
        delay = self._last + self._interval_s - loop.time()
        if delay > 0:
            self._handle = loop.call_later(delay, self._send)
        else:  # at the end of this loop turn: every commit of the turn shares it
            self._handle = loop.call_soon(self._send)

    def _send(self) -> None:
        self._handle = None
        self._last = asyncio.get_running_loop().time()
        for path in self._paths:
            try:
                self._sock.sendto(WAKE_DATAGRAM, path)
                self.sent += 1
            except OSError as exc:  # restarting or busy: the sweep is the fallback
                log.debug(
                    "processor wake-up not sent",
                    extra={"socket": path, "error": type(exc).__name__},
                )

    async def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._send()  # the last commits' wake-up: sent, not dropped
        self._sock.close()


class Drains:
    """The drain of the processor that wake-ups start and this process owns.

    An arq job that asks for processing starts it here (``kick``) and returns: the
    drain runs however long its handlers take, outside arq's job timeout, and arq's
    jobs stay short. A wake-up while it runs reaches it (``Processor.wake``): it claims
    for the slots that free up. ``stop`` cancels it: each event in flight hands its
    claim back with what it finished.
    """

    def __init__(self, processor: Processor | ProcessorPool) -> None:
        self._processor = processor
        self._task: asyncio.Task[int] | None = None
        self._again = False

    def kick(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True
            self._processor.wake()
            return
        self._task = asyncio.create_task(self._run(), name="hookd-drain")

    @property
    def running(self) -> int:
        return int(self._task is not None and not self._task.done())

    async def _run(self) -> int:
        total = 0
        while True:
            self._again = False
            try:
                total += await self._processor.drain(math.inf)
            except Exception as exc:  # the database is away: the next wake-up or sweep retries
                log.warning("drain failed", extra={"error": type(exc).__name__})
                return total
            if not self._again or self._processor.stopping:
                return total

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class ArqWaker:
    """Enqueues coalesced wake-up jobs; never blocks or fails an acknowledgement."""

    def __init__(self, redis_url: str, timeout_s: float = 0.5) -> None:
        pool = ConnectionPool.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._redis = ArqRedis(pool)
        self._timeout_s = timeout_s
        self._pending: asyncio.Task[None] | None = None
        self._dirty = False
        self._last_bucket = -1

    async def on_commit(self, _ids: Sequence[str]) -> None:
        self._dirty = True
        if self._pending is None or self._pending.done():
            self._pending = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        # Leading edge at once, then at most one more per bucket while commits
        # keep coming, so the last commit of a burst always gets a wake-up.
        while self._dirty:
            self._dirty = False
            bucket = int(time.time() * WAKES_PER_S)
            if bucket <= self._last_bucket:
                await asyncio.sleep(max(0.0, (self._last_bucket + 1) / WAKES_PER_S - time.time()))
                bucket = max(int(time.time() * WAKES_PER_S), self._last_bucket + 1)
            self._last_bucket = bucket
            await self._enqueue(bucket)

    async def _enqueue(self, bucket: int) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._redis.enqueue_job(WAKE_JOB, _job_id=f"{WAKE_JOB}:{bucket}")
        except Exception as exc:  # Redis down: the worker's sweep finds the event
            log.warning("wake-up not enqueued", extra={"error": type(exc).__name__})

    async def ping(self) -> bool:
        async with asyncio.timeout(self._timeout_s):
            return bool(await self._redis.ping())

    async def close(self) -> None:
        if self._pending is not None:
            with contextlib.suppress(Exception):
                await self._pending
        await self._redis.aclose()


# Query keys redis-py reads a credential from; their values never reach a log line.
_SECRET_QUERY_KEYS = frozenset({"password"})


def redact_redis_url(url: str) -> str:
    """``url`` fit for a log line: a password, in the URL's user part or its query
    (``?password=``, which redis-py also reads), shown as ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs], safe="*"
        )
    # By hand, not urlunsplit: that drops the empty host of unix:///PATH.
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


async def warn_if_redis_unreachable(url: str, meanwhile: str, *, sweep_s: float) -> None:
    """One warning at start when Redis does not answer: a reason to look now, not to
    refuse to start (``serve`` and ``worker`` both carry on without it)."""
    error = await redis_unreachable(url)
    if error is not None:
        log.warning(
            f"Redis is unreachable: {meanwhile}",
            extra={"redis": redact_redis_url(url), "error": error, "sweep_s": sweep_s},
        )


async def redis_unreachable(url: str, timeout_s: float = 2.0) -> str | None:
    """None if Redis at ``url`` answers a PING within ``timeout_s``; else why not
    (an exception's class name: never its text, which may quote the URL)."""
    client = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            await client.ping()
    except Exception as exc:  # refused, timed out, wrong password: all mean "not there"
        return type(exc).__name__
    finally:
        await client.aclose()
    return None
