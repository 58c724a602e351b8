"""Destinations against hostile or misconfigured peers, on real HTTP servers on
loopback (SQLite; the processor in this process): an answer far larger than anything
hookd keeps is read only up to ``ANSWER_READ_BYTES`` and its connection closed; a 3xx
is a failed attempt, never followed; an event type or a transform's header that HTTP
cannot carry as it is. And ``hookd serve`` / ``hookd worker`` warn at start about a
URL that carries a secret to this machine or a private network.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookd.event import Event
from hookd.sources import Sources, parse_sources
from processing.attempt import RetryPolicy
from processing.delivery import ANSWER_READ_BYTES
from processing.destinations import Router
from processing.limits import LocalLimits
from processing.processor import Processor
from store.crypto import BodyCipher
from store.intake.events import NewEvent, insert_events
from store.models import DESTINATION_BREAKERS, EVENT_HISTORY, EVENTS, HANDLER_RUNS
from tests.support.destinations import Destination, app, whsec
from tests.support.http import serve_app
from tests.support.server import ROOT, free_port
from tests.support.services import ONLY_SQLITE

pytestmark = pytest.mark.anyio
HERE = __name__
# A failed attempt is not retried within a test: each drain tries each event once.
ONCE = RetryPolicy(base_s=30.0, cap_s=30.0)
MIB = 1024 * 1024


def sources_toml(url: str, extra: str = "") -> str:
    return f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_test_stripe"]
max_attempts = 5

[[sources.destinations]]
name = "target"
url = "{url}"
allow_insecure = true
secret = "{whsec("target")}"
timeout_s = 10
{extra}
"""


def parse(text: str) -> Sources:
    return parse_sources(text, Path("hookd.toml"), env={})


def event(key: str, kind: str | None = "invoice.paid") -> NewEvent:
    return NewEvent(
        source="stripe",
        provider="stripe",
        dedupe_key=key,
        type=kind,
        origin="webhook",
        received_at=datetime.now(UTC),
        occurred_at=None,
        verified_with="stripe-v1;key=0",
        headers={},
        body=json.dumps({"id": key, "type": kind}).encode(),
    )


async def store(engine: AsyncEngine, events: list[NewEvent]) -> list[str]:
    async with engine.begin() as conn:
        return [s.event_id for s in await insert_events(conn, events, BodyCipher(""))]


async def deliver_once(engine: AsyncEngine, sources: Sources) -> float:
    """One processor drains: every stored event is tried once. The seconds it took."""
    async with httpx.AsyncClient() as client:
        proc = Processor(
            engine,
            sources,
            {},
            BodyCipher(""),
            retry=ONCE,
            rng=random.Random(3),
            router=Router(sources, client, LocalLimits(), retry_base_s=30.0, retry_cap_s=30.0),
        )
        started = time.monotonic()
        await proc.drain(max_s=30.0)
        return time.monotonic() - started


async def row(engine: AsyncEngine, event_id: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(EVENTS).where(EVENTS.c.id == event_id))).one()


async def ledger(engine: AsyncEngine, event_id: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(HANDLER_RUNS.c.handler).where(HANDLER_RUNS.c.event_id == event_id)
        )
        return {r.handler for r in rows}


async def history(engine: AsyncEngine, event_id: str) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENT_HISTORY)
            .where(EVENT_HISTORY.c.event_id == event_id)
            .order_by(EVENT_HISTORY.c.id)
        )
        return list(rows)


# -- an answer far larger than what is kept of it ------------------------------------


class HugeAnswer:
    """A destination on loopback, raw asyncio: it reads the request, answers 200 with
    a ``Content-Length`` of ``total`` bytes and generates the body as it sends it, 64
    KiB at a time, until it is all sent or the client goes away. ``sent`` counts the
    bytes it got out (handed to the kernel: what the client may have read, or its
    socket buffers hold)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = 0
        self.requests = 0
        self.done = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            self.requests += 1
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                b"content-length: %d\r\n\r\n" % self.total
            )
            chunk = b"x" * 65_536
            while self.sent < self.total:
                part = chunk[: self.total - self.sent]
                writer.write(part)
                await writer.drain()
                self.sent += len(part)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client closed the connection: what it does past the cap
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.done.set()


@contextlib.asynccontextmanager
async def huge_answer(total: int) -> AsyncIterator[tuple[HugeAnswer, str]]:
    peer = HugeAnswer(total)
    server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield peer, f"http://127.0.0.1:{port}/in"
    finally:
        server.close()
        await server.wait_closed()


@ONLY_SQLITE
async def test_a_200_mb_answer_is_read_up_to_the_cap_and_its_connection_closed(
    engine: AsyncEngine,
) -> None:
    """A destination answers 200 with a 200 MiB body, generated lazily: the delivery
    is recorded as delivered within a second or two, and the peer got out only what
    socket buffers hold before hookd closed the connection (all 200 MiB before)."""
    total = 200 * MIB
    async with huge_answer(total) as (peer, url):
        sources = parse(sources_toml(url))
        [event_id] = await store(engine, [event("evt_huge")])
        took = await deliver_once(engine, sources)
        await asyncio.wait_for(peer.done.wait(), 10)
    assert peer.requests == 1
    done = await row(engine, event_id)
    assert (done.status, done.attempts, done.last_error) == ("processed", 1, None)
    assert await ledger(engine, event_id) == {"target"}
    [attempt] = await history(engine, event_id)
    assert (attempt.outcome, attempt.error) == ("processed", None)
    # What hookd read is at most ANSWER_READ_BYTES and one network read; what the peer
    # managed to send beyond that sat in the two sockets' buffers (a few MiB).
    assert peer.sent < 32 * MIB, f"the peer sent {peer.sent / MIB:.1f} MiB of {total / MIB:.0f}"
    assert took < 5.0, took
    assert ANSWER_READ_BYTES <= 64 * 1024


@ONLY_SQLITE
async def test_a_short_answer_is_read_whole_and_its_connection_kept(
    engine: AsyncEngine,
) -> None:
    """Answers under the cap end their exchange: the three deliveries share one
    connection (the pool keeps it), as before the cap."""
    peers: list[tuple[str, int]] = []

    async def endpoint(request: Request) -> Response:
        await request.body()
        client = request.client
        assert client is not None
        peers.append((client.host, client.port))
        return Response(b"ok" * 100)

    async with serve_app(Starlette(routes=[Route("/in", endpoint, methods=["POST"])])) as base:
        sources = parse(sources_toml(f"{base}/in", "concurrency = 1"))
        await store(engine, [event(f"evt_short_{i}") for i in range(3)])
        await deliver_once(engine, sources)
    assert len(peers) == 3
    assert len(set(peers)) == 1, peers


# -- redirects -----------------------------------------------------------------------


def redirecting(status: int, location: str, elsewhere: list[bytes]) -> Starlette:
    async def moved(request: Request) -> Response:
        await request.body()
        return Response(status_code=status, headers={"location": location})

    async def other(request: Request) -> Response:
        elsewhere.append(await request.body())
        return Response("got it")

    return Starlette(
        routes=[
            Route("/moved", moved, methods=["POST"]),
            Route("/elsewhere", other, methods=["POST"]),
        ]
    )


@ONLY_SQLITE
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_a_failed_attempt_and_is_not_followed(
    engine: AsyncEngine, status: int
) -> None:
    """The destination answers a 3xx to another path of its own: nothing reaches that
    path, and the event is dead at once (as after a 4xx: the same request would get the
    same answer), its error naming the redirect and what to do."""
    elsewhere: list[bytes] = []
    async with serve_app(redirecting(status, "/elsewhere", elsewhere)) as base:
        sources = parse(sources_toml(f"{base}/moved"))
        [event_id] = await store(engine, [event("evt_moved")])
        await deliver_once(engine, sources)
    assert elsewhere == []
    dead = await row(engine, event_id)
    assert (dead.status, dead.attempts) == ("dead", 1)
    assert dead.last_error == (
        f"target: destination_redirected: destination answered {status}: redirect to "
        f"{base}/elsewhere not followed: configure the final URL"
    )
    assert dead.last_error_type == "PermanentError"
    assert await ledger(engine, event_id) == set()
    [attempt] = await history(engine, event_id)
    assert attempt.outcome == "dead"
    # The destination answered: it is up, its breaker counts no failure.
    async with engine.connect() as conn:
        breakers = list(await conn.execute(sa.select(DESTINATION_BREAKERS)))
    assert all(b.failures == 0 for b in breakers), breakers


@ONLY_SQLITE
async def test_a_redirect_error_names_the_target_without_credentials_or_query(
    engine: AsyncEngine,
) -> None:
    location = "https://user:pa55word@elsewhere.example:8443/in?token=s3cret#part"
    async with serve_app(redirecting(302, location, [])) as base:
        sources = parse(sources_toml(f"{base}/moved"))
        [event_id] = await store(engine, [event("evt_moved")])
        await deliver_once(engine, sources)
    error = (await row(engine, event_id)).last_error
    assert "redirect to https://elsewhere.example:8443/in not followed" in error, error
    assert "pa55word" not in error and "s3cret" not in error and "user" not in error


# -- headers made from event data ----------------------------------------------------

TYPES = {
    "invoice.paid": "invoice.paid",
    "café.créé": "UTF-8''caf%C3%A9.cr%C3%A9%C3%A9",
    "订单.已支付": "UTF-8''%E8%AE%A2%E5%8D%95.%E5%B7%B2%E6%94%AF%E4%BB%98",
    "invoice\r\nX-Injected: yes": "UTF-8''invoice%0D%0AX-Injected%3A%20yes",
    " padded ": "UTF-8''%20padded%20",
}


@ONLY_SQLITE
async def test_any_event_type_is_delivered_in_a_header_that_encodes(
    engine: AsyncEngine,
) -> None:
    """Non-ASCII, control characters, spaces at an end: each event is delivered once,
    signed, its X-Hookd-Event-Type an RFC 8187 ext-value (``UTF-8''`` and percent-
    encoded UTF-8) that decodes to the type; an ASCII type is sent as it is; nothing
    in a type becomes a header of its own."""
    target = Destination(whsec("target"))
    async with serve_app(app({"target": target})) as base:
        sources = parse(sources_toml(f"{base}/target"))
        ids = await store(engine, [event(f"evt_{i}", kind) for i, kind in enumerate(TYPES)])
        await deliver_once(engine, sources)
    for event_id in ids:
        done = await row(engine, event_id)
        assert (done.status, done.last_error) == ("processed", None), done.last_error
    assert not target.unsigned
    got = {json.loads(d.body)["type"]: d.headers for d in target.accepted}
    assert set(got) == set(TYPES)
    for kind, sent in TYPES.items():
        value = got[kind]["x-hookd-event-type"]
        assert value == sent, kind
        decoded = unquote(value[len("UTF-8''") :]) if value.startswith("UTF-8''") else value
        assert decoded == kind
        assert "x-injected" not in got[kind]


def bad_header(event: Event) -> tuple[bytes, dict[str, str]]:
    """A transform whose header HTTP cannot carry as it is."""
    return event.body, {"X-Customer": "Zoë"}


@ONLY_SQLITE
async def test_a_transform_header_http_cannot_carry_is_the_transforms_permanent_error(
    engine: AsyncEngine,
) -> None:
    """Not retried until dead as an encoding error of the client: dead at once, the
    transform named, nothing sent."""
    target = Destination(whsec("target"))
    async with serve_app(app({"target": target})) as base:
        sources = parse(sources_toml(f"{base}/target", f'transform = "{HERE}:bad_header"'))
        [event_id] = await store(engine, [event("evt_bad_header")])
        await deliver_once(engine, sources)
    dead = await row(engine, event_id)
    assert (dead.status, dead.attempts) == ("dead", 1)
    assert dead.last_error == (
        "target: transform_invalid: a transform's header 'X-Customer' is not visible ASCII "
        "text (no control characters, no space at either end): encode its value"
    )
    assert target.accepted == target.refused == []


# -- the start-up warning ------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_serve_and_worker_warn_at_start_about_a_secret_sent_to_an_internal_address(
    tmp_path: Path, command: str
) -> None:
    """A destination on a private address and a reconcile API on a link-local one: a
    ``hookd: warning:`` line each, before the start-up checks (here: a database that
    does not exist, so the command stops right after)."""
    config = tmp_path / "hookd.toml"
    config.write_text(
        f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_test_stripe"]

[[sources.destinations]]
name = "billing"
url = "https://10.20.30.40/hooks"
secret = "{whsec("billing")}"

[sources.reconcile]
api_url = "http://169.254.169.254/v1"
allow_insecure = true
token = "sk_test_x"
"""
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'hookd.db'}",
        "HOOKD_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    result = subprocess.run(
        [sys.executable, "-m", "hookd.cli", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    warnings = [line for line in lines if line.startswith("hookd: warning:")]
    assert warnings == [
        f"hookd: warning: {config}: source 'stripe': key 'destinations.billing.url': "
        "10.20.30.40 is a private address (RFC 1918, fc00::/7): hookd sends the signed "
        "payloads there; check that it is meant to",
        f"hookd: warning: {config}: source 'stripe': key 'reconcile.api_url': "
        "169.254.169.254 is a link-local address (169.254.0.0/16, fe80::/10: where cloud "
        "metadata services are): hookd sends the API token there; check that it is meant to",
    ]
    assert lines.index(warnings[-1]) < len(lines) - 1  # the start-up error comes after
