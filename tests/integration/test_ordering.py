"""Per-object ordering ([sources.order]) in the processor, on SQLite and PostgreSQL:
one object's handlers one at a time, lowest version first; an event older than the
one processed for its object is superseded (not run) unless ``stale = "run"``; the
object's latest known state. Real databases, in-process processors (two at once
where it matters); ``test_ordering_workers`` does it with ``hookd worker`` processes."""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hookd.event import Event
from hookd.ops import EventOps, prune_sources
from hookd.sources import Sources, parse_sources
from processing.attempt import RetryPolicy
from processing.processor import Processor
from reconcile.objects import ObjectFetcher
from store.claims import claiming
from store.crypto import BodyCipher
from store.delivery import destinations, objects
from store.intake.events import NewEvent, get_event, get_tombstone, insert_events
from store.models import EVENTS
from tests.support.constants import STRIPE_SECRET
from tests.support.data import engine_of
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio

SOURCES = f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
[sources.order]
key = "data.object.id"
version = "created"

[[sources]]
name = "late"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
[sources.order]
key = "data.object.id"
version = "created"
stale = "run"
"""


@pytest.fixture
def ordered(tmp_path: Path) -> Sources:
    return parse_sources(SOURCES, tmp_path / "hookd.toml", env={})


class Seen:
    """A handler that records, per object, the versions it ran for, and whether two
    runs of one object ever overlapped."""

    def __init__(self) -> None:
        self.versions: dict[str, list[float]] = defaultdict(list)
        self.ids: list[str] = []
        self.running: set[str] = set()
        self.overlaps: list[str] = []

    async def __call__(self, event: Event) -> None:
        key = event.object_key
        assert key is not None
        if key in self.running:
            self.overlaps.append(key)
        self.running.add(key)
        try:
            await asyncio.sleep(0.002)  # room for another run of the object to start
            self.versions[key].append(float(event.json()["created"]))
            self.ids.append(event.id)
        finally:
            self.running.discard(key)


def update(sources: Sources, n: int, obj: str, version: float, source: str = "stripe") -> NewEvent:
    """A Stripe ``customer.updated`` of ``obj`` at ``version``, stamped as ingest does."""
    body = {
        "id": f"evt_{source}_{n}",
        "object": "event",
        "type": "customer.updated",
        "created": version,
        "data": {"object": {"id": obj, "object": "customer"}},
    }
    event = NewEvent(
        source=source,
        provider="stripe",
        dedupe_key=f"evt_{source}_{n}",
        type="customer.updated",
        origin="webhook",
        received_at=datetime.now(UTC),
        occurred_at=None,
        verified_with="stripe-v1;key=0",
        headers={"content-type": "application/json"},
        body=json.dumps(body).encode(),
    )
    order = sources.by_name[source].config.order
    assert order is not None
    return order.stamp(event)


async def store(engine: AsyncEngine, events: list[NewEvent]) -> list[str]:
    async with engine.begin() as conn:
        return [s.event_id for s in await insert_events(conn, events, BodyCipher(""))]


def processor(engine: AsyncEngine, sources: Sources, seen: Seen) -> Processor:
    return Processor(
        engine,
        sources,
        {"stripe": [("seen", seen)], "late": [("seen", seen)]},
        BodyCipher(""),
        retry=RetryPolicy(base_s=0.01, cap_s=0.05),
        batch_size=16,
        concurrency=16,
        rng=random.Random(7),
    )


async def statuses(engine: AsyncEngine, ids: list[str]) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(EVENTS.c.id, EVENTS.c.status).where(EVENTS.c.id.in_(ids))
        )
        return {r.id: r.status for r in rows}


async def drain_all(*procs: Processor) -> None:
    """Drain with every processor at once until none finds anything."""
    while sum(await asyncio.gather(*(p.drain() for p in procs))):
        pass


def superseded_count(source: str) -> float:
    value = REGISTRY.get_sample_value(
        "hookd_events_processed_total", {"source": source, "outcome": "superseded"}
    )
    return value or 0.0


async def test_one_objects_events_run_one_at_a_time_lowest_version_first(
    engine: AsyncEngine, ordered: Sources
) -> None:
    """Six versions of each of five objects, stored shuffled and all due at once, drained by
    two processors together: each object's handler runs in version order, never two at once."""
    rng = random.Random(19)
    updates = [(f"cus_{o}", float(1_700_000_000 + v)) for o in range(5) for v in range(6)]
    rng.shuffle(updates)
    ids = await store(engine, [update(ordered, n, o, v) for n, (o, v) in enumerate(updates)])
    seen = Seen()
    await drain_all(processor(engine, ordered, seen), processor(engine, ordered, seen))
    assert seen.overlaps == []
    for obj in {o for o, _ in updates}:
        assert seen.versions[obj] == sorted(v for o, v in updates if o == obj)
    assert set((await statuses(engine, ids)).values()) == {"processed"}


async def test_an_event_older_than_the_processed_one_is_superseded_not_run(
    engine: AsyncEngine, ordered: Sources
) -> None:
    seen = Seen()
    proc = processor(engine, ordered, seen)
    [newest] = await store(engine, [update(ordered, 1, "cus_a", 1_700_000_005)])
    await drain_all(proc)
    before = superseded_count("stripe")
    [stale] = await store(engine, [update(ordered, 2, "cus_a", 1_700_000_003)])
    await drain_all(proc)
    assert (await statuses(engine, [stale]))[stale] == "superseded"
    assert seen.ids == [newest]
    assert superseded_count("stripe") == before + 1

    async def nothing() -> None:
        return None

    shown = (await EventOps(engine, nothing).show(stale)).resource.answer()
    assert shown["done"] and [h["outcome"] for h in shown["history"]] == ["superseded"]
    async with engine.connect() as conn:
        state = await objects.get_object(conn, "stripe", "cus_a")
    assert state is not None
    assert (state.event_id, state.version, state.type) == (
        newest,
        1_700_000_005,
        "customer.updated",
    )


async def test_an_event_of_the_same_version_as_the_processed_one_runs(
    engine: AsyncEngine, ordered: Sources
) -> None:
    """Versions in whole seconds (Stripe's ``created``) make two changes in one second
    equal: the second is not older, so it runs."""
    seen = Seen()
    proc = processor(engine, ordered, seen)
    [first] = await store(engine, [update(ordered, 1, "cus_a", 1_700_000_005)])
    await drain_all(proc)
    [same] = await store(engine, [update(ordered, 2, "cus_a", 1_700_000_005)])
    await drain_all(proc)
    assert seen.ids == [first, same]
    assert (await statuses(engine, [same]))[same] == "processed"


async def test_stale_run_runs_an_older_event_and_keeps_the_newest_state(
    engine: AsyncEngine, ordered: Sources
) -> None:
    seen = Seen()
    proc = processor(engine, ordered, seen)
    [newest] = await store(engine, [update(ordered, 1, "cus_a", 1_700_000_005, "late")])
    await drain_all(proc)
    [older] = await store(engine, [update(ordered, 2, "cus_a", 1_700_000_003, "late")])
    await drain_all(proc)
    assert seen.ids == [newest, older]
    assert (await statuses(engine, [older]))[older] == "processed"
    async with engine.connect() as conn:
        state = await objects.get_object(conn, "late", "cus_a")
    assert state is not None and state.event_id == newest


async def test_a_superseded_event_can_be_replayed_and_the_newest_runs_again(
    engine: AsyncEngine, ordered: Sources
) -> None:
    """Replay takes a superseded event like a processed one; replayed with its object's
    newest event, the older one is superseded again and the newest runs once more."""
    seen = Seen()
    proc = processor(engine, ordered, seen)
    [newest] = await store(engine, [update(ordered, 1, "cus_a", 1_700_000_005)])
    await drain_all(proc)
    [stale] = await store(engine, [update(ordered, 2, "cus_a", 1_700_000_001)])
    await drain_all(proc)

    async def nothing() -> None:
        return None

    replayed = await EventOps(engine, nothing).replay_many([stale, newest])
    assert sorted(replayed.replayed) == sorted([stale, newest])
    await drain_all(proc)
    assert await statuses(engine, [stale, newest]) == {stale: "superseded", newest: "processed"}
    assert seen.ids == [newest, newest]


async def test_an_event_without_the_key_path_is_processed_without_an_object(
    engine: AsyncEngine, ordered: Sources
) -> None:
    event = update(ordered, 1, "cus_a", 1_700_000_005)
    body = json.loads(event.body)
    del body["data"]["object"]["id"]
    order = ordered.by_name["stripe"].config.order
    assert order is not None
    bare = order.stamp(_with_body(event, json.dumps(body).encode()))
    assert bare.object_key is None and bare.payload_hash is not None
    [event_id] = await store(engine, [bare])
    ran: list[str] = []

    async def handler(ev: Event) -> None:
        ran.append(ev.id)

    proc = Processor(engine, ordered, {"stripe": [("h", handler)]}, BodyCipher(""))
    await drain_all(proc)
    assert ran == [event_id]


def _with_body(event: NewEvent, body: bytes) -> NewEvent:
    return NewEvent(
        source=event.source,
        provider=event.provider,
        dedupe_key=event.dedupe_key,
        type=event.type,
        origin=event.origin,
        received_at=event.received_at,
        occurred_at=event.occurred_at,
        verified_with=event.verified_with,
        headers=event.headers,
        body=body,
    )


async def test_the_plain_claim_leaves_events_of_objects_to_the_object_claim(
    engine: AsyncEngine, ordered: Sources
) -> None:
    ids = await store(engine, [update(ordered, n, "cus_a", 1_700_000_000 + n) for n in range(3)])
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        assert (
            await claiming.claim_due(conn, "w1", 30, 10, now, shares=claiming.alone(["stripe"], 10))
            == []
        )
        got = await objects.claim(conn, "w1", 30, 10, now, supersede={"stripe"})
    assert [r.id for r in got.rows] == [ids[0]]


@pytest.mark.postgres
async def test_two_claims_at_once_never_hand_out_two_events_of_one_object(
    pg_url: str, ordered: Sources
) -> None:
    """Two workers' claims in flight together, each seeing another head of the object (one
    claims at a later ``now``, when a retrying lower version has come due): the object's
    lock lets only one of them take an event of it until the first one's claim commits."""
    async with engine_of(pg_url) as engine:
        ids = await store(
            engine, [update(ordered, n, "cus_a", 1_700_000_000 + n) for n in range(3)]
        )
        t0 = datetime.now(UTC)
        async with engine.begin() as conn:  # v0 done, v1 retrying until t0 + 60 s
            await conn.execute(
                sa.update(EVENTS).where(EVENTS.c.id == ids[0]).values(status="processed")
            )
            await conn.execute(
                sa.update(EVENTS)
                .where(EVENTS.c.id == ids[1])
                .values(status="retrying", next_attempt_at=t0 + timedelta(seconds=60))
            )
        later = t0 + timedelta(seconds=120)
        async with engine.connect() as first, engine.connect() as second:
            async with first.begin():
                one = await objects.claim(first, "w1", 300, 10, t0, supersede={"stripe"})
                assert [r.id for r in one.rows] == [ids[2]]  # v1 is not due yet for w1
                async with second.begin():  # w1 has not committed: w2 must keep off
                    two = await objects.claim(second, "w2", 300, 10, later, supersede={"stripe"})
                    assert two.rows == []
            async with second.begin():  # committed: the object is busy now
                three = await objects.claim(second, "w2", 300, 10, later, supersede={"stripe"})
                assert three.rows == []
        async with engine.begin() as conn:  # as the processor settles it
            assert await claiming.mark_processed(conn, [ids[2]], "w1", datetime.now(UTC))
            await objects.record_processed(conn, one.rows, datetime.now(UTC))
        async with engine.begin() as conn:  # v1 is older than v2, processed: superseded
            four = await objects.claim(conn, "w2", 300, 10, later, supersede={"stripe"})
        assert (four.rows, four.superseded) == ([], [(ids[1], "stripe", 0)])


@pytest.mark.postgres
async def test_a_stale_event_the_supersede_step_did_not_see_is_not_handed_out(
    pg_url: str, ordered: Sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event stored between the claim's supersede step and its pick (here: a supersede
    step that sees nothing) is older than its object's state: the pick leaves it, and the
    next claim supersedes it."""
    async with engine_of(pg_url) as engine:
        [newest] = await store(engine, [update(ordered, 1, "cus_a", 1_700_000_019)])
        now = datetime.now(UTC)
        async with engine.begin() as conn:
            got = await objects.claim(conn, "w1", 300, 10, now, supersede={"stripe"})
            assert [r.id for r in got.rows] == [newest]
            assert await claiming.mark_processed(conn, [newest], "w1", now)
            await objects.record_processed(conn, got.rows, now)
        [stale] = await store(engine, [update(ordered, 2, "cus_a", 1_700_000_011)])
        unseen = sa.text(
            "SELECT NULL::text, NULL::text WHERE CAST(:now AS timestamptz) IS NULL "
            "AND CAST(:sources AS text[]) IS NULL AND CAST(:keys AS text[]) IS NULL"
        )
        with monkeypatch.context() as patched:
            patched.setattr(objects, "SUPERSEDE_PG", unseen)
            async with engine.begin() as conn:
                missed = await objects.claim(
                    conn, "w2", 300, 10, datetime.now(UTC), supersede={"stripe"}
                )
        assert (missed.rows, missed.superseded) == ([], [])
        async with engine.begin() as conn:
            later = await objects.claim(
                conn, "w2", 300, 10, datetime.now(UTC), supersede={"stripe"}
            )
        assert (later.rows, later.superseded) == ([], [(stale, "stripe", 0)])


FETCH_TOML = """
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_x"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "sk_test_fetch"

[sources.order]
key = "related_object.id"
version = "created"
fetch = true
"""


def thin_event(n: int, obj: str) -> NewEvent:
    """A Stripe thin event (v2 event notification): the object is only named."""
    body = {
        "id": f"evt_thin_{n}",
        "object": "v2.core.event",
        "type": "v1.customer.updated",
        "created": f"2024-09-17T06:20:{n:02d}.246Z",
        "related_object": {"id": obj, "type": "customer", "url": f"/v1/customers/{obj}"},
    }
    return NewEvent(
        source="stripe",
        provider="stripe",
        dedupe_key=f"evt_thin_{n}",
        type="v1.customer.updated",
        origin="webhook",
        received_at=datetime.now(UTC),
        occurred_at=None,
        verified_with="stripe-v1;key=0",
        headers={"content-type": "application/json"},
        body=json.dumps(body).encode(),
    )


def customers_api(seen: list[str]) -> Starlette:
    """Stripe's ``GET /v1/customers/{id}``: cus_gone answers 404, the others their object."""

    async def customer(request: Request) -> JSONResponse:
        seen.append(request.headers.get("authorization", ""))
        obj = request.path_params["id"]
        if obj == "cus_gone":
            return JSONResponse({"error": {"type": "invalid_request_error"}}, status_code=404)
        return JSONResponse({"id": obj, "object": "customer", "email": f"{obj}@example.com"})

    return Starlette(routes=[Route("/v1/customers/{id}", customer)])


async def test_with_fetch_handlers_get_the_object_from_the_provider_api(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """A thin event's object is fetched with the reconcile table's token before the
    handlers run; a fetch that fails is the attempt's failure, and the handler waits."""
    asked: list[str] = []
    got: dict[str, object] = {}

    async def handler(event: Event) -> None:
        got[event.id] = event.object

    async with serve_app(customers_api(asked)) as api_url, httpx.AsyncClient() as client:
        sources = parse_sources(FETCH_TOML.format(api_url=api_url), tmp_path / "h.toml", env={})
        order = sources.by_name["stripe"].config.order
        assert order is not None
        ok, gone = await store(
            engine, [order.stamp(thin_event(1, "cus_1")), order.stamp(thin_event(2, "cus_gone"))]
        )
        proc = Processor(
            engine,
            sources,
            {"stripe": [("h", handler)]},
            BodyCipher(""),
            retry=RetryPolicy(base_s=60, cap_s=60),
            fetch=ObjectFetcher(client),
        )
        await proc.drain()
    assert got == {ok: {"id": "cus_1", "object": "customer", "email": "cus_1@example.com"}}
    assert asked == ["Bearer sk_test_fetch"] * 2
    async with engine.connect() as conn:
        failed = await get_event(conn, gone)
    assert failed is not None and failed.status == "retrying"
    assert failed.last_error == "fetching the object failed: ReconcileError"


async def test_a_paused_sources_object_events_wait_until_it_resumes(
    engine: AsyncEngine, ordered: Sources
) -> None:
    [event_id] = await store(engine, [update(ordered, 1, "cus_a", 1_700_000_001)])

    async def pause(paused: bool) -> None:
        async with engine.begin() as conn:
            await destinations.set_pause(
                conn,
                "stripe",
                destinations.WHOLE_SOURCE,
                paused=paused,
                by="test",
                reason=None,
                now=datetime.now(UTC),
            )

    async def claim_now() -> list[str]:
        async with engine.begin() as conn:
            got = await objects.claim(conn, "w", 30, 10, datetime.now(UTC), supersede={"stripe"})
        return [r.id for r in got.rows]

    await pause(True)
    assert await claim_now() == []
    await pause(False)
    assert await claim_now() == [event_id]


async def test_superseded_events_are_pruned_with_processed_ones(
    engine: AsyncEngine, ordered: Sources
) -> None:
    """After keep_events_days the row goes, its key stays saying how it ended."""
    seen = Seen()
    proc = processor(engine, ordered, seen)
    await store(engine, [update(ordered, 1, "cus_a", 1_700_000_005)])
    await drain_all(proc)
    [stale] = await store(engine, [update(ordered, 2, "cus_a", 1_700_000_003)])
    await drain_all(proc)
    later = datetime.now(UTC) + timedelta(days=31)  # keep_events_days: 30 by default
    await prune_sources(engine, ordered, owner="test", now=later)
    async with engine.connect() as conn:
        assert await get_event(conn, stale) is None
        tombstone = await get_tombstone(conn, stale)
    assert tombstone is not None and tombstone.final_status == "superseded"
