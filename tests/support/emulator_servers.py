"""Two real loopback servers a module, for the emulator tests: one serves whichever
emulator a test plugs in (``serve``), the other records the webhooks an emulator sends
(``target``). Starting uvicorn once a module instead of once a test saves ~0.2 s a test.

A test module takes the fixtures by assignment (importing them would shadow them),
``target`` made for its emulators' ``webhook_key``::

    anyio_backend = emulator_servers.anyio_backend
    servers = emulator_servers.servers
    serve = emulator_servers.serve
    target = emulator_servers.recording_target(webhook_key)
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.support.http import serve_app

# What an emulator module's ``webhook_key`` is: the key hookd dedupes a webhook on.
KeyOf = Callable[[Mapping[str, str], bytes], str]


class Clock:
    """A settable clock for an emulator's ``now``."""

    def __init__(self, now: float) -> None:
        self.t = now

    def __call__(self) -> float:
        return self.t


class Target:
    """A tiny webhook receiver that records what it gets."""

    def __init__(self, key_of: KeyOf) -> None:
        self.key_of = key_of
        self.received: list[tuple[dict[str, str], bytes]] = []

    async def endpoint(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        return JSONResponse({"ok": True}, status_code=202)

    def keys(self) -> collections.Counter[str]:
        return collections.Counter(self.key_of(h, b) for h, b in self.received)


class Swap:
    """An ASGI app that forwards to whichever app a test plugged in, so that one
    real loopback server per module serves every test (uvicorn takes ~0.2 s to stop)."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "no app plugged in"
        await self.app(scope, receive, send)


# The API server and the webhook sink, each as (its app slot, its base URL).
Servers = tuple[tuple[Swap, str], tuple[Swap, str]]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def servers() -> AsyncIterator[Servers]:
    api, sink = Swap(), Swap()
    async with serve_app(api) as api_url, serve_app(sink) as sink_url:
        yield (api, api_url), (sink, sink_url)


@pytest.fixture
def serve(servers: Servers) -> Iterator[Callable[[Any], str]]:
    """``serve(app)`` plugs ``app`` into the module's API server and returns its base URL."""
    swap, url = servers[0]

    def plug(app: Any) -> str:
        swap.app = app
        return url

    yield plug
    swap.app = None


def recording_target(key_of: KeyOf) -> Any:
    """A module's ``target`` fixture: a recording webhook receiver on the module's second
    server, as (recorder, URL), its keys read with ``key_of``."""

    @pytest.fixture
    def target(servers: Servers) -> Iterator[tuple[Target, str]]:
        swap, url = servers[1]
        recorder = Target(key_of)
        swap.app = Starlette(routes=[Route("/in", recorder.endpoint, methods=["POST"])])
        yield recorder, url + "/in"
        swap.app = None

    return target
