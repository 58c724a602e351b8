"""``hookd listen --from URL --to LOCAL_URL``: a deployed hookd's newly stored events,
POSTed to an app on this machine with their stored headers and exact body, and the
signature the server made for them now as the provider signs (``hookd.ops.stream``),
so the app's own signature check passes with the provider's secret; or re-signed with
a local Standard Webhooks secret (``--resign``).

It reads the server's event stream (``GET /api/events:stream``, server-sent events,
``hookd.ops.stream``) with ``HOOKD_LISTEN_TOKEN`` (or the admin token) and changes
nothing there. After a disconnect it reconnects with a capped back-off and resumes
after the highest id it forwarded (``Last-Event-ID``); the server then sends its
look-back window again, and the ids this process forwarded in the last
``SEEN_WINDOW_S`` are skipped, so each event is forwarded once.

Each event is forwarded once whatever the local app answers (a listener shows, it does
not retry): one line per event says the answer and how long it took.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from hookd.cli.parser import EXIT_FAIL, EXIT_OK
from hookd.cli.trial import parse_since
from hookd.errors import ConfigError
from hookd.logs import say
from hookd.providers.standard import standard_headers
from hookd.settings import Settings
from hookd.timefmt import iso_z
from store.ids import id_time_ms

STREAM_PATH = "/api/events:stream"
# Headers of the original request that describe its hop, not the event: the new
# request gets its own (httpx sets Host and Content-Length for the exact body).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Ids forwarded this long before the newest one are forgotten: well beyond the server's
# look-back (the commit timeout, at most 120 s, plus 5 s).
SEEN_WINDOW_S = 600.0
# The server sends a comment line every 15 s: three missed, the connection is dead.
READ_TIMEOUT_S = 45.0
BACKOFF_FIRST_S = 0.5
BACKOFF_CAP_S = 10.0
FORWARD_TIMEOUT_S = 30.0


class Refused(Exception):
    """The server refused the stream for good (a token it does not take, a bad query)."""

    def __init__(self, line: str, code: int) -> None:
        super().__init__(line)
        self.line = line
        self.code = code


@dataclass(slots=True)
class Seen:
    """The ids forwarded lately, to skip what a resumed stream sends again, and the
    highest one (the cursor)."""

    cursor: str | None = None
    ids: dict[str, int] = field(default_factory=dict)  # id -> its time (ms)

    def __contains__(self, event_id: str) -> bool:
        return event_id in self.ids

    def add(self, event_id: str) -> None:
        ms = id_time_ms(event_id) or 0
        self.ids[event_id] = ms
        if self.cursor is None or event_id > self.cursor:
            self.cursor = event_id
            horizon = ms - int(SEEN_WINDOW_S * 1000)
            if len(self.ids) > 1024:  # forget in bulk, not on every event
                self.ids = {i: t for i, t in self.ids.items() if t >= horizon}


@dataclass(frozen=True, slots=True)
class Sse:
    """One server-sent event: its ``id:``, ``event:`` and ``data:`` lines."""

    id: str
    event: str
    data: str


async def server_sent(lines: AsyncIterator[str]) -> AsyncIterator[Sse]:
    """The events of a ``text/event-stream`` (comments and ``retry:`` skipped)."""
    event_id, name = "", "message"
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield Sse(event_id, name, "\n".join(data))
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "id":
            event_id = value
        elif key == "event":
            name = value
        elif key == "data":
            data.append(value)


def check_url(raw: str, option: str) -> httpx.URL:
    """An http(s) URL with a host, or one line saying what is wrong."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{option} {raw!r}: not an http(s) URL; e.g. http://localhost:3000/hooks")
    return url


def resigner(secret: str) -> str:
    """``HOOKD_LISTEN_RESIGN_SECRET``, checked by signing once."""
    if not secret:
        raise ConfigError(
            "environment: HOOKD_LISTEN_RESIGN_SECRET: --resign needs a local Standard "
            "Webhooks secret (whsec_...), the one your app verifies with"
        )
    try:
        standard_headers(secret, b"", "msg_check", 0)
    except (ValueError, TypeError):
        raise ConfigError(
            "environment: HOOKD_LISTEN_RESIGN_SECRET: not a Standard Webhooks signing "
            "secret; use whsec_ followed by base64 (or a whsk_ private key)"
        ) from None
    return secret


@dataclass(slots=True)
class Listener:
    stream_url: httpx.URL
    to: httpx.URL
    token: str
    sources: tuple[str, ...]
    type_glob: str | None
    since: datetime | None
    last: int | None
    resign_secret: str | None
    seen: Seen = field(default_factory=Seen)

    def _params(self, started_at: datetime, connected_before: bool) -> httpx.QueryParams:
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("source", s) for s in self.sources
        ]
        if self.type_glob:
            params.append(("type", self.type_glob))
        if self.seen.cursor is not None:
            return httpx.QueryParams(params)  # the cursor goes as Last-Event-ID
        if self.last is not None:
            params.append(("last", str(self.last)))  # again after a cut: repeats are skipped
        elif self.since is not None or connected_before:
            # After a cut before any event: from the first connection's start, not from now.
            params.append(("since", iso_z(self.since or started_at)))
        return httpx.QueryParams(params)

    async def run(self) -> int:
        started_at = datetime.now(UTC)
        connected_before = False
        backoff = BACKOFF_FIRST_S
        timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
        async with (
            httpx.AsyncClient(timeout=timeout) as hookd,
            httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S) as local,
        ):
            while True:
                headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
                if self.seen.cursor is not None:
                    headers["Last-Event-ID"] = self.seen.cursor
                params = self._params(started_at, connected_before)
                try:
                    async with hookd.stream(
                        "GET", self.stream_url, params=params, headers=headers
                    ) as response:
                        await self._check(response)
                        where = (
                            f"resuming after {self.seen.cursor}"
                            if self.seen.cursor
                            else "waiting for new events"
                        )
                        host = self.stream_url.host
                        say(f"listening to {host}, forwarding to {self.to} ({where})")
                        connected_before = True
                        backoff = BACKOFF_FIRST_S
                        async for sse in server_sent(response.aiter_lines()):
                            if sse.event == "event":
                                await self._forward(local, sse)
                        problem = "the server closed the stream"
                except httpx.HTTPError as exc:
                    if not connected_before:
                        say(f"cannot reach {self.stream_url}: {_why(exc)}")
                        return EXIT_FAIL
                    problem = _why(exc)
                say(f"disconnected ({problem}); reconnecting in {backoff:g} s")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_CAP_S)

    async def _check(self, response: httpx.Response) -> None:
        if response.status_code == 200:
            return
        await response.aread()
        try:
            detail = str(response.json().get("detail") or response.json().get("error"))
        except (ValueError, AttributeError):
            detail = ""
        if response.status_code == 401:
            raise Refused(
                "the server does not take this token: set HOOKD_LISTEN_TOKEN to the "
                "server's listen token (or its admin token)",
                EXIT_FAIL,
            )
        if response.status_code == 403:
            raise Refused(f"the server refused this token: {detail}", EXIT_FAIL)
        if response.status_code in (400, 404):
            what = detail or "not found (is --from a hookd of this version?)"
            raise Refused(f"the server refused the stream: {what}", EXIT_FAIL)
        # Anything else (a 5xx, a 429): passing trouble, try again.
        raise httpx.HTTPStatusError(
            f"HTTP {response.status_code}", request=response.request, response=response
        )

    async def _forward(self, local: httpx.AsyncClient, sse: Sse) -> None:
        event = json.loads(sse.data)
        event_id = str(event["id"])
        if event_id in self.seen:
            return
        at = iso_z(datetime.now(UTC).replace(microsecond=0))
        what = f"{at}  {event_id}  {event['source']}  {event.get('type') or '-'}"
        if event.get("body") is None:
            self.seen.add(event_id)
            print(f"{what}  skipped: body {event.get('body_missing') or 'missing'}", flush=True)
            return
        body = _b64(event["body"])
        headers = self._headers(event_id, event["headers"], body)
        started = time.perf_counter()
        try:
            answer = await local.post(self.to, content=body, headers=headers)
            outcome = str(answer.status_code)
        except httpx.HTTPError as exc:
            outcome = _why(exc)
        ms = (time.perf_counter() - started) * 1000
        self.seen.add(event_id)
        print(f"{what}  -> {outcome}  {ms:.0f} ms", flush=True)

    def _headers(self, event_id: str, original: Mapping[str, str], body: bytes) -> dict[str, str]:
        if self.resign_secret is not None:
            signed = standard_headers(self.resign_secret, body, event_id, int(time.time()))
            kept = {k: v for k, v in original.items() if k.lower() == "content-type"}
            return {**signed, **kept}
        return {k: v for k, v in original.items() if k.lower() not in HOP_BY_HOP}


def _b64(text: str) -> bytes:
    return base64.b64decode(text)


def _why(exc: httpx.HTTPError) -> str:
    """A connection problem in a few words (never the request's headers)."""
    if isinstance(exc, httpx.HTTPStatusError):
        return str(exc)
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return type(exc).__name__


def cmd_listen(args: argparse.Namespace, settings: Settings) -> int:
    """Runs until Ctrl-C (exit 0) or a refusal by the server (exit 1)."""
    token = settings.listen_token or settings.admin_token
    if not token:
        raise ConfigError(
            "environment: HOOKD_LISTEN_TOKEN: not set; set it to the listen token of the "
            "hookd you listen to (its HOOKD_LISTEN_TOKEN, or its admin token)"
        )
    base = check_url(args.from_url, "--from")
    to = check_url(args.to, "--to")
    secret = resigner(settings.listen_resign_secret) if args.resign else None
    since = parse_since(args.since, datetime.now(UTC)) if args.since else None
    listener = Listener(
        # Under --from's own path: a hookd behind a proxy's prefix is reached there.
        base.copy_with(path=base.path.rstrip("/") + STREAM_PATH, query=None),
        to,
        token,
        tuple(args.source or ()),
        args.type,
        since,
        args.last,
        secret,
    )
    try:
        return asyncio.run(listener.run())
    except Refused as exc:
        say(exc.line)
        return exc.code
    except KeyboardInterrupt:
        print("hookd: listen stopped", file=sys.stderr)
        return EXIT_OK
