"""A real ``hookd serve`` (uvicorn) on loopback: concurrency, crashes, early refusals."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from ingest.signing import github_headers, sample_event
from store import db
from store.models import EVENTS
from tests.conftest import SECRETS
from tests.support.server import HookdServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def server_env(sources_file: Path, db_url: str) -> dict[str, str]:
    return {"HOOKD_CONFIG": str(sources_file), "HOOKD_DATABASE_URL": db_url}


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[HookdServer]:
    with HookdServer(server_env, tmp_path) as running:
        yield running


async def stored_keys(url: str) -> dict[str, str]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(sa.select(EVENTS.c.dedupe_key, EVENTS.c.id))
            return {row.dedupe_key: row.id for row in result}
    finally:
        await engine.dispose()


async def test_fifty_concurrent_identical_deliveries_store_one_row(
    server: HookdServer, db_url: str
) -> None:
    headers, body = sample_event("github", SECRETS["github"], 1)
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as client:
        responses = await asyncio.gather(
            *(client.post("/hooks/github", content=body, headers=headers) for _ in range(50))
        )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 49 + [202]
    ids = {r.json()["event_id"] for r in responses}
    assert len(ids) == 1
    assert {r.json()["status"] for r in responses if r.status_code == 200} == {"duplicate"}
    assert await stored_keys(db_url) == {headers["X-GitHub-Delivery"]: ids.pop()}


async def test_kill_9_after_a_burst_loses_no_acknowledged_event(
    server_env: dict[str, str], tmp_path: Path, db_url: str
) -> None:
    server = HookdServer(server_env, tmp_path).start()
    acked: dict[str, str] = {}
    sent = [sample_event("github", SECRETS["github"], i) for i in range(600)]
    queue: asyncio.Queue[tuple[dict[str, str], bytes]] = asyncio.Queue()
    for item in sent:
        queue.put_nowait(item)
    killed = asyncio.Event()

    async def sender(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            headers, body = queue.get_nowait()
            try:
                response = await client.post("/hooks/github", content=body, headers=headers)
            except httpx.HTTPError:
                continue
            if response.status_code == 202:
                acked[headers["X-GitHub-Delivery"]] = response.json()["event_id"]
            if len(acked) >= 200 and not killed.is_set():
                killed.set()
                server.kill9()

    try:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=10) as client:
            await asyncio.gather(*(sender(client) for _ in range(32)))
    finally:
        server.stop()
    assert killed.is_set(), "the burst ended before the kill"
    assert len(acked) < len(sent), "the kill came after the whole burst"
    stored = await stored_keys(db_url)
    missing = {key for key in acked if stored.get(key) != acked[key]}
    assert not missing, f"{len(missing)} acknowledged events lost"

    with HookdServer(server_env, tmp_path) as restarted:
        headers, body = sent[0]
        async with httpx.AsyncClient(base_url=restarted.url) as client:
            again = await client.post("/hooks/github", content=body, headers=headers)
    assert again.status_code == 200
    assert again.json()["event_id"] == stored[headers["X-GitHub-Delivery"]]


def raw_request(port: int, head: str, body: bytes = b"", wait_s: float = 5.0) -> tuple[str, float]:
    """Send a request head (and maybe part of a body) and read the status line."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(head.encode("latin-1") + body)
        reply = sock.recv(4096).decode("latin-1")
    return reply.split("\r\n", 1)[0], time.monotonic() - started


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_oversized_declared_body_is_refused_before_it_is_sent(server: HookdServer) -> None:
    headers, _ = sample_event("standard", SECRETS["standard"], 1)
    head = "POST /hooks/standard HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    status, elapsed = raw_request(server.port, head, b"x" * 100)
    assert status == "HTTP/1.1 413 Request Entity Too Large"
    assert elapsed < 2


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_unsigned_request_is_refused_before_its_body_is_read(server: HookdServer) -> None:
    head = "POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n\r\n"
    status, elapsed = raw_request(server.port, head)
    assert status == "HTTP/1.1 401 Unauthorized"
    assert elapsed < 2


def test_body_that_never_finishes_times_out(
    sources_file: Path, sqlite_url: str, tmp_path: Path
) -> None:
    env = {
        "HOOKD_CONFIG": str(sources_file),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_BODY_TIMEOUT_S": "1",
    }
    body = b'{"zen": "slow"}'
    headers = github_headers(SECRETS["github"], body, "ping", "slow-1")
    head = "POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with HookdServer(env, tmp_path) as server:
        status, elapsed = raw_request(server.port, head, body[:5])
    assert status == "HTTP/1.1 408 Request Timeout"
    assert 0.9 < elapsed < 3
