"""Issue 7, items 7 to 9: Redis lost, PostgreSQL restarted, network faults between hookd
and both. Each scenario of ``chaos/`` runs with its CI counts, every check asserted, plus
figures showing the fault really happened. Then what those scenarios found, pinned down on
its own: arq's Redis calls and the receiver's commit on a connection that never answers,
and a worker that did not stop while sweeping without Redis."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis.exceptions

from chaos import netfaults, pg_restart, redis_loss
from chaos.proxy import FaultProxy
from hookd.runtime import worker
from hookd.runtime.sqlite_writer import inserter_for
from hookd.settings import Settings
from ingest.batcher import GroupCommitter, StoreUnavailable
from store.crypto import BodyCipher
from tests.support import services
from tests.support.data import new_event, scalar

# Each runs a fault scenario against private servers (a PostgreSQL cluster of its own
# included); beside other test processes that takes longer than one test's usual bound.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(360)]


def failed(figures: dict[str, Any]) -> list[str]:
    return [name for name, ok in figures["checks"].items() if not ok]


@pytest.fixture
def postgres() -> None:
    """The shared PostgreSQL answers (checked outside the test's event loop)."""
    services.require_pg()


@pytest.fixture
def pg_binaries(postgres: None) -> None:
    """initdb and pg_ctl for a private server that can be crashed."""
    from chaos.pgcluster import _bindir

    try:
        _bindir()
    except RuntimeError as exc:
        if services.in_ci():
            pytest.fail(f"{exc} (CI=true: they must be)")
        pytest.skip(str(exc))


async def test_redis_flushed_and_restarted_empty_loses_nothing_and_runs_nothing_twice(
    postgres: None,
) -> None:
    figures = await redis_loss.run(**redis_loss.QUICK)
    assert not failed(figures), (failed(figures), figures)
    events = redis_loss.QUICK["events"]
    assert [f["fault"] for f in figures["faults"]] == ["flush", "flush", "restart", "stop"]
    assert all(f["stored"] < events for f in figures["faults"]), "a fault came after the burst"
    assert figures["faults"][0]["unprocessed"] > 0, "the first flush found nothing to lose"
    assert figures["worker_redis_losses_logged"] > 0, "no worker noticed Redis going away"
    assert figures["calls"] == figures["effects"] == events


async def test_postgres_crash_mid_burst_answers_503_and_recovers_without_restart(
    pg_binaries: None,
) -> None:
    figures = await pg_restart.run(**pg_restart.QUICK)
    assert not failed(figures), (failed(figures), figures)
    (crash,) = figures["rounds"]
    assert crash["mode"] == "immediate"
    assert 0 < crash["stored_before_stop"] < crash["deliveries"], "the crash missed the burst"
    assert crash["503_while_down"] > 0
    assert crash["2xx_while_down"] == 0
    assert crash["attempts"] > crash["deliveries"], "nothing had to be retried"
    assert crash["first_2xx_after_up_s"] is not None
    assert figures["effects"] == figures["events"]


async def test_latency_resets_and_stalls_on_postgres_and_redis_leave_one_effect_each(
    postgres: None,
) -> None:
    figures = await netfaults.run(**netfaults.QUICK)
    assert not failed(figures), (failed(figures), figures)
    by_phase = {p["phase"]: p for p in figures["phases"]}
    for side in ("pg", "redis"):
        assert by_phase["resets"][side]["resets"] > 0, side
        assert by_phase["stalls"][side]["stalls"] > 0, side
    assert by_phase["latency"]["pg"]["resets"] == by_phase["latency"]["pg"]["stalls"] == 0
    assert figures["processed"] == figures["effects"] == netfaults.QUICK["events"]
    assert figures["dead"] == 0


# Regressions for what the scenarios found.


@contextlib.asynccontextmanager
async def black_hole() -> AsyncIterator[int]:
    """A TCP server that accepts connections and reads, but never answers."""
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_the_workers_arq_loop_gives_up_on_a_redis_that_never_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """arq sets no read timeout: without one, a stalled Redis connection hung the worker's
    arq loop (wake-ups, sweeps, everything) forever, instead of handing over to the local
    sweep."""
    monkeypatch.setattr(worker, "REDIS_TIMEOUT_S", 0.5)
    async with black_hole() as port:
        settings = Settings(redis_url=f"redis://127.0.0.1:{port}/0", reconcile_schedule=False)
        runtime: Any = SimpleNamespace(settings=settings)
        arq = worker.arq_worker(runtime)
        started = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            async with asyncio.timeout(10):
                await arq.main()
        assert time.monotonic() - started < 5
        async with asyncio.timeout(10):
            await worker._close(arq)


async def test_a_commit_on_a_stalled_connection_fails_at_the_commit_timeout(
    pg_url: str,
) -> None:
    """The receiver's insert was cut off at commit_timeout_s, but asyncpg then waited up to
    command_timeout (30 s) for the server to confirm a cancel before handing the connection
    back: the 503 came 30 s late and the committer was blocked meanwhile."""
    host_port = pg_url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    async with FaultProxy(host, int(port)) as proxy:
        url = pg_url.replace(host_port, f"127.0.0.1:{proxy.port}")
        inserter = inserter_for(url, BodyCipher(""), committers=1, timeout_s=2)
        committer = GroupCommitter(inserter, commit_timeout_s=1.0)
        await committer.start()
        try:
            await committer.submit(new_event("before"))
            proxy.faults.stall_p = 1.0
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await committer.submit(new_event("stalled"))
            assert time.monotonic() - started < 3
            proxy.faults.stall_p = 0.0
            stored = await committer.submit(new_event("after"))
            assert stored.created
            assert proxy.stats.stalls >= 1
        finally:
            await committer.stop()
            await inserter.close()
    assert await scalar(pg_url, "SELECT count(*) FROM events WHERE dedupe_key = 'after'") == 1


async def test_a_stop_ends_the_workers_local_sweep_at_once() -> None:
    """With Redis away the worker sweeps the database for up to 30 s at a time; a SIGTERM
    waited for the end of that period (and got a SIGKILL from a 15 s grace period)."""
    cancelled = asyncio.Event()

    async def drain(_max_s: float = 30.0) -> int:
        try:
            await asyncio.sleep(60)  # a long batch in hand
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 0

    runtime: Any = SimpleNamespace(
        processor=SimpleNamespace(drain=drain), settings=SimpleNamespace(sweep_s=1.0)
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, stop.set)
    started = time.monotonic()
    async with asyncio.timeout(10):
        await worker._local_sweep(runtime, 30.0, stop)
    assert time.monotonic() - started < 1.5
    assert cancelled.is_set(), "the batch in hand was not handed back"
