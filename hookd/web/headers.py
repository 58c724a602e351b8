"""Headers every answer under a path prefix carries, whoever made it: the endpoint,
Starlette's own 404 and 405, a redirect, or the 500 of an exception.

An ASGI middleware (inside Starlette's ``ServerErrorMiddleware``): it adds the headers
to each response's start. When the app raises before answering, it answers the 500
itself, with the headers, and raises on, so the error is still logged as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.datastructures import MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hookd.web.admin_session import PREFIX as ADMIN_PREFIX
from hookd.web.admin_session import SECURITY_HEADERS

NO_STORE = {"Cache-Control": "no-store"}


@dataclass(frozen=True, slots=True)
class Rule:
    """``headers`` on every answer at ``prefix`` or under ``prefix + "/"``; ``replace``:
    over what the answer set itself (else only those it did not set)."""

    prefix: str
    headers: Mapping[str, str]
    replace: bool = False

    def applies(self, path: str) -> bool:
        return path == self.prefix or path.startswith(self.prefix + "/")


RULES = (
    # Tokens, events and metrics are nobody's to keep: not a browser's, not a proxy's.
    Rule("/api", NO_STORE, replace=True),
    Rule("/metrics", NO_STORE, replace=True),
    # The pages set them (``admin_session.secured``); the stylesheet keeps its own
    # Cache-Control. This reaches the rest: 404, 405, a 500, the trailing-slash redirect.
    Rule(ADMIN_PREFIX, SECURITY_HEADERS),
)


class PathHeaders:
    def __init__(self, app: ASGIApp, rules: tuple[Rule, ...] = RULES) -> None:
        self.app = app
        self.rules = rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rule = None
        if scope["type"] == "http":
            rule = next((r for r in self.rules if r.applies(scope["path"])), None)
        if rule is None:
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in rule.headers.items():
                    if rule.replace or name not in headers:
                        headers[name] = value
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            if not started:
                error = PlainTextResponse("Internal Server Error", 500)
                await error(scope, receive, send_with_headers)
            raise
