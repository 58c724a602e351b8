"""Insert as claimed, with real parts: the receiver's group commit and inserter (SQLite's
writer process, or PostgreSQL's statement), a real Unix stream socket, and a processor
on the same database.

- New events are committed already leased to the processor (processing, attempt 1, its
  owner) and run from the rows handed over: no claim takes any of them, and no wake-up
  is sent for them.
- A processor that says it is full gets nothing more: the receiver commits pending and
  wakes it, as before, and every event is still processed once.
- Rows handed to a processor that died are taken over when their lease expires.
- Frames carry every column a claim would have returned, bodies byte for byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.event import Event
from hookd.runtime import sqlite_writer
from ingest.batcher import GroupCommitter
from processing import handoff as handoff_module
from processing.attempt import RetryPolicy
from processing.handoff import HandoffClient, HandoffServer, decode, encode, handoff_path
from processing.processor import Processor
from processing.wakeups import InProcessConsumer
from store.claims import claiming
from store.crypto import BodyCipher
from store.delivery.destinations import WHOLE_SOURCE, set_pause
from store.intake import sqlite_write
from store.intake.events import Lease, prepare
from store.models import EVENTS
from store.rows import EventRow
from tests.support.in_process import STRIPE_SOURCE, count_status, mixed, parse
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio]


class Seen:
    """The handler: every event it ran, and a gate it waits at while closed."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, event: Event) -> None:
        await self.gate.wait()
        self.ids.append(event.id)


def processor(engine: AsyncEngine, seen: Seen, *, lease_s: float = 30.0, **kw: Any) -> Processor:
    return Processor(
        engine,
        parse(STRIPE_SOURCE),
        {"stripe": [("seen", seen)]},
        BodyCipher(""),
        lease_s=lease_s,
        retry=RetryPolicy(base_s=0.01, cap_s=0.05),
        **kw,
    )


class Claims:
    """Rows every claim of the processors returned (``claiming.claim_due`` and
    ``claiming.claim_expired``), by event id."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.due: list[str] = []
        self.expired: list[str] = []
        due, expired = claiming.claim_due, claiming.claim_expired

        async def claim_due(*a: Any, **kw: Any) -> list[EventRow]:
            rows = await due(*a, **kw)
            self.due += [r.id for r in rows]
            return rows

        async def claim_expired(*a: Any, **kw: Any) -> list[EventRow]:
            rows = await expired(*a, **kw)
            self.expired += [r.id for r in rows]
            return rows

        monkeypatch.setattr(claiming, "claim_due", claim_due)
        monkeypatch.setattr(claiming, "claim_expired", claim_expired)


async def connected(client: HandoffClient) -> None:
    await wait_for(lambda: client.targets, timeout_s=10, message="never connected")


@pytest.fixture
def socket_path(tmp_path: Path) -> str:
    return str(tmp_path / "p0.sock")


async def handing_to(proc: Processor, socket_path: str) -> tuple[HandoffServer, HandoffClient]:
    """A processor's hand-off server on ``socket_path`` (30 s leases), started, and a
    receiver's client of it."""
    server = HandoffServer(
        handoff_path(socket_path),
        owners=[proc.owner],
        lease_s=30.0,
        accept=proc.accept,
        room=proc.has_room,
    )
    await server.start()
    client = HandoffClient([socket_path])
    await client.start()
    return server, client


async def test_new_events_are_committed_leased_and_run_from_the_handed_rows_with_no_claim(
    engine: AsyncEngine, db_url: str, socket_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed = Claims(monkeypatch)
    seen = Seen()
    proc = processor(engine, seen, concurrency=8, batch_size=16)
    server, client = await handing_to(proc, socket_path)
    woken: list[str] = []

    async def on_commit(ids: Sequence[str]) -> None:
        woken.extend(ids)

    inserter = sqlite_writer.inserter_for(
        db_url, BodyCipher(""), committers=1, timeout_s=10, sqlite_process=True
    )
    committer = GroupCommitter(inserter, on_commit=on_commit, handoff=client)
    await inserter.start()
    await committer.start()
    try:
        await connected(client)
        # Held at the handler: the first events are in the database as the processor's.
        seen.gate.clear()
        first = await asyncio.gather(*(committer.submit(e) for e in mixed(5, "held")))
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(EVENTS.c.status, EVENTS.c.attempts, EVENTS.c.lease_owner).where(
                        EVENTS.c.id.in_([s.event_id for s in first])
                    )
                )
            ).all()
        assert sorted(rows) == [("processing", 1, proc.owner)] * 5
        seen.gate.set()
        stored = await asyncio.gather(*(committer.submit(e) for e in mixed(300)))
        ids = {s.event_id for s in [*first, *stored]}
        await wait_for(
            lambda: count_status(engine, "processed"), timeout_s=30, message="not processed"
        )
        await wait_for(
            lambda: len(set(seen.ids)) == len(ids), timeout_s=30, message=lambda: seen.ids
        )
        await wait_for(
            _all_processed(engine, len(ids)), timeout_s=30, message="outcomes not written"
        )
        assert sorted(seen.ids) == sorted(ids)  # each once
        assert client.targets[0].handed == len(ids)
        assert woken == []  # nothing was left pending to wake anyone for
        assert claimed.due == [] and claimed.expired == []
        async with engine.connect() as conn:
            attempts = (await conn.execute(sa.select(sa.func.max(EVENTS.c.attempts)))).scalar_one()
        assert attempts == 1
    finally:
        await committer.stop()
        await inserter.close()
        await client.close()
        await server.close()
        await proc.drain(max_s=1)


def _all_processed(engine: AsyncEngine, n: int) -> Any:
    async def check() -> bool:
        return await count_status(engine, "processed") == n

    return check


async def test_a_full_processor_gets_nothing_more_and_the_rest_is_committed_pending(
    engine: AsyncEngine, db_url: str, socket_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed = Claims(monkeypatch)
    seen = Seen()
    proc = processor(engine, seen, concurrency=1, batch_size=1)  # room for 3 at most
    server, client = await handing_to(proc, socket_path)
    woken: list[str] = []
    # What wakes the processor for events committed pending, as in a processor process.
    consumer = InProcessConsumer(proc, sweep_s=30)
    await consumer.start()

    async def on_commit(ids: Sequence[str]) -> None:
        woken.extend(ids)
        consumer.wake()

    inserter = sqlite_writer.inserter_for(
        db_url, BodyCipher(""), committers=1, timeout_s=10, sqlite_process=False
    )
    committer = GroupCommitter(inserter, on_commit=on_commit, handoff=client)
    await inserter.start()
    await committer.start()
    try:
        await connected(client)
        seen.gate.clear()
        events = mixed(40)
        ids: list[str] = []
        for event in events:  # one batch each, time for the processor to say it is full
            ids.append((await committer.submit(event)).event_id)
            await asyncio.sleep(0.02)
        target = client.targets[0]
        assert 3 <= target.handed < len(events)
        assert len(woken) == len(events) - target.handed
        assert await count_status(engine, "pending") == len(woken)
        seen.gate.set()
        # The pending ones: claimed when their wake-up came, as before.
        await wait_for(_all_processed(engine, len(events)), timeout_s=30, message="stuck")
        assert sorted(seen.ids) == sorted(ids)
        assert sorted(claimed.due) == sorted(woken)
    finally:
        await committer.stop()
        await inserter.close()
        await client.close()
        await server.close()
        await consumer.stop(1)


async def test_rows_handed_to_a_processor_that_died_are_taken_over_when_their_lease_expires(
    engine: AsyncEngine, db_url: str, socket_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed = Claims(monkeypatch)
    lost: list[EventRow] = []
    # A processor process that took the rows and died before it ran them.
    server = HandoffServer(
        handoff_path(socket_path),
        owners=["gone-1"],
        lease_s=1.0,
        accept=lost.extend,
        room=lambda: True,
    )
    await server.start()
    client = HandoffClient([socket_path])
    await client.start()
    inserter = sqlite_writer.inserter_for(
        db_url, BodyCipher(""), committers=1, timeout_s=10, sqlite_process=False
    )
    committer = GroupCommitter(inserter, handoff=client)
    await inserter.start()
    await committer.start()
    try:
        await connected(client)
        stored = await asyncio.gather(*(committer.submit(e) for e in mixed(20)))
        await wait_for(lambda: len(lost) == 20, timeout_s=10, message="not handed")
    finally:
        await committer.stop()
        await inserter.close()
        await client.close()
        await server.close()
    seen = Seen()
    heir = processor(engine, seen)
    await asyncio.sleep(1.1)

    async def taken_over() -> bool:
        await heir.drain(max_s=1)
        return await count_status(engine, "processed") == 20

    await wait_for(taken_over, timeout_s=30, interval_s=0.2, message="not taken over")
    assert sorted(claimed.expired) == sorted(s.event_id for s in stored)
    assert sorted(seen.ids) == sorted(s.event_id for s in stored)
    assert await count_status(engine, "processed") == 20


def test_a_frame_carries_what_a_claim_would_return() -> None:
    events = mixed(3)
    now = datetime.now(UTC)
    lease = Lease("owner-1", now + timedelta(seconds=30))
    batch = prepare(events, BodyCipher(""), lease)
    batch.rows[0]["body"] = bytes(range(256)) * 4096  # 1 MiB, not UTF-8: a frame alone
    batch.rows[1]["headers"] = {"x-name": "ünïcode ✓", "x-empty": ""}
    frames = encode(batch.rows)
    assert len(frames) == 2
    rows = [row for frame in frames for row in decode(frame[4:])]
    assert [r.id for r in rows] == [r["id"] for r in batch.rows]
    for got, sent in zip(rows, batch.rows, strict=True):
        assert got.body == sent["body"]
        assert got.headers == sent["headers"]
        assert (got.status, got.attempts, got.lease_owner) == ("processing", 1, "owner-1")
        assert got.lease_expires_at == lease.expires_at
        assert got.received_at == sent["received_at"]
        assert got.received_at.tzinfo is not None
        assert (got.source, got.dedupe_key, got.type) == (
            sent["source"],
            sent["dedupe_key"],
            sent["type"],
        )
    with pytest.raises(ValueError, match="length"):
        decode(frames[1][4:] + b"x")
    assert handoff_module.parse_hello(b"hookd-handoff 1 30.0 a,b\n") == (["a", "b"], 30.0)
    with pytest.raises(ValueError):
        handoff_module.parse_hello(b"HTTP/1.1 400 Bad Request\r\n")


def test_the_writer_knows_the_whole_source_pause_as_the_store_writes_it() -> None:
    assert sqlite_write.WHOLE_SOURCE == WHOLE_SOURCE


async def test_a_paused_source_is_never_handed_over_its_events_stay_pending(
    engine: AsyncEngine, db_url: str, socket_path: str
) -> None:
    """A pause committed before the insert: the insert leaves that source's events pending
    (as a claim would), hands over only the others, and tells which."""
    async with engine.begin() as conn:
        await set_pause(
            conn, "other", WHOLE_SOURCE, paused=True, by="test", reason=None, now=datetime.now(UTC)
        )
    cipher = BodyCipher("")
    inserter = sqlite_writer.inserter_for(
        db_url, cipher, committers=1, timeout_s=10, sqlite_process=True
    )
    await inserter.start()
    try:
        events = mixed(6)
        events = [replace(e, source="other") if i % 2 else e for i, e in enumerate(events)]
        lease = Lease("owner-1", datetime.now(UTC) + timedelta(seconds=30))
        stored = await inserter.insert(events, lease)
    finally:
        await inserter.close()
    handed = {s.event_id for s in stored if s.row is not None}
    async with engine.connect() as conn:
        rows = {
            r.id: (r.source, r.status, r.attempts, r.lease_owner)
            for r in await conn.execute(sa.select(EVENTS))
        }
    assert len(rows) == 6
    for event_id, (source, status, attempts, owner) in rows.items():
        if source == "other":
            assert (status, attempts, owner) == ("pending", 0, None)
            assert event_id not in handed
        else:
            assert (status, attempts, owner) == ("processing", 1, "owner-1")
            assert event_id in handed
