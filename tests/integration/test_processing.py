"""The processor on SQLite and PostgreSQL: claims, ledger, retries, dead letters, replay."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import PermanentError
from hookd.event import Event, Handler
from hookd.sources import Sources
from processing.attempt import RetryPolicy
from processing.processor import Processor
from processing.running import UNDECRYPTABLE
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS
from tests.support.data import new_event
from tests.support.logcapture import Records, captured
from tests.support.waiting import wait_for

# A claim as a lone claimer makes it: events of github, up to 10.
GITHUB = claiming.alone(["github"], 10)

pytestmark = pytest.mark.anyio
FAST = RetryPolicy(base_s=0.01, cap_s=0.05)


async def store(engine: AsyncEngine, count: int, source: str = "github") -> list[str]:
    events = [new_event(f"d-{i}", source, b'{"n": %d}' % i) for i in range(count)]
    async with engine.begin() as conn:
        return [s.event_id for s in await insert_events(conn, events, BodyCipher(""))]


def processor(
    engine: AsyncEngine, sources: Sources, chain: list[tuple[str, Handler]], **kw: object
) -> Processor:
    return Processor(
        engine,
        sources,
        {"github": chain},
        BodyCipher(""),
        retry=FAST,
        rng=random.Random(7),
        **kw,  # type: ignore[arg-type]
    )


async def run_until_done(proc: Processor, ids: list[str], engine: AsyncEngine) -> dict[str, str]:
    """Drain until every event is processed or dead: their statuses."""

    async def done() -> dict[str, str]:
        await proc.drain()
        states = await statuses(engine, ids)
        return states if all(s in ("processed", "dead") for s in states.values()) else {}

    async def not_done() -> str:
        return f"not done: {await statuses(engine, ids)}"

    # 8 s: the 400 pauses of 0.02 s this loop was written with; each drain takes far less.
    return await wait_for(done, timeout_s=8, interval_s=0.02, message=not_done)


async def statuses(engine: AsyncEngine, ids: list[str]) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.id, EVENTS.c.status).where(EVENTS.c.id.in_(ids))
        )
        return {r.id: r.status for r in rows}


async def row(engine: AsyncEngine, event_id: str) -> sa.Row:  # type: ignore[type-arg]
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(EVENTS).where(EVENTS.c.id == event_id))).one()


async def test_every_event_runs_each_handler_once(engine: AsyncEngine, sources: Sources) -> None:
    seen: list[tuple[str, str]] = []

    async def a(event: Event) -> None:
        seen.append(("a", event.id))
        assert event.json()["n"] >= 0
        assert event.idempotency_key.startswith("hookd_")

    ids = await store(engine, 150)
    proc = processor(engine, sources, [("a", a)], batch_size=40)
    states = await run_until_done(proc, ids, engine)
    assert set(states.values()) == {"processed"}
    assert sorted(seen) == sorted(("a", i) for i in ids)


async def test_flaky_handler_is_processed_on_the_third_attempt(
    engine: AsyncEngine, sources: Sources
) -> None:
    calls: dict[str, int] = {}
    keys: set[str] = set()

    async def flaky(event: Event) -> None:
        calls[event.id] = calls.get(event.id, 0) + 1
        keys.add(event.idempotency_key)
        if calls[event.id] < 3:
            raise RuntimeError("not yet")

    [event_id] = await store(engine, 1)
    states = await run_until_done(
        processor(engine, sources, [("flaky", flaky)]), [event_id], engine
    )
    assert states == {event_id: "processed"}
    final = await row(engine, event_id)
    assert final.attempts == 3
    assert final.processed_at is not None
    assert final.last_error is None
    assert len(keys) == 1, "the idempotency key is stable across attempts"


async def test_finished_handler_is_not_rerun_when_a_later_one_retries(
    engine: AsyncEngine, sources: Sources
) -> None:
    runs = {"first": 0, "second": 0}

    async def first(_: Event) -> None:
        runs["first"] += 1

    async def second(_: Event) -> None:
        runs["second"] += 1
        if runs["second"] < 4:
            raise RuntimeError("downstream busy")

    [event_id] = await store(engine, 1)
    chain = [("first", first), ("second", second)]
    await run_until_done(processor(engine, sources, chain), [event_id], engine)
    assert runs == {"first": 1, "second": 4}


async def test_always_failing_handler_goes_dead_then_replay_after_fix_processes(
    engine: AsyncEngine, sources: Sources
) -> None:
    broken = True

    async def until_fixed(_: Event) -> None:
        if broken:
            raise RuntimeError("downstream is broken")

    [event_id] = await store(engine, 1)
    proc = processor(engine, sources, [("h", until_fixed)])
    assert await run_until_done(proc, [event_id], engine) == {event_id: "dead"}
    dead = await row(engine, event_id)
    assert dead.attempts == 8  # the source's default max_attempts
    assert "downstream is broken" in dead.last_error

    broken = False
    async with engine.begin() as conn:
        assert await claiming.replay(conn, [event_id], datetime.now(UTC)) == [event_id]
    replayed = await row(engine, event_id)
    assert (replayed.status, replayed.attempts, replayed.origin) == ("pending", 0, "webhook")
    assert await run_until_done(proc, [event_id], engine) == {event_id: "processed"}
    assert (await row(engine, event_id)).attempts == 1
    async with engine.connect() as conn:
        count = (await conn.execute(sa.select(sa.func.count()).select_from(EVENTS))).scalar()
    assert count == 1, "replay reuses the row"


async def test_permanent_error_goes_dead_at_once(engine: AsyncEngine, sources: Sources) -> None:
    async def refuse(_: Event) -> None:
        raise PermanentError("forward_rejected", "target answered 404")

    [event_id] = await store(engine, 1)
    assert await run_until_done(
        processor(engine, sources, [("f", refuse)]), [event_id], engine
    ) == {event_id: "dead"}
    assert (await row(engine, event_id)).attempts == 1


async def test_handler_timeout_counts_as_failure(engine: AsyncEngine, sources: Sources) -> None:
    async def slow(_: Event) -> None:
        await asyncio.sleep(5)

    [event_id] = await store(engine, 1)
    proc = processor(engine, sources, [("slow", slow)], handler_timeout_s=0.05)
    await proc.run_once()
    failed = await row(engine, event_id)
    assert failed.status == "retrying"
    assert "TimeoutError" in failed.last_error


async def test_two_processors_never_run_one_event_at_once(
    engine: AsyncEngine, sources: Sources
) -> None:
    running: set[str] = set()
    runs: dict[str, int] = {}

    async def exclusive(event: Event) -> None:
        assert event.id not in running, "two workers ran one event at once"
        running.add(event.id)
        await asyncio.sleep(0.005)
        running.discard(event.id)
        runs[event.id] = runs.get(event.id, 0) + 1

    ids = await store(engine, 200)
    procs = [processor(engine, sources, [("x", exclusive)], batch_size=16) for _ in range(3)]
    await asyncio.gather(*(p.drain() for p in procs))
    await run_until_done(procs[0], ids, engine)
    assert runs == dict.fromkeys(ids, 1)


async def test_expired_lease_is_taken_over_and_old_owner_is_fenced(
    engine: AsyncEngine, sources: Sources
) -> None:
    [event_id] = await store(engine, 1)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        first = await claiming.claim_due(conn, "crashed-worker", 0.5, 10, now, shares=GITHUB)
    assert [r.id for r in first] == [event_id]
    async with engine.begin() as conn:
        assert (
            await claiming.claim_expired(conn, "other", 60, 10, now + timedelta(seconds=0.1)) == []
        )
        second = await claiming.claim_expired(conn, "other", 60, 10, now + timedelta(seconds=1))
    assert [(r.id, r.attempts) for r in second] == [(event_id, 2)]
    async with engine.begin() as conn:
        stale = await claiming.mark_processed(conn, [event_id], "crashed-worker", now)
        fresh = await claiming.mark_processed(conn, [event_id], "other", now)
    assert (stale, fresh) == (set(), {event_id})


async def test_a_takeover_spares_the_events_whose_outcome_its_claimer_writes_next(
    engine: AsyncEngine,
) -> None:
    """PostgreSQL's exchange claims before it writes its window's outcomes: an event of
    that window whose lease ran out is not taken over by the same claim."""
    ids = await store(engine, 2)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await claiming.claim_due(conn, "me", 0.5, 10, now, shares=GITHUB)
    later = now + timedelta(seconds=1)
    async with engine.begin() as conn:
        taken = await claiming.claim_expired(conn, "me", 60, 10, later, spare=[ids[0]])
    assert [r.id for r in taken] == [ids[1]]


async def test_retry_waits_for_its_backoff(engine: AsyncEngine, sources: Sources) -> None:
    async def fail(_: Event) -> None:
        raise RuntimeError("x")

    [event_id] = await store(engine, 1)
    proc = Processor(
        engine, sources, {"github": [("f", fail)]}, BodyCipher(""), retry=RetryPolicy(30, 60)
    )
    await proc.run_once()
    assert await proc.run_once() == 0, "not due again before its backoff"
    retrying = await row(engine, event_id)
    assert retrying.status == "retrying"
    assert retrying.next_attempt_at > datetime.now(UTC)


def test_backoff_is_full_jitter_under_a_growing_capped_ceiling() -> None:
    policy = RetryPolicy(base_s=1, cap_s=60)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (50, 60)]:
        delays = [policy.delay_s(attempt, rng) for _ in range(300)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.9, "jitter spans the whole window"
        assert min(delays) < ceiling * 0.1


async def test_cancelled_pass_gives_its_claims_back(engine: AsyncEngine, sources: Sources) -> None:
    """A worker shutting down mid-handler releases the event instead of waiting out the lease."""
    started = asyncio.Event()

    async def slow(_: Event) -> None:
        started.set()
        await asyncio.sleep(30)

    [event_id] = await store(engine, 1)
    proc = processor(engine, sources, [("slow", slow)], lease_s=600)
    task = asyncio.create_task(proc.run_once())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    released = await row(engine, event_id)
    assert released.status == "retrying"
    assert released.lease_owner is None
    assert released.next_attempt_at <= datetime.now(UTC)
    assert released.attempts == 0, "a pass cut short by a shutdown is not an attempt"


@pytest.fixture
def processing_log() -> Iterator[Records]:
    with captured("hookd.processing") as records:
        yield records


@pytest.mark.parametrize("configured", ["other key", "no key"])
async def test_body_no_configured_key_opens_goes_dead_at_once_and_replays_with_the_key(
    engine: AsyncEngine, sources: Sources, processing_log: Records, configured: str
) -> None:
    """After a rotation the worker missed: dead with the reason, not ``processing`` for ever."""
    key_a, key_b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    async with engine.begin() as conn:
        [stored] = await insert_events(
            conn, [new_event("sealed", body=b'{"n": 1}')], BodyCipher(key_a)
        )
    event_id = stored.event_id
    seen: list[bytes] = []

    async def handler(event: Event) -> None:
        seen.append(event.body)

    def with_keys(keys: str) -> Processor:
        return Processor(
            engine,
            sources,
            {"github": [("h", handler)]},
            BodyCipher(keys),
            retry=FAST,
            rng=random.Random(7),
        )

    wrong = with_keys(key_b if configured == "other key" else "")
    assert await run_until_done(wrong, [event_id], engine) == {event_id: "dead"}
    dead = await row(engine, event_id)
    assert dead.attempts == 1, "retrying cannot open it: dead at the first attempt"
    assert dead.last_error == UNDECRYPTABLE
    assert "HOOKD_ENCRYPTION_KEYS" in dead.last_error
    assert (dead.last_error_handler, dead.last_error_type) == (None, "ConfigError")
    assert dead.lease_owner is None
    assert seen == []
    [record] = processing_log.about(event_id)
    assert record.getMessage() == "processing failed"
    assert (record.__dict__["error_type"], record.__dict__["outcome"]) == ("ConfigError", "dead")

    # The key back in the set, then a replay: processed, on the same row.
    async with engine.begin() as conn:
        assert await claiming.replay(conn, [event_id], datetime.now(UTC)) == [event_id]
    fixed = with_keys(f"{key_b},{key_a}")
    assert await run_until_done(fixed, [event_id], engine) == {event_id: "processed"}
    assert seen == [b'{"n": 1}']
    done = await row(engine, event_id)
    assert (done.attempts, done.last_error, done.last_error_type) == (1, None, None)


class BrokenCipher(BodyCipher):
    """Fails while the Event is built, with the body in its message."""

    def open(self, body: bytes, encrypted: bool) -> bytes:
        raise RuntimeError(body.decode())


async def test_failure_outside_the_handlers_is_an_attempt_and_ends_dead(
    engine: AsyncEngine, sources: Sources
) -> None:
    calls = 0

    async def handler(_: Event) -> None:
        nonlocal calls
        calls += 1

    async with engine.begin() as conn:
        [stored] = await insert_events(
            conn, [new_event("broken", body=b"secret-payload")], BodyCipher("")
        )
    proc = Processor(
        engine,
        sources,
        {"github": [("h", handler)]},
        BrokenCipher(""),
        retry=FAST,
        rng=random.Random(7),
    )
    await proc.run_once()
    retrying = await row(engine, stored.event_id)
    assert (retrying.status, retrying.attempts) == ("retrying", 1)
    assert retrying.last_error == "processing failed before the handlers ran: RuntimeError"
    assert (retrying.last_error_handler, retrying.last_error_type) == (None, "RuntimeError")

    assert await run_until_done(proc, [stored.event_id], engine) == {stored.event_id: "dead"}
    dead = await row(engine, stored.event_id)
    assert dead.attempts == 8  # the source's default max_attempts, and no more
    assert "secret-payload" not in dead.last_error
    assert calls == 0


async def test_event_claimed_past_its_last_attempt_goes_dead_without_running(
    engine: AsyncEngine, sources: Sources
) -> None:
    """A last attempt whose worker died mid-handler: its expired lease is taken over
    once more, and that claim buries it instead of running the handler a ninth time."""
    calls = 0

    async def handler(_: Event) -> None:
        nonlocal calls
        calls += 1

    [event_id] = await store(engine, 1)
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(EVENTS)
            .where(EVENTS.c.id == event_id)
            .values(
                status="processing",
                attempts=8,
                lease_owner="crashed-worker",
                lease_expires_at=datetime.now(UTC) - timedelta(seconds=1),
            )
        )
    proc = processor(engine, sources, [("h", handler)])
    assert await proc.run_once() == 1
    dead = await row(engine, event_id)
    assert (dead.status, dead.attempts, calls) == ("dead", 9, 0)
    assert "past max_attempts (8)" in dead.last_error
