"""A receiver that stalls keeps what arrived during the stall.

A process can stop running for seconds: an overloaded machine, a paused VM, a long
pause of its loop. When it runs again, uvloop (the loop ``hookd serve`` runs on) fires
the timers that came due before it reads its sockets. A timeout checked against the
clock alone would then close a connection whose next request is already in its buffer:
the client, which sent in time, sees a reset, and a provider that does not retry
(GitHub) has lost that delivery until reconciliation finds it.

Here the stall is real: the test's own loop, which also runs the server (uvicorn with
serve's protocol, on uvloop), is blocked by ``time.sleep`` as a request is sent, past
the timeout that request must beat.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from hookd.runtime.app import create_app
from hookd.settings import Settings
from hookd.sources import Sources
from ingest.httpguard import GuardedHttpToolsProtocol
from tests.integration.test_direct_receive import github, stored_keys
from tests.support import rawhttp
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.5
STALL_S = 1.5  # three times the timeout: long past it, and past a sweep's tick


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return "asyncio", {"use_uvloop": True}


@asynccontextmanager
async def receiver(sources: Sources, url: str) -> AsyncIterator[str]:
    """hookd's app behind serve's protocol; every timeout ``TIMEOUT_S``."""
    app = create_app(Settings(database_url=url, body_timeout_s=TIMEOUT_S), sources)
    async with (
        app.router.lifespan_context(app),
        serve_app(
            app,
            http=GuardedHttpToolsProtocol,
            access_log=False,
            log_config=None,
            timeout_keep_alive=TIMEOUT_S,
        ) as base_url,
    ):
        yield base_url


async def stall(writer: asyncio.StreamWriter, data: bytes = b"") -> None:
    """Send ``data``, then the whole process stops: server, client and the loop they
    share. The stall is made where the receiver does its work (and where a stall
    lands), in one of the loop's I/O callbacks: the loop runs its timers next, before
    it reads its sockets again."""
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("uvloop"), "serve runs on uvloop"
    wake, ring = socket.socketpair()
    done: asyncio.Future[None] = loop.create_future()

    def stalled() -> None:
        loop.remove_reader(wake)
        writer.write(data)  # straight to the socket: nothing is buffered before it
        time.sleep(STALL_S)
        done.set_result(None)

    loop.add_reader(wake, stalled)
    ring.send(b"!")
    try:
        await done
    finally:
        wake.close()
        ring.close()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    return await asyncio.wait_for(rawhttp.read_response(reader), 10)


async def test_a_request_that_came_during_a_stall_past_the_keep_alive_is_answered(
    sources: Sources, sqlite_url: str
) -> None:
    first, second = github("ka-1"), github("ka-2")
    async with receiver(sources, sqlite_url) as url:
        reader, writer = await rawhttp.connect(url)
        writer.write(rawhttp.request("/hooks/github", first[1], first[0]))
        assert (await answer(reader))[0] == 202
        # Idle, kept alive; the next request is sent as everything stops for
        # longer than the keep-alive timeout.
        await stall(writer, rawhttp.request("/hooks/github", second[1], second[0]))
        status, _, body = await answer(reader)
        writer.close()
    assert (status, json.loads(body)["status"]) == (202, "accepted")
    assert sorted(await stored_keys(sqlite_url)) == ["ka-1", "ka-2"]


@pytest.mark.parametrize("cut", ["head", "body"])
async def test_a_request_finished_during_a_stall_past_its_deadline_is_read(
    cut: str, sources: Sources, sqlite_url: str
) -> None:
    """Its head (or its body) arrives in part, then the rest as everything stops for
    longer than the head's (or the body's) deadline."""
    headers, body = github(cut)
    message = rawhttp.request("/hooks/github", body, headers)
    # "head": the head not yet complete; "body": the head and most of the body.
    at = message.index(b"\r\n\r\n") - 5 if cut == "head" else len(message) - 10
    async with receiver(sources, sqlite_url) as url:
        reader, writer = await rawhttp.connect(url)
        writer.write(message[:at])
        await asyncio.sleep(TIMEOUT_S / 5)
        await stall(writer, message[at:])
        status, _, answer_body = await answer(reader)
        writer.close()
    assert (status, json.loads(answer_body)["status"]) == (202, "accepted")
    assert await stored_keys(sqlite_url) == [cut]


async def test_a_timeout_still_refuses_what_never_comes(sources: Sources, sqlite_url: str) -> None:
    """The grace is one turn of the loop, not a longer timeout: a body that does not
    come is still refused after a stall, and a connection that sends nothing closed."""
    headers, body = github("never")
    async with receiver(sources, sqlite_url) as url:
        reader, writer = await rawhttp.connect(url)
        writer.write(rawhttp.request("/hooks/github", body, headers)[:-10])
        await stall(writer)
        started = time.monotonic()
        status, _, answer_body = await answer(reader)
        waited = time.monotonic() - started
        silent, silent_writer = await rawhttp.connect(url)
        idle = time.monotonic()
        closed = await asyncio.wait_for(silent.read(), 10)
        idle = time.monotonic() - idle
        silent_writer.close()
        writer.close()
    assert (status, json.loads(answer_body)) == (408, {"error": "body_timeout"})
    assert waited < 1.0, "refused within a tick or two of the stall's end"
    assert closed == b""
    assert idle < TIMEOUT_S + 1.0, "a connection that sends nothing is still closed"
    assert await stored_keys(sqlite_url) == []
