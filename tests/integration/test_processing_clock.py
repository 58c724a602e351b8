"""The processor keeps every event on its own clock (SQLite and PostgreSQL): slots refill
as events end, deadlines hold from outside the code they bound, leases of live work are
renewed, and a flooding source leaves room for the others."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hookd.event import Event, Handler
from hookd.sources import Sources, parse_sources
from processing.attempt import RetryPolicy
from processing.destinations import Router
from processing.limits import LocalLimits
from processing.processor import Processor
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENT_HISTORY, EVENTS
from tests.support.data import new_event
from tests.support.destinations import whsec
from tests.support.http import serve_app
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
HERE = __name__
FAST = RetryPolicy(base_s=30.0, cap_s=30.0)  # a failed attempt is not retried in a test


def sources_toml(destination: str = "") -> str:
    return f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["s"]
max_attempts = 3
{destination}

[[sources]]
name = "other"
provider = "github"
secrets = ["s"]
"""


def parse(text: str) -> Sources:
    from pathlib import Path

    return parse_sources(text, Path("hookd.toml"), env={})


async def store(engine: AsyncEngine, count: int, source: str, first: int = 0) -> list[str]:
    events = [
        new_event(f"{source}-{i}", source, b'{"n": %d}' % i) for i in range(first, first + count)
    ]
    async with engine.begin() as conn:
        return [s.event_id for s in await insert_events(conn, events, BodyCipher(""))]


async def statuses(engine: AsyncEngine, ids: list[str]) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.id, EVENTS.c.status).where(EVENTS.c.id.in_(ids))
        )
        return {r.id: r.status for r in rows}


async def row(engine: AsyncEngine, event_id: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(EVENTS).where(EVENTS.c.id == event_id))).one()


def processor(
    engine: AsyncEngine,
    sources: Sources,
    handlers: dict[str, list[tuple[str, Handler]]],
    client: httpx.AsyncClient | None = None,
    **kw: Any,
) -> Processor:
    router = (
        Router(sources, client, LocalLimits(), retry_base_s=30.0, retry_cap_s=30.0)
        if client is not None
        else None
    )
    return Processor(
        engine,
        sources,
        handlers,
        BodyCipher(""),
        retry=FAST,
        rng=random.Random(7),
        router=router,
        **kw,
    )


@contextlib.asynccontextmanager
async def draining(proc: Processor) -> AsyncIterator[None]:
    """``proc`` drains in the background (woken as a receiver would) until the block ends."""
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            await proc.drain(1_000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        proc.stop_claiming()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def all_processed(engine: AsyncEngine, ids: list[str], timeout_s: float) -> float:
    """Seconds until every one of ``ids`` is processed (fails after ``timeout_s``)."""
    started = time.monotonic()

    async def done() -> bool:
        return set((await statuses(engine, ids)).values()) == {"processed"}

    await wait_for(done, timeout_s=timeout_s, interval_s=0.02)
    return time.monotonic() - started


async def quick(_: Event) -> None:
    return None


# -- slots ---------------------------------------------------------------------------


async def test_a_slow_handler_holds_one_slot_and_the_rest_keep_flowing(
    engine: AsyncEngine,
) -> None:
    """One 5 s handler, then 60 quick events: they are done while it still runs (a batch
    that waited for its slowest member held them all for 5 s)."""
    sources = parse(sources_toml())
    release = asyncio.Event()

    async def handler(event: Event) -> None:
        if event.dedupe_key == "github-0":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 5)

    proc = processor(engine, sources, {"github": [("h", handler)]}, concurrency=8)
    [slow] = await store(engine, 1, "github")
    async with draining(proc):
        await wait_for(lambda: proc.pumping, timeout_s=5)
        rest = await store(engine, 60, "github", first=1)
        proc.wake()
        took = await all_processed(engine, rest, timeout_s=4)
        assert (await row(engine, slow)).status == "processing"
        release.set()
        await all_processed(engine, [slow], timeout_s=5)
    assert took < 2.0, took


async def test_a_flooding_slow_source_leaves_slots_for_another(engine: AsyncEngine) -> None:
    """40 events of one source whose handler takes 1 s, 8 slots: another source's events,
    stored after them, are processed at once, in the slots one source may not fill."""
    sources = parse(sources_toml())

    async def slow(_: Event) -> None:
        await asyncio.sleep(1.0)

    proc = processor(
        engine, sources, {"github": [("slow", slow)], "other": [("quick", quick)]}, concurrency=8
    )
    flood = await store(engine, 40, "github")
    async with draining(proc):
        await asyncio.sleep(0.3)
        others = await store(engine, 5, "other")
        proc.wake()
        took = await all_processed(engine, others, timeout_s=5)
        waiting = list((await statuses(engine, flood)).values()).count("pending")
    print(f"another source's 5 events, beside a flood: processed in {took:.2f} s")
    assert took < 1.0, took  # in the flood's turn: 40 events / 8 slots x 1 s = 5 s
    assert waiting >= 20, "the flood still had its backlog"


# -- deadlines -----------------------------------------------------------------------


async def test_a_handler_that_swallows_its_cancellation_still_ends_at_its_deadline(
    engine: AsyncEngine,
) -> None:
    sources = parse(sources_toml())
    done = asyncio.Event()

    async def stubborn(_: Event) -> None:
        while not done.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)

    proc = processor(
        engine,
        sources,
        {"github": [("stubborn", stubborn)], "other": [("quick", quick)]},
        handler_timeout_s=0.5,
    )
    [event_id] = await store(engine, 1, "github")
    try:
        started = time.monotonic()
        async with draining(proc):

            async def failed() -> bool:
                return (await row(engine, event_id)).status == "retrying"

            await wait_for(failed, timeout_s=5, interval_s=0.02)
            took = time.monotonic() - started
            others = await store(engine, 10, "other")
            proc.wake()
            await all_processed(engine, others, timeout_s=5)
    finally:
        done.set()
    failed_row = await row(engine, event_id)
    assert "did not finish within 0.5s" in failed_row.last_error
    assert failed_row.last_error_type == "TimeoutError"
    assert took < 1.5, took


def trickle_app() -> Starlette:
    """``/trickle`` answers 200 and then one byte every 0.3 s for 9 s; ``/in`` at once."""

    async def trickle(_: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for _ in range(30):
                yield b"x"
                await asyncio.sleep(0.3)

        return StreamingResponse(body())

    async def fine(_: Request) -> Response:
        return Response("ok")

    return Starlette(
        routes=[Route("/trickle", trickle, methods=["POST"]), Route("/in", fine, methods=["POST"])]
    )


def destination(url: str, extra: str = "") -> str:
    return f"""
[[sources.destinations]]
name = "target"
url = "{url}"
allow_insecure = true
secret = "{whsec("target")}"
timeout_s = 1
{extra}
"""


_hung = threading.Event()


def hang_blocking(event: Event) -> tuple[bytes, dict[str, str]]:
    """A transform that blocks (a synchronous call that never answers)."""
    _hung.wait(30)
    return event.body, {}


async def hang_async(event: Event) -> tuple[bytes, dict[str, str]]:
    """A transform that hangs and swallows its cancellation."""
    while not _hung.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)
    return event.body, {}


@pytest.fixture
def hung() -> Iterator[None]:
    _hung.clear()
    yield
    _hung.set()


@pytest.mark.parametrize(
    ("path", "transform", "said"),
    [
        ("/trickle", None, "target: DeadlineExceeded: did not answer within 1s"),
        ("/in", "hang_blocking", "the transform did not finish within 1s"),
        ("/in", "hang_async", "the transform did not finish within 1s"),
    ],
    ids=["trickling-answer", "blocking-transform", "hanging-transform"],
)
async def test_a_delivery_ends_at_its_timeout_whatever_the_peer_or_transform_does(
    engine: AsyncEngine, hung: None, path: str, transform: str | None, said: str
) -> None:
    """timeout_s = 1: the attempt fails within 3 s (a trickle resets httpx's per-read
    timeout for ever; a transform may block or ignore its cancellation), and another
    source's events are processed meanwhile."""
    del hung
    async with serve_app(trickle_app(), timeout_graceful_shutdown=1) as base:
        extra = f'transform = "{HERE}:{transform}"' if transform else ""
        sources = parse(sources_toml(destination(base + path, extra)))
        async with httpx.AsyncClient() as client:
            proc = processor(engine, sources, {"other": [("quick", quick)]}, client)
            [event_id] = await store(engine, 1, "github")
            started = time.monotonic()
            async with draining(proc):
                await asyncio.sleep(0.3)
                others = await store(engine, 20, "other")
                proc.wake()
                flowed = await all_processed(engine, others, timeout_s=5)

                async def failed() -> bool:
                    return (await row(engine, event_id)).status == "retrying"

                await wait_for(failed, timeout_s=10, interval_s=0.02)
                took = time.monotonic() - started
    failed_row = await row(engine, event_id)
    assert said in failed_row.last_error, failed_row.last_error
    assert took < 3.0, took
    assert flowed < 1.0, flowed


# -- leases --------------------------------------------------------------------------


async def test_a_long_healthy_handler_keeps_its_lease_and_is_not_taken_over(
    engine: AsyncEngine,
) -> None:
    """lease_s = 1, a handler that works 3.5 s, a second processor looking for expired
    leases all along: the lease is renewed while it runs, so it runs once."""
    sources = parse(sources_toml())
    calls = 0

    async def long(_: Event) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(3.5)

    def make() -> Processor:
        return processor(
            engine, sources, {"github": [("long", long)]}, lease_s=1.0, handler_timeout_s=10
        )

    first, second = make(), make()
    [event_id] = await store(engine, 1, "github")
    async with draining(first):
        await wait_for(lambda: calls == 1, timeout_s=5)
        async with draining(second):
            await all_processed(engine, [event_id], timeout_s=10)
    done = await row(engine, event_id)
    assert calls == 1
    assert (done.attempts, done.lease_owner) == (1, None)
    async with engine.connect() as conn:
        outcomes = (
            await conn.execute(
                sa.select(EVENT_HISTORY.c.outcome).where(EVENT_HISTORY.c.event_id == event_id)
            )
        ).scalars()
        assert list(outcomes) == ["processed"]
