"""``ingest.keyfetch``: the receiver's fetcher of published keys, against real HTTPS
(``KeyServer``): what it keeps and for how long, what it refuses to read, and that a
URL wanted by many at once is fetched once. Its clock is the test's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.keyfetch import MAX_TTL_S, MIN_TTL_S, KeyFetcher, KeyUnavailable, max_age
from tests.support.key_servers import KeyServer

pytestmark = pytest.mark.anyio

URL = "https://www.googleapis.com/oauth2/v3/certs"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyServer]:
    with KeyServer(tmp_path) as keys:
        for name, value in keys.env().items():
            monkeypatch.setenv(name, value)
        yield keys


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def parse(raw: bytes) -> bytes:
    if raw.startswith(b"bad"):
        raise ValueError("not a key")
    return raw


async def fetch(fetcher: KeyFetcher, url: str = URL, ttl_s: float = 300.0) -> bytes:
    return await fetcher.keys(url, parse, ttl_s)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("public, max-age=19845, must-revalidate, no-transform", 19845.0),
        ("max-age=0", 0.0),
        ("no-store", 0.0),
        ("private, no-cache", 0.0),
        ("s-maxage=10", None),
    ],
)
def test_max_age_of_cache_control(header: str | None, seconds: float | None) -> None:
    assert max_age(header) == seconds


async def test_kept_for_max_age_then_fetched_again(server: KeyServer) -> None:
    server.serve(URL, b"jwks-1", headers={"cache-control": "public, max-age=600"})
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    try:
        assert await fetch(fetcher) == b"jwks-1"
        server.serve(URL, b"jwks-2", headers={"cache-control": "public, max-age=600"})
        clock.now += 599
        assert await fetch(fetcher) == b"jwks-1"
        clock.now += 2
        assert await fetch(fetcher) == b"jwks-2"
    finally:
        await fetcher.close()
    assert server.count(URL) == 2


async def test_without_cache_control_the_providers_ttl_within_bounds(server: KeyServer) -> None:
    server.serve(URL, b"jwks")
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    try:
        await fetch(fetcher, ttl_s=1.0)  # below the floor: kept MIN_TTL_S
        clock.now += MIN_TTL_S - 1
        await fetch(fetcher, ttl_s=1.0)
        assert server.count(URL) == 1
        clock.now += 2
        await fetch(fetcher, ttl_s=10 * MAX_TTL_S)  # above the ceiling: kept MAX_TTL_S
        clock.now += MAX_TTL_S + 1
        await fetch(fetcher)
    finally:
        await fetcher.close()
    assert server.count(URL) == 3


async def test_no_store_is_fetched_every_time(server: KeyServer) -> None:
    server.serve(URL, b"jwks", headers={"cache-control": "no-store"})
    fetcher = KeyFetcher(clock=Clock())
    try:
        for _ in range(3):
            await fetch(fetcher)
    finally:
        await fetcher.close()
    assert server.count(URL) == 3


async def test_many_at_once_share_one_fetch(server: KeyServer) -> None:
    server.serve(URL, b"jwks", delay_s=0.3)
    fetcher = KeyFetcher()
    try:
        got = await asyncio.gather(*(fetch(fetcher) for _ in range(25)))
    finally:
        await fetcher.close()
    assert got == [b"jwks"] * 25
    assert server.count(URL) == 1


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        ({"body": b"x" * 5000}, "too_large"),
        ({"body": b"gone", "status": 404}, "status_404"),
        (
            {"body": b"", "status": 302, "headers": {"location": "https://evil.example/"}},
            "status_302",
        ),
        ({"body": b"bad key"}, "not_a_key"),
    ],
)
async def test_what_is_not_a_key_is_unavailable(
    server: KeyServer, route: dict[str, object], reason: str
) -> None:
    server.serve(URL, **route)  # type: ignore[arg-type]
    fetcher = KeyFetcher(max_bytes=4096)
    try:
        with pytest.raises(KeyUnavailable) as info:
            await fetch(fetcher)
    finally:
        await fetcher.close()
    assert info.value.reason == reason


async def test_one_deadline_for_the_whole_exchange(server: KeyServer) -> None:
    server.serve(URL, b"jwks", delay_s=2.0)
    fetcher = KeyFetcher(timeout_s=0.3)
    try:
        with pytest.raises(KeyUnavailable) as info:
            await fetch(fetcher)
    finally:
        await fetcher.close()
    assert info.value.reason in ("timeout", "ReadTimeout")


async def test_a_failure_is_remembered_briefly_then_retried(server: KeyServer) -> None:
    server.serve(URL, b"down", status=503)
    clock = Clock()
    fetcher = KeyFetcher(clock=clock, failure_ttl_s=5.0)
    try:
        for _ in range(3):
            with pytest.raises(KeyUnavailable):
                await fetch(fetcher)
        assert server.count(URL) == 1
        server.serve(URL, b"jwks")
        clock.now += 5.1
        assert await fetch(fetcher) == b"jwks"
    finally:
        await fetcher.close()
    assert server.count(URL) == 2


async def test_a_host_that_is_not_the_one_certified_is_refused(server: KeyServer) -> None:
    """TLS is verified: the test CA's certificate names the key hosts, not this one."""
    fetcher = KeyFetcher()
    try:
        with pytest.raises(KeyUnavailable):
            await fetch(fetcher, "https://keys.unlisted.example/jwks")
    finally:
        await fetcher.close()
