"""The bounds of every call a reconciliation run makes to a provider API.

A URL a provider's answer hands over (GitHub's ``Link: <…>; rel="next"``, a
redirect's ``Location``) that leaves the configured API's origin fails the run, and
nothing, the token least of all, is sent there. An answer over the cap on one answer
fails the run as soon as the cap is passed: the rest is never read.

The provider APIs are real HTTP servers on loopback (the emulators of
``tests.support``, and small apps for the hostile answers); a second server on
another port records whatever reaches it.
"""

from __future__ import annotations

import asyncio
import re
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

import reconcile.http
from hookd.errors import ReconcileError
from hookd.sources import Source, parse_sources
from reconcile.http import Api
from reconcile.poller import Outcome, Reconciler
from store.crypto import BodyCipher
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.emulators import GitHubEmulator
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio

API_TOKEN = "provider-api-token"
GITLAB_TOKEN = "glpat-emulator"
HOOK = "repos/octo/hello/hooks/42"
DELIVERIES = f"/{HOOK}/deliveries"
MIB = 1024 * 1024
# The huge page: far more than the cap the test sets, generated as it is sent.
CAP = 1 * MIB
TOTAL = 64 * MIB


class Recorder:
    """Another server: records every request (and answers an empty page, as an API
    would, so that only the run's own refusal can fail it)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.app = Starlette(
            routes=[Route("/{path:path}", self._any, methods=["GET", "POST", "PUT"])]
        )

    async def _any(self, request: Request) -> Response:
        self.requests.append((request.method, request.url.path, dict(request.headers)))
        return JSONResponse([])


def link_to(app: Any, other: str) -> Callable[[Scope, Receive, Send], Any]:
    """``app`` with its ``Link`` header's URLs moved to ``other`` (scheme, host, port)."""

    async def moved(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [
                        (k, re.sub(rb"https?://[^/>]+", other.encode(), v) if k == b"link" else v)
                        for k, v in message["headers"]
                    ],
                }
            await send(message)

        await app(scope, receive, sending)

    return moved


def sources_file(tmp_path: Path, provider: str, api_url: str, specific: str) -> Source:
    token = GITLAB_TOKEN if provider == "gitlab" else API_TOKEN
    secret = SECRETS.get(provider, "gitlab-secret-token")
    path = tmp_path / "hookd.toml"
    path.write_text(
        f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{secret}"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true  # a plain-http test server on loopback
token = "{token}"
lookback_s = 86400
{specific}
"""
    )
    source = parse_sources(path.read_text(), path, env={}).get(provider)
    assert source is not None
    return source


async def run_once(db_url: str, source: Source, client: httpx.AsyncClient | None = None) -> Outcome:
    async with engine_of(db_url) as engine, client or httpx.AsyncClient() as http:
        return await Reconciler(engine, http, BodyCipher("")).run(source)


# --- URLs from answers stay on the API's origin --------------------------------------


async def test_a_next_link_to_another_port_fails_the_run_and_that_port_gets_nothing(
    tmp_path: Path, sqlite_url: str
) -> None:
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    emulator.add_events(150, start=time.time() - 3600, step_s=10.0)  # two pages
    recorder = Recorder()
    async with (
        serve_app(recorder.app) as elsewhere,
        serve_app(link_to(emulator.app, elsewhere)) as api,
    ):
        source = sources_file(tmp_path, "github", api, f'hook = "{HOOK}"')
        outcome = await run_once(sqlite_url, source)

    assert outcome.status == "failed", outcome
    assert outcome.error == (
        f"foreign_url: refused GET {elsewhere}{DELIVERIES}: not on the API's origin "
        f"{api} (the source's api_url); a URL from the provider's answer must stay there"
    )
    assert recorder.requests == [], "a request went to the URL the answer named"
    assert not any("authorization" in headers for _, _, headers in recorder.requests)
    assert emulator.calls_by_path[DELIVERIES] == 1, "the first page was read, no other"


async def test_a_redirect_is_never_followed_even_by_a_client_that_follows_them(
    tmp_path: Path, sqlite_url: str
) -> None:
    """GitLab authenticates with ``PRIVATE-TOKEN``, which httpx does not strip from a
    redirect to another origin as it does ``Authorization``."""
    recorder = Recorder()
    async with serve_app(recorder.app) as elsewhere:

        async def moved(request: Request) -> Response:
            return RedirectResponse(
                f"{elsewhere}{request.url.path}?{request.url.query}", status_code=302
            )

        app = Starlette(routes=[Route("/{path:path}", moved)])
        async with serve_app(app) as api:
            source = sources_file(
                tmp_path, "gitlab", f"{api}/api/v4", 'project = "octo/hello"\nhook_id = 7'
            )
            following = httpx.AsyncClient(follow_redirects=True)
            outcome = await run_once(sqlite_url, source, following)

    events = "/api/v4/projects/octo/hello/hooks/7/events"  # as errors show it: decoded
    assert outcome.status == "failed", outcome
    assert outcome.error == (
        f"provider_redirect: HTTP 302 from GET {api}{events} to {elsewhere}{events}: "
        "redirects are not followed; set the source's api_url to where the API answers"
    )
    assert recorder.requests == [], "the redirect was followed"


async def test_an_api_without_a_configured_origin_keeps_to_its_first_requests() -> None:
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    recorder = Recorder()
    async with (
        serve_app(recorder.app) as elsewhere,
        serve_app(emulator.app) as api_url,
        httpx.AsyncClient() as client,
    ):
        api = Api(client, lambda: {"Authorization": f"Bearer {API_TOKEN}"})
        first = await api.request("GET", f"{api_url}{DELIVERIES}?per_page=100")
        assert first.json() == []
        with pytest.raises(ReconcileError) as refused:
            await api.request("GET", f"{elsewhere}{DELIVERIES}?cursor=secret-cursor")
    assert refused.value.reason == "foreign_url"
    assert "secret-cursor" not in str(refused.value), "the query stays out of errors"
    assert recorder.requests == []


@pytest.mark.parametrize(
    ("url", "same"),
    [
        ("https://api.github.com/repos/o/r/hooks/1/deliveries?cursor=x", True),
        ("https://API.GitHub.com:443/repos", True),
        ("http://api.github.com/repos", False),
        ("https://api.github.com:8443/repos", False),
        ("https://api.github.com.example.net/repos", False),
        ("https://example.net/api.github.com/repos", False),
        ("//example.net/repos", False),
        ("/repos/o/r/hooks/1/deliveries", False),
    ],
)
async def test_the_origin_is_scheme_host_and_port(url: str, same: bool) -> None:
    """Refused before anything is sent: the client's transport is never reached."""
    sent: list[httpx.Request] = []

    def transport(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=[])

    async with httpx.AsyncClient(transport=httpx.MockTransport(transport)) as client:
        api = Api(client, lambda: {}, origin="https://api.github.com")
        if same:
            await api.request("GET", url)
        else:
            with pytest.raises(ReconcileError, match=r"^foreign_url: refused GET "):
                await api.request("GET", url)
    assert len(sent) == int(same)


# --- the cap on one answer ------------------------------------------------------------


class HugePage:
    """A GitHub deliveries page of ``TOTAL`` bytes of JSON-ish text, generated as it is
    sent: as is (no length), with its ``Content-Length``, or gzip-encoded. Notes how
    much it had produced when it saw the client go."""

    ITEM = (
        b'{"id":12000000001,"guid":"0b5e4c1a-0000-4000-8000-000000000000",'
        b'"delivered_at":"2024-01-01T00:00:00Z","status_code":200,"event":"issues"},'
    )

    CHUNK = ITEM * (64 * 1024 // len(ITEM))
    CHUNKS = -(-TOTAL // len(CHUNK))

    def __init__(self, form: str) -> None:
        self.form = form
        self.produced = 0
        self.gone_at: int | None = None
        self.app = Starlette(routes=[Route(DELIVERIES, self._page)])

    async def _body(self, request: Request) -> AsyncIterator[bytes]:
        gzip = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        yield gzip.compress(b"[") if self.form == "gzip" else b"["
        for _ in range(self.CHUNKS):
            if await request.is_disconnected():
                self.gone_at = self.produced
                return
            self.produced += len(self.CHUNK)
            yield gzip.compress(self.CHUNK) if self.form == "gzip" else self.CHUNK
        if self.form == "gzip":
            yield gzip.flush()

    async def _page(self, request: Request) -> Response:
        headers = {}
        if self.form == "declared":
            headers["Content-Length"] = str(1 + self.CHUNKS * len(self.CHUNK))
        if self.form == "gzip":
            headers["Content-Encoding"] = "gzip"
        return StreamingResponse(
            self._body(request), media_type="application/json", headers=headers
        )


@pytest.mark.parametrize("form", ["streamed", "declared", "gzip"])
async def test_a_huge_page_fails_the_run_at_the_cap_and_is_not_read_on(
    form: str, tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile.http, "MAX_ANSWER_BYTES", CAP)
    huge = HugePage(form)
    async with serve_app(huge.app) as api:
        source = sources_file(tmp_path, "github", api, f'hook = "{HOOK}"')
        tracemalloc.start()
        try:
            outcome = await run_once(sqlite_url, source)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        for _ in range(100):  # the server notices the client gone at its next chunk
            if huge.gone_at is not None or huge.produced >= TOTAL:
                break
            await asyncio.sleep(0.05)

    assert outcome.status == "failed", outcome
    assert outcome.error == (
        f"answer_too_large: answer from GET {api}{DELIVERIES} over {CAP} bytes; raise "
        "[sources.reconcile] max_answer_bytes if the API's pages are that large"
    )
    assert peak < 8 * CAP, f"the run's memory peaked at {peak / MIB:.1f} MiB"
    if form != "gzip":  # gzip's 64 MiB is a few hundred KiB on the wire
        assert huge.gone_at is not None, "the client read the page to its end"
        assert huge.gone_at < TOTAL // 4, f"{huge.gone_at / MIB:.1f} MiB sent before it went"


async def test_an_answer_within_the_cap_is_read_whole_and_decoded() -> None:
    """The response an adapter gets: status, headers, ``.json()``, gzip decoded."""
    items = [{"id": i, "guid": f"g{i}"} for i in range(2000)]
    body = JSONResponse(items).body
    packed = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    gzipped = packed.compress(body) + packed.flush()

    async def page(request: Request) -> Response:
        assert request.headers["accept-encoding"] == "gzip"
        headers = {"Content-Encoding": "gzip", "Link": '<x>; rel="next"'}
        return Response(gzipped, media_type="application/json", headers=headers)

    app = Starlette(routes=[Route("/page", page)])
    async with serve_app(app) as url, httpx.AsyncClient() as client:
        api = Api(client, lambda: {}, origin=url, max_answer_bytes=len(body))
        answer = await api.request("GET", f"{url}/page")
        assert (answer.status_code, answer.json()) == (200, items)
        assert answer.headers["link"] == '<x>; rel="next"'
        assert "content-encoding" not in answer.headers
        small = Api(client, lambda: {}, origin=url, max_answer_bytes=len(body) - 1)
        with pytest.raises(ReconcileError, match=r"^answer_too_large: answer from GET "):
            await small.request("GET", f"{url}/page")
