"""The built-in ``forward`` handler against a real HTTP target on loopback."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hookd import Event, PermanentError
from hookd.providers import PROVIDERS
from hookd.sources import ForwardConfig
from processing.handlers import forward_handler
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio
SECRET = "whsec_" + base64.b64encode(b"forward-target-secret").decode()


class Target:
    def __init__(self) -> None:
        self.status = 200
        self.received: list[tuple[dict[str, list[str]], bytes]] = []

    async def endpoint(self, request: Request) -> Response:
        headers: dict[str, list[str]] = {}
        for k, v in request.headers.items():
            headers.setdefault(k.lower(), []).append(v)
        self.received.append((headers, await request.body()))
        return Response(status_code=self.status)


@pytest.fixture
async def target() -> AsyncIterator[tuple[Target, str]]:
    t = Target()
    app = Starlette(routes=[Route("/in", t.endpoint, methods=["POST"])])
    async with serve_app(app) as url:
        yield t, url + "/in"


def event() -> Event:
    return Event(
        id="01JTESTEVENT0000000000000A",
        source="github",
        provider="github",
        type="push",
        dedupe_key="d-1",
        origin="webhook",
        received_at=datetime.now(UTC),
        headers={},
        body=b'{"ok": true}',
        idempotency_key="hookd_abc",
    )


async def test_forward_posts_the_body_signed_with_standard_webhooks(
    target: tuple[Target, str],
) -> None:
    t, url = target
    async with httpx.AsyncClient() as client:
        await forward_handler(ForwardConfig(url=url, secret=SECRET), client)(event())
    [(headers, body)] = t.received
    assert body == b'{"ok": true}'
    assert headers["webhook-id"] == ["01JTESTEVENT0000000000000A"]
    assert headers["idempotency-key"] == ["hookd_abc"]
    standard = PROVIDERS["standard"]
    verified = standard.verify_request(
        headers, body, [standard.parse_secret(SECRET)], int(time.time()), 300
    )
    assert verified.scheme == "standard-v1"


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_forward_retries_on_server_errors_and_throttling(
    target: tuple[Target, str], status: int
) -> None:
    t, url = target
    t.status = status
    async with httpx.AsyncClient() as client:
        with pytest.raises(RuntimeError, match=str(status)):
            await forward_handler(ForwardConfig(url=url, secret=SECRET), client)(event())


@pytest.mark.parametrize("status", [400, 404, 410])
async def test_forward_gives_up_on_client_errors(target: tuple[Target, str], status: int) -> None:
    t, url = target
    t.status = status
    async with httpx.AsyncClient() as client:
        with pytest.raises(PermanentError, match=str(status)):
            await forward_handler(ForwardConfig(url=url, secret=SECRET), client)(event())


async def test_forward_timeout_is_a_retryable_failure() -> None:
    async def slow(_: Request) -> Response:
        await asyncio.sleep(2)
        return Response()

    app = Starlette(routes=[Route("/in", slow, methods=["POST"])])
    async with serve_app(app) as url, httpx.AsyncClient() as client:
        config = ForwardConfig(url=url + "/in", secret=SECRET, timeout_s=0.2)
        with pytest.raises(httpx.TimeoutException):
            await forward_handler(config, client)(event())
