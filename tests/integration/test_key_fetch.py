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


# --- a forced fetch (a key the kept ones lack) ------------------------------------------------


async def test_refresh_fetches_again_at_most_once_per_interval(server: KeyServer) -> None:
    server.serve(URL, b"jwks-1", headers={"cache-control": "max-age=21600"})
    clock = Clock()
    fetcher = KeyFetcher(clock=clock, refresh_interval_s=60.0)
    try:
        assert await fetch(fetcher) == b"jwks-1"
        server.serve(URL, b"jwks-2", headers={"cache-control": "max-age=21600"})
        # Fetched a moment ago: as fresh as it may be, not fetched again.
        clock.now += 59
        assert await fetcher.refresh(URL, parse, 300.0) is None
        assert server.count(URL) == 1
        clock.now += 1
        assert await fetcher.refresh(URL, parse, 300.0) == b"jwks-2"
        # What the forced fetch got is kept, for everyone.
        assert await fetch(fetcher) == b"jwks-2"
        assert server.count(URL) == 2
        server.serve(URL, b"jwks-3", headers={"cache-control": "max-age=21600"})
        for _ in range(20):  # requests naming keys that do not exist
            clock.now += 2
            assert await fetcher.refresh(URL, parse, 300.0) in (None, b"jwks-3")
        # 40 s: none; then one per 60 s.
        assert server.count(URL) == 2
        clock.now += 30
        assert await fetcher.refresh(URL, parse, 300.0) == b"jwks-3"
        assert await fetcher.refresh(URL, parse, 300.0) is None
    finally:
        await fetcher.close()
    assert server.count(URL) == 3


async def test_refresh_of_keys_never_kept_is_rate_limited_too(server: KeyServer) -> None:
    """``no-store`` keys are fetched by every ``keys``; a forced fetch is still limited."""
    server.serve(URL, b"jwks", headers={"cache-control": "no-store"})
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    try:
        assert await fetcher.refresh(URL, parse, 300.0) == b"jwks"
        for _ in range(5):
            assert await fetcher.refresh(URL, parse, 300.0) is None
    finally:
        await fetcher.close()
    assert server.count(URL) == 1


async def test_refreshes_at_once_share_one_fetch(server: KeyServer) -> None:
    server.serve(URL, b"jwks-1")
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    try:
        await fetch(fetcher)
        server.serve(URL, b"jwks-2", delay_s=0.3)
        clock.now += 61
        got = await asyncio.gather(*(fetcher.refresh(URL, parse, 300.0) for _ in range(10)))
    finally:
        await fetcher.close()
    # Each waited for the one fetch under way rather than going without it.
    assert got == [b"jwks-2"] * 10
    assert server.count(URL) == 2


async def test_a_failed_refresh_keeps_the_keys_kept(server: KeyServer) -> None:
    server.serve(URL, b"jwks-1", headers={"cache-control": "max-age=3600"})
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    try:
        await fetch(fetcher)
        server.serve(URL, b"down", status=500)
        clock.now += 61
        with pytest.raises(KeyUnavailable) as info:
            await fetcher.refresh(URL, parse, 300.0)
        assert info.value.reason == "status_500"
        # The keys it had are still served, without a fetch; and no second forced one.
        assert await fetch(fetcher) == b"jwks-1"
        assert await fetcher.refresh(URL, parse, 300.0) is None
    finally:
        await fetcher.close()
    assert server.count(URL) == 2


# --- what is kept, and what may evict it -----------------------------------------------------

SNS = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{:032x}.pem"


async def test_failed_fetches_never_evict_kept_keys(server: KeyServer) -> None:
    """However many URLs fail (a sender naming certificates that do not exist), the
    keys kept for others stay, even with room for only two."""
    server.serve(URL, b"jwks")
    server.serve(SNS.format(1), b"cert-1")
    fetcher = KeyFetcher(clock=Clock(), max_entries=2)
    try:
        assert await fetch(fetcher) == b"jwks"
        assert await fetch(fetcher, SNS.format(1)) == b"cert-1"
        for n in range(100, 110):  # each answered 404 by the key host
            with pytest.raises(KeyUnavailable):
                await fetch(fetcher, SNS.format(n))
        assert await fetch(fetcher) == b"jwks"
        assert await fetch(fetcher, SNS.format(1)) == b"cert-1"
        # The failures' own map is bounded: the oldest is forgotten, so asked again.
        with pytest.raises(KeyUnavailable):
            await fetch(fetcher, SNS.format(100))
        with pytest.raises(KeyUnavailable):
            await fetch(fetcher, SNS.format(109))
    finally:
        await fetcher.close()
    assert server.count(URL) == 1
    assert server.count(SNS.format(1)) == 1
    assert server.count(SNS.format(100)) == 2
    assert server.count(SNS.format(109)) == 1


async def test_the_keys_in_use_are_the_last_evicted(server: KeyServer) -> None:
    for n in (1, 2, 3):
        server.serve(SNS.format(n), f"cert-{n}".encode())
    fetcher = KeyFetcher(clock=Clock(), max_entries=2)
    try:
        await fetch(fetcher, SNS.format(1))
        await fetch(fetcher, SNS.format(2))
        await fetch(fetcher, SNS.format(1))  # in use: kept over the second
        await fetch(fetcher, SNS.format(3))
        await fetch(fetcher, SNS.format(1))
        await fetch(fetcher, SNS.format(2))
    finally:
        await fetcher.close()
    assert [server.count(SNS.format(n)) for n in (1, 2, 3)] == [1, 2, 1]


async def test_expired_keys_are_evicted_before_keys_in_force(server: KeyServer) -> None:
    server.serve(SNS.format(1), b"cert-1", headers={"cache-control": "max-age=86400"})
    server.serve(SNS.format(2), b"cert-2", headers={"cache-control": "max-age=60"})
    server.serve(SNS.format(3), b"cert-3", headers={"cache-control": "max-age=86400"})
    clock = Clock()
    fetcher = KeyFetcher(clock=clock, max_entries=2)
    try:
        await fetch(fetcher, SNS.format(1))
        await fetch(fetcher, SNS.format(2))  # the most recent, but it expires first
        clock.now += 61
        await fetch(fetcher, SNS.format(3))
        await fetch(fetcher, SNS.format(1))
    finally:
        await fetcher.close()
    assert server.count(SNS.format(1)) == 1
