"""Where a test's notifications land: one loopback HTTP server that answers as Slack's
incoming webhooks (``/slack``: 200 ``ok``), PagerDuty's Events API v2 (``/pagerduty``:
202 with the dedup key) and any webhook receiver (``/webhook``: 204), and records what
each got. ``refuse`` makes a path answer an error for a while; ``delay_s`` holds every
answer back (a channel slow to answer, to stop hookd mid-send)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.support.http import serve_app


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Sink:
    received: list[Received] = field(default_factory=list)
    refusing: dict[str, int] = field(default_factory=dict)
    delay_s: float = 0.0
    # Requests that arrived, answered or not (a request cut short still arrived).
    arrived: int = 0
    url: str = ""

    def refuse(self, path: str, status: int) -> None:
        self.refusing[path] = status

    def accept(self, path: str) -> None:
        self.refusing.pop(path, None)

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def _answer(self, request: Request) -> Response:
        self.arrived += 1
        body = await request.body()
        path = request.url.path
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        status = self.refusing.get(path)
        if status is not None:
            return PlainTextResponse("refused by the test", status_code=status)
        self.received.append(Received(path, dict(request.headers), body))
        if path == "/slack":
            return PlainTextResponse("ok")
        if path == "/pagerduty":
            event = json.loads(body)
            return JSONResponse(
                {
                    "status": "success",
                    "message": "Event processed",
                    "dedup_key": event["dedup_key"],
                },
                status_code=202,
            )
        return Response(status_code=204)

    def app(self) -> Starlette:
        # Any other path answers 204: a destination's deliveries, say.
        return Starlette(routes=[Route("/{path:path}", self._answer, methods=["POST"])])


@asynccontextmanager
async def notify_sink() -> AsyncIterator[Sink]:
    sink = Sink()
    async with serve_app(sink.app()) as url:
        sink.url = url
        yield sink
