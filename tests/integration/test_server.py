"""A real ``hookd serve`` (uvicorn) on loopback: concurrency, crashes, early refusals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from hookd.providers.github import github_headers
from hookd.providers.signing import sample_event
from store.models import EVENTS
from tests.support import services
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.server import HookdServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def server_env(sources_file: Path, db_url: str) -> dict[str, str]:
    return {"HOOKD_CONFIG": str(sources_file), "HOOKD_DATABASE_URL": db_url}


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[HookdServer]:
    with HookdServer(server_env, tmp_path) as running:
        yield running


async def stored_keys(url: str) -> dict[str, str]:
    async with engine_of(url) as engine, engine.connect() as conn:
        result = await conn.execute(sa.select(EVENTS.c.dedupe_key, EVENTS.c.id))
        return {row.dedupe_key: row.id for row in result}


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


def exchange(port: int, data: bytes, wait_s: float = 10.0) -> tuple[str, bytes]:
    """Send ``data`` in one ``sendall`` and read until the server closes: (status line, body).

    A server that answers early and closes with some of the request unread resets the
    connection; what was already received is still the answer.
    """
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(data)
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode("latin-1"), body


def padded_delivery(seq: int, head_bytes: int) -> bytes:
    """A signed GitHub delivery whose request head is ``head_bytes`` long (an ``X-Pad``
    header makes up the size), with its body, as one buffer."""
    headers, body = sample_event("github", SECRETS["github"], seq)
    lines = ["POST /hooks/github HTTP/1.1", "Host: x", "Connection: close"]
    lines += [f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    head = "\r\n".join(lines) + "\r\nX-Pad: "
    head += "a" * (head_bytes - len(head) - len("\r\n\r\n")) + "\r\n\r\n"
    assert len(head) == head_bytes
    return head.encode("latin-1") + body


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_head_over_64_kib_in_a_single_read_gets_431(server: HookdServer) -> None:
    """The limit holds however the head arrives: a 70 KB or 180 KB head sent at once
    (one read for the server) is refused, it never reaches the receiver."""
    for seq, size in enumerate((70_000, 180_000)):
        status, body = exchange(server.port, padded_delivery(seq, size))
        assert status == "HTTP/1.1 431 Request Header Fields Too Large", size
        assert json.loads(body) == {"error": "headers_too_large"}
    status, body = exchange(server.port, padded_delivery(9, 60_000))
    assert status == "HTTP/1.1 202 Accepted"
    assert json.loads(body)["status"] == "accepted"


def trickle(
    port: int, start: bytes, rest: bytes, every_s: float = 0.2, wait_s: float = 10.0
) -> tuple[str, bytes, str]:
    """Send ``start``, then ``rest`` a byte at a time, ``every_s`` apart, until the server
    answers; read the answer to the end: (status line, body, this end's ``host:port``)."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=every_s) as sock:
        host, local_port = sock.getsockname()[:2]
        sock.sendall(start)
        deadline = time.monotonic() + wait_s
        for byte in rest:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break  # closed after its answer: read it below
            try:
                got = sock.recv(65536)
            except TimeoutError:
                assert time.monotonic() < deadline, "no answer"
                continue
            break
        sock.settimeout(wait_s)
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode("latin-1"), body, f"{host}:{local_port}"


def test_slow_and_oversized_heads_are_refused_like_other_rejections(
    sources_file: Path, sqlite_url: str, tmp_path: Path
) -> None:
    """408 (head or body too slow) and 431 answer ``{"error": reason}``, log a "rejected"
    line with the reason and the peer (and the source once it is known), and count."""
    env = {
        "HOOKD_CONFIG": str(sources_file),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_BODY_TIMEOUT_S": "1",
        "HOOKD_LOG_JSON": "true",
        "HOOKD_LOG_LEVEL": "INFO",
        "HOOKD_ADMIN_TOKEN": "rejections-token",
    }
    body = b'{"zen": "slow"}'
    headers = github_headers(SECRETS["github"], body, "ping", "slow-2")
    head = "POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with HookdServer(env, tmp_path) as server:
        slow_body = trickle(server.port, head.encode(), body)
        slow_head = trickle(server.port, head[:40].encode(), head[40:].encode())
        big = exchange(server.port, padded_delivery(1, 100_000))
        scrape = httpx.get(
            server.url + "/metrics", headers={"Authorization": "Bearer rejections-token"}
        )
        server.stop()
        text = server.log_path.read_text()

    assert slow_body[0] == slow_head[0] == "HTTP/1.1 408 Request Timeout"
    assert json.loads(slow_body[1]) == {"error": "body_timeout"}
    assert json.loads(slow_head[1]) == {"error": "header_timeout"}
    assert big == ("HTTP/1.1 431 Request Header Fields Too Large", b'{"error":"headers_too_large"}')

    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    rejected = {r["reason"]: r for r in records if r["msg"] == "rejected"}
    assert rejected.keys() == {"body_timeout", "header_timeout", "headers_too_large"}, text
    assert rejected["body_timeout"]["source"] == "github"
    assert rejected["body_timeout"]["peer"] == slow_body[2]
    assert "source" not in rejected["header_timeout"]
    assert rejected["header_timeout"]["peer"] == slow_head[2]
    assert rejected["headers_too_large"]["peer"].startswith("127.0.0.1:")

    counted = {
        (s.labels["source"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
        if s.name == "hookd_webhook_rejections_total"
    }
    assert counted[("github", "body_timeout")] == 1
    assert counted[("_unknown", "header_timeout")] == 1
    assert counted[("_unknown", "headers_too_large")] == 1


async def ready_status(client: httpx.AsyncClient, want: int, timeout_s: float = 30.0) -> int:
    """Poll ``/readyz`` until it answers ``want``: the last status seen; fails after
    ``timeout_s`` saying which status it answered instead."""
    seen: list[int] = []

    async def answered() -> bool:
        seen.append((await client.get("/readyz")).status_code)
        return seen[-1] == want

    await wait_for(
        answered,
        timeout_s=timeout_s,
        interval_s=0.1,
        message=lambda: f"/readyz answers {seen[-1]}, not {want}",
    )
    return seen[-1]


async def deliver(client: httpx.AsyncClient, seq: int) -> int:
    headers, body = sample_event("github", SECRETS["github"], seq)
    return (await client.post("/hooks/github", content=body, headers=headers)).status_code


COMMITS_FAILING = {"status": "unavailable", "database": "commits_failing", "failed_commits": 3}


async def on_database(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(sa.make_url(url).set(drivername="postgresql").render_as_string())
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_readyz_is_503_while_commits_fail_and_200_once_they_succeed(
    sources_file: Path, pg_url: str, tmp_path: Path
) -> None:
    """PostgreSQL answers but refuses every insert (INSERT revoked from hookd's role):
    each delivery gets 503, and after three in a row so does /readyz. Granted again,
    /readyz recovers with no delivery sent (its own probe write commits)."""
    role = f"hookd_t_{uuid.uuid4().hex[:12]}"
    await services.admin(f'CREATE ROLE "{role}" LOGIN')
    try:
        await on_database(
            pg_url,
            f'GRANT USAGE ON SCHEMA public TO "{role}"',
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"',
            f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{role}"',
        )
        url = sa.make_url(pg_url).set(username=role).render_as_string(hide_password=False)
        env = {"HOOKD_CONFIG": str(sources_file), "HOOKD_DATABASE_URL": url}
        with HookdServer(env, tmp_path) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=15) as client:
                assert await deliver(client, 1) == 202
                assert (await client.get("/readyz")).status_code == 200
                await on_database(pg_url, f'REVOKE INSERT ON events FROM "{role}"')
                assert [await deliver(client, seq) for seq in (2, 3)] == [503, 503]
                assert (await client.get("/readyz")).status_code == 200  # two may be a blip
                assert await deliver(client, 4) == 503
                for _ in range(2):  # and it stays so: the probe write fails as well
                    unready = await client.get("/readyz")
                    assert unready.status_code == 503
                    assert unready.json() == COMMITS_FAILING
                await on_database(pg_url, f'GRANT INSERT ON events TO "{role}"')
                assert await ready_status(client, 200) == 200
                assert await deliver(client, 5) == 202
    finally:
        await on_database(pg_url, f'DROP OWNED BY "{role}"')
        await services.admin(f'DROP ROLE IF EXISTS "{role}"')


async def test_readyz_is_503_while_sqlite_is_locked_and_200_once_released(
    sources_file: Path, sqlite_url: str, tmp_path: Path
) -> None:
    """Another process holds SQLite's write lock: commits fail (the commit timeout, then
    "database is locked"), /readyz goes 503 although the database answers reads, and
    comes back once the lock is released, with no delivery sent."""
    env = {
        "HOOKD_CONFIG": str(sources_file),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_COMMIT_TIMEOUT_S": "1",
    }
    path = sa.make_url(sqlite_url).database
    assert path is not None
    with HookdServer(env, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=15) as client:
            assert await deliver(client, 1) == 202
            holder = sqlite3.connect(path, isolation_level=None)
            try:
                holder.execute("BEGIN EXCLUSIVE")
                assert [await deliver(client, seq) for seq in (2, 3, 4)] == [503] * 3
                unready = await client.get("/readyz")
                assert unready.status_code == 503
                assert unready.json() == COMMITS_FAILING
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert await ready_status(client, 200) == 200
            assert await deliver(client, 5) == 202
