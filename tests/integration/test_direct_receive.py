"""The receiver's direct path (``ingest.direct``) under real uvicorn on loopback: what
the ASGI task did for a delivery, done by the protocol (test_receiver.py runs every
receiver test both ways; these are the parts only a socket shows)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY

from hookd.providers.signing import sample_event
from hookd.runtime.app import create_app
from hookd.settings import Settings
from hookd.sources import Sources
from ingest import metrics
from ingest.direct import DirectCycle
from store.intake.events import Lease, NewEvent, Stored
from tests.support import rawhttp
from tests.support.asgi import running_app, serving
from tests.support.constants import SECRETS
from tests.support.deliveries import github, stored_keys

pytestmark = pytest.mark.anyio


def commits(outcome: str) -> float:
    """How many group commits ``hookd_commit_seconds`` has counted with this outcome."""
    value = REGISTRY.get_sample_value("hookd_commit_seconds_count", {"outcome": outcome})
    return value or 0.0


def rejections(reason: str) -> float:
    value: float = metrics.WEBHOOK_REJECTIONS.labels("github", reason)._value.get()
    return value


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources of the deliveries that took the direct path, in order."""
    seen: list[str] = []
    start = DirectCycle.start

    def spy(cycle: DirectCycle) -> None:
        seen.append(cycle._source.name)
        start(cycle)

    monkeypatch.setattr(DirectCycle, "start", spy)
    return seen


async def test_deliveries_take_the_direct_path_and_nothing_else_does(
    sources: Sources, sqlite_url: str, starts: list[str]
) -> None:
    headers, body = github("d-1")
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        first = await client.post("/hooks/github", content=body, headers=headers)
        again = await client.post("/hooks/github?x=1", content=body, headers=headers)
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.post("/hooks/nope", content=b"{}")).status_code == 404
        assert (await client.get("/hooks/github")).status_code == 405
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert starts == ["github", "github"]
    assert await stored_keys(sqlite_url) == ["d-1"]


async def test_pipelined_requests_are_answered_in_order(
    sources: Sources, sqlite_url: str, starts: list[str]
) -> None:
    sent = [github(f"p-{n}") for n in range(3)]
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        reader, writer = await rawhttp.connect(str(client.base_url))
        writer.write(
            rawhttp.request("/hooks/github", sent[0][1], sent[0][0])
            + rawhttp.request("/healthz", method="GET")  # the ASGI path, between two
            + rawhttp.request("/hooks/github", sent[1][1], sent[1][0])
            + rawhttp.request("/hooks/github", sent[0][1], sent[0][0])  # a duplicate
            + rawhttp.request("/hooks/github", sent[2][1], sent[2][0])
        )
        answers = [await asyncio.wait_for(rawhttp.read_response(reader), 10) for _ in range(5)]
        writer.close()
    assert [status for status, _, _ in answers] == [202, 200, 202, 200, 202]
    first = json.loads(answers[0][2])
    assert json.loads(answers[1][2]) == {"status": "ok"}
    assert json.loads(answers[3][2]) == {"event_id": first["event_id"], "status": "duplicate"}
    assert len(starts) == 4
    assert sorted(await stored_keys(sqlite_url)) == ["p-0", "p-1", "p-2"]


@pytest.mark.parametrize("half_close", [False, True], ids=["open", "half_closed"])
@pytest.mark.parametrize("between", ["direct", "asgi"])
async def test_pipelined_requests_ending_with_connection_close_are_all_answered(
    sources: Sources, sqlite_url: str, between: str, half_close: bool
) -> None:
    """The last of several pipelined requests asks to close, and the client shuts its
    side after it (as ``printf … | nc`` does): every request is answered, in order, and
    only then is the connection closed. Before, the half-close closed the connection at
    once: only the first (or no) request was answered."""
    sent = [github(f"c-{n}") for n in range(3)]
    last_headers = {**sent[2][0], "Connection": "close"}
    middle = (
        rawhttp.request("/hooks/github", sent[1][1], sent[1][0])
        if between == "direct"
        else rawhttp.request("/healthz", method="GET")
    )
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        reader, writer = await rawhttp.connect(str(client.base_url))
        writer.write(
            rawhttp.request("/hooks/github", sent[0][1], sent[0][0])
            + middle
            + rawhttp.request("/hooks/github", sent[2][1], last_headers)
        )
        if half_close:
            await writer.drain()
            writer.write_eof()
        answers = [await asyncio.wait_for(rawhttp.read_response(reader), 10) for _ in range(3)]
        closed = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    expected = [202, 202, 202] if between == "direct" else [202, 200, 202]
    assert [status for status, _, _ in answers] == expected
    assert answers[-1][1].get("connection") == "close"
    assert closed == b""
    keys = ["c-0", "c-1", "c-2"] if between == "direct" else ["c-0", "c-2"]
    assert sorted(await stored_keys(sqlite_url)) == keys


async def test_a_body_past_the_read_buffer_arrives_in_pieces(
    sources: Sources, sqlite_url: str
) -> None:
    # uvicorn stops reading past 64 KiB of unread body until the app reads it: the
    # direct path has to resume, or this delivery waits for ever.
    headers, body = github("big", size=300_000)
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        reader, writer = await rawhttp.connect(str(client.base_url))
        message = rawhttp.request("/hooks/github", body, headers)
        for at in range(0, len(message), 16_384):
            writer.write(message[at : at + 16_384])
            await writer.drain()
            await asyncio.sleep(0.002)
        status, _, answer = await asyncio.wait_for(rawhttp.read_response(reader), 10)
        writer.close()
    assert (status, json.loads(answer)["status"]) == (202, "accepted")
    assert await stored_keys(sqlite_url) == ["big"]


async def test_a_body_that_stops_coming_is_408_and_closed(
    sources: Sources, sqlite_url: str
) -> None:
    headers, body = github("slow")
    before = rejections("body_timeout")
    async with running_app(sources, sqlite_url, via="http", body_timeout_s=0.5) as (_, client):
        reader, writer = await rawhttp.connect(str(client.base_url))
        writer.write(rawhttp.request("/hooks/github", body, headers)[:-10])
        status, answer_headers, answer = await asyncio.wait_for(rawhttp.read_response(reader), 5)
        closed = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    assert (status, json.loads(answer)) == (408, {"error": "body_timeout"})
    assert answer_headers["connection"] == "close"
    assert closed == b""
    assert rejections("body_timeout") == before + 1
    assert await stored_keys(sqlite_url) == []


async def test_a_client_gone_mid_body_is_counted_and_nothing_stored(
    sources: Sources, sqlite_url: str
) -> None:
    headers, body = github("gone")
    before = rejections("client_disconnected")
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        _, writer = await rawhttp.connect(str(client.base_url))
        writer.write(rawhttp.request("/hooks/github", body, headers)[:-10])
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()
        for _ in range(100):
            if rejections("client_disconnected") > before:
                break
            await asyncio.sleep(0.02)
        # The connection is still usable by others.
        h2, b2 = github("after")
        assert (await client.post("/hooks/github", content=b2, headers=h2)).status_code == 202
    assert rejections("client_disconnected") == before + 1
    assert await stored_keys(sqlite_url) == ["after"]


async def test_a_failed_commit_is_503_and_the_retry_is_stored(
    sources: Sources, sqlite_url: str
) -> None:
    headers, body = github("retry-me")
    failed, committed = commits("failed"), commits("committed")
    async with running_app(sources, sqlite_url, via="http") as (app, client):
        inserter = app.state.committer.inserter
        real = inserter.insert

        async def refuse(events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
            raise OSError("disk full")

        inserter.insert = refuse
        refused = await client.post("/hooks/github", content=body, headers=headers)
        inserter.insert = real
        accepted = await client.post("/hooks/github", content=body, headers=headers)
    assert refused.status_code == 503
    assert refused.json() == {"error": "unavailable"}
    assert refused.headers["retry-after"] == "5"
    assert accepted.status_code == 202
    assert await stored_keys(sqlite_url) == ["retry-me"]
    # Each commit is timed once, under its outcome.
    assert commits("failed") == failed + 1
    assert commits("committed") == committed + 1


async def test_http_1_0_is_answered_then_closed(sources: Sources, sqlite_url: str) -> None:
    headers, body = github("old")
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        reader, writer = await rawhttp.connect(str(client.base_url))
        writer.write(rawhttp.request("/hooks/github", body, headers, version="1.0"))
        status, answer_headers, _ = await asyncio.wait_for(rawhttp.read_response(reader), 5)
        closed = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    assert status == 202
    assert answer_headers["connection"] == "close"
    assert closed == b""


async def test_a_stop_waits_for_the_commits_in_flight(sources: Sources, sqlite_url: str) -> None:
    """Stopping the server while deliveries wait for a slow commit: each is answered
    2xx once stored, then its connection closes; none is cut off unanswered."""
    app = create_app(Settings(database_url=sqlite_url), sources)
    inserter: Any = app.state.committer.inserter
    real = inserter.insert
    committing = asyncio.Event()

    async def slow(events: Sequence[NewEvent], lease: Lease | None = None) -> list[Stored]:
        committing.set()
        await asyncio.sleep(0.5)
        return list(await real(events, lease))

    inserter.insert = slow
    sent = [github(f"stop-{n}") for n in range(5)]
    async with app.router.lifespan_context(app):
        async with serving(app) as url:
            streams = [await rawhttp.connect(url) for _ in sent]
            for (_, writer), (headers, body) in zip(streams, sent, strict=True):
                writer.write(rawhttp.request("/hooks/github", body, headers))
            await asyncio.wait_for(committing.wait(), 5)
        # serving() has returned: uvicorn stopped, after every connection closed.
        answers = [await rawhttp.read_response(reader) for reader, _ in streams]
        for _, writer in streams:
            writer.close()
    assert [status for status, _, _ in answers] == [202] * 5
    assert all(headers["connection"] == "close" for _, headers, _ in answers)
    assert sorted(await stored_keys(sqlite_url)) == sorted(f"stop-{n}" for n in range(5))


async def test_tracing_on_takes_the_asgi_path(
    sources: Sources, sqlite_url: str, starts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hookd import tracing

    monkeypatch.setattr(tracing, "enabled", lambda: True)
    headers, body = sample_event("github", SECRETS["github"], 1)
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        response = await client.post("/hooks/github", content=body, headers=headers)
    assert response.status_code == 202
    assert starts == []


async def test_expect_100_continue_takes_the_asgi_path(
    sources: Sources, sqlite_url: str, starts: list[str]
) -> None:
    """A client that waits for ``100 Continue`` before its body gets it: the ASGI
    path's receive sends it, so such a delivery is not taken directly."""
    headers, body = github("expect")
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        reader, writer = await rawhttp.connect(str(client.base_url))
        head = rawhttp.request("/hooks/github", body, {**headers, "Expect": "100-continue"})
        writer.write(head[: -len(body)])  # the head alone, then wait as curl does
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(body)
        status, _, _ = await asyncio.wait_for(rawhttp.read_response(reader), 5)
        writer.close()
    assert interim.startswith(b"HTTP/1.1 100 ")
    assert status == 202
    assert starts == []
    assert await stored_keys(sqlite_url) == ["expect"]


async def test_a_refusal_names_the_peer_a_trusted_proxy_forwarded(
    sources: Sources, sqlite_url: str, starts: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """uvicorn's proxy headers (a client at 127.0.0.1 is trusted by default): the
    rejected line names the forwarded address, as the ASGI path's scope would."""
    headers, body = github("forwarded")
    wrong = {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
    caplog.set_level("INFO", logger="hookd.receiver")
    async with running_app(sources, sqlite_url, via="http") as (_, client):
        forwarded = await client.post(
            "/hooks/github", content=body, headers={**wrong, "X-Forwarded-For": "203.0.113.7"}
        )
        direct = await client.post("/hooks/github", content=body, headers=wrong)
    assert (forwarded.status_code, direct.status_code) == (401, 401)
    peers = [r.__dict__["peer"] for r in caplog.records if r.getMessage() == "rejected"]
    assert peers[0] == "203.0.113.7:0"
    assert peers[1].startswith("127.0.0.1:")
    assert len(starts) == 2
