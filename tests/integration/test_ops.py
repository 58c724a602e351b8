"""``hookd.ops`` itself, on SQLite and PostgreSQL: replay and its wake-up, the typed
refusals the API, the admin UI and the command line turn into their own answers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import EventOps, EventQuery, RunOps, RunQuery, SourceOps
from hookd.sources import Sources, parse_sources
from reconcile.poller import Reconciler
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS
from store.reconcile import runs as rstate
from tests.support.constants import SECRETS
from tests.support.data import new_event

pytestmark = pytest.mark.anyio
UNKNOWN = "01J0000000000000000000000A"


class Wakes:
    """A ``wake`` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1


async def stored(engine: AsyncEngine, *keys: str, source: str = "github") -> list[str]:
    async with engine.begin() as conn:
        done = await insert_events(conn, [new_event(k, source) for k in keys], BodyCipher(""))
    return [s.event_id for s in done]


async def set_status(engine: AsyncEngine, status: str, *event_ids: str) -> None:
    values = {"status": status, "attempts": 3, "last_error": "boom" if status == "dead" else None}
    async with engine.begin() as conn:
        await conn.execute(sa.update(EVENTS).where(EVENTS.c.id.in_(event_ids)).values(values))


async def test_replay_of_a_dead_event_makes_it_pending_and_wakes_once(engine: AsyncEngine) -> None:
    [event_id] = await stored(engine, "a")
    await set_status(engine, "dead", event_id)
    wakes = Wakes()
    events = EventOps(engine, wakes)
    resource = await events.replay(event_id)
    assert resource.id == event_id
    assert resource.status == "pending"
    assert resource.attempts == 0
    assert resource.error is None
    assert wakes.calls == 1
    shown = (await events.show(event_id)).resource
    assert shown.status == "pending"


async def test_replay_of_an_event_in_progress_is_a_conflict(engine: AsyncEngine) -> None:
    [event_id] = await stored(engine, "a")
    await set_status(engine, "processing", event_id)
    wakes = Wakes()
    events = EventOps(engine, wakes)
    with pytest.raises(Conflict) as refused:
        await events.replay(event_id)
    assert refused.value.reason == "in_progress"
    assert refused.value.detail == "the event is being processed right now"
    assert wakes.calls == 0
    assert (await events.show(event_id)).resource.status == "processing"


@pytest.mark.parametrize("event_id", [UNKNOWN, "not-an-id", ""])
async def test_unknown_event_is_not_found(engine: AsyncEngine, event_id: str) -> None:
    wakes = Wakes()
    events = EventOps(engine, wakes)
    with pytest.raises(NotFound) as refused:
        await events.replay(event_id)
    assert refused.value.reason == "not_found"
    assert refused.value.kind == "event"
    with pytest.raises(NotFound):
        await events.show(event_id)
    with pytest.raises(NotFound):
        await events.stored(event_id)
    assert wakes.calls == 0


async def test_stored_and_sampled_events_come_with_their_bodies(engine: AsyncEngine) -> None:
    """What ``hookd try`` runs a handler on: one event, or the newest of a source."""
    first, second = await stored(engine, "a", "b")
    await stored(engine, "c", source="stripe")
    events = EventOps(engine, Wakes())
    row = await events.stored(first)
    assert row.id == first
    assert row.body is not None
    sampled = await events.sample(source="github", type_glob=None, since=None, limit=10)
    assert [r.id for r in sampled] == sorted([first, second], reverse=True)  # newest first
    assert all(r.body is not None for r in sampled)
    assert await events.sample(source="github", type_glob=None, since=None, limit=1) == [sampled[0]]


async def test_replay_many_names_the_unknown_and_skips_those_in_progress(
    engine: AsyncEngine,
) -> None:
    dead, busy = await stored(engine, "a", "b")
    await set_status(engine, "dead", dead)
    await set_status(engine, "processing", busy)
    wakes = Wakes()
    done = await EventOps(engine, wakes).replay_many([dead, UNKNOWN, busy])
    assert done.ids == [dead, UNKNOWN, busy]
    assert done.unknown == [UNKNOWN]
    assert done.replayed == [dead]
    assert wakes.calls == 1
    nothing = await EventOps(engine, wakes).replay_many([UNKNOWN])
    assert nothing.unknown == [UNKNOWN]
    assert nothing.replayed == []
    assert wakes.calls == 1, "nothing replayed: nothing to wake"


async def test_replay_dead_takes_the_dead_of_one_source_only(engine: AsyncEngine) -> None:
    dead_a, dead_b, alive = await stored(engine, "a", "b", "c")
    [other] = await stored(engine, "d", source="stripe")
    await set_status(engine, "dead", dead_a, dead_b, other)
    wakes = Wakes()
    events = EventOps(engine, wakes)
    done = await events.replay_dead("github")
    assert sorted(done.ids) == sorted([dead_a, dead_b])
    assert sorted(done.replayed) == sorted([dead_a, dead_b])
    assert done.unknown == []
    assert wakes.calls == 1
    statuses = {e.id: e.status for e in (await events.page(EventQuery(limit=10))).events}
    assert statuses == {dead_a: "pending", dead_b: "pending", alive: "pending", other: "dead"}
    again = await events.replay_dead("github")
    assert again.replayed == []
    assert wakes.calls == 1
    # The name the events were stored under: not necessarily a configured source.
    assert (await events.replay_dead("gone")).ids == []


async def test_pages_are_newest_first_with_a_cursor(engine: AsyncEngine) -> None:
    ids = []
    for key in ("one", "two", "three"):
        ids += await stored(engine, key)
    events = EventOps(engine, Wakes())
    first = await events.page(EventQuery(limit=2))
    assert [e.id for e in first.events] == ids[:0:-1]
    assert first.next_cursor == ids[1]
    rest = await events.page(EventQuery.parse({"limit": "2", "cursor": first.next_cursor}))
    assert [e.id for e in rest.events] == [ids[0]]
    assert rest.next_cursor is None
    assert (await events.page(EventQuery.parse({"source": "stripe"}))).events == []


# The inputs GET /api/events answers 400 to (tests/integration/test_api.py), with its words.
BAD_EVENT_QUERIES = [
    ({"limit": "0"}, "limit", "limit must be a whole number from 1 to 500"),
    ({"limit": "x"}, "limit", "limit must be a whole number from 1 to 500"),
    ({"limit": "501"}, "limit", "limit must be a whole number from 1 to 500"),
    ({"limit": "²"}, "limit", "limit must be a whole number from 1 to 500"),
    ({"limit": ""}, "limit", "limit must be a whole number from 1 to 500"),
    ({"status": "done"}, "status", "status must be one of "),
    ({"status": ""}, "status", "status must be one of "),
    ({"origin": "mail"}, "origin", "origin must be one of "),
    ({"cursor": "abc"}, "cursor", "cursor is not one this API gave out"),
    ({"source": "git\x00hub"}, "text", "source and type must not contain NUL"),
    ({"type": "\x00"}, "text", "source and type must not contain NUL"),
]


@pytest.mark.parametrize(("params", "field", "detail"), BAD_EVENT_QUERIES)
def test_event_query_refuses_what_the_api_refuses(
    params: dict[str, str], field: str, detail: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        EventQuery.parse(params)
    assert refused.value.reason == "bad_request"
    assert refused.value.field == field
    assert refused.value.detail.startswith(detail)


def test_event_query_reads_what_the_api_accepts() -> None:
    assert EventQuery.parse({}) == EventQuery(limit=50)
    cursor = "01J0000000000000000000000B"
    query = EventQuery.parse(
        {"status": "dead", "origin": "reconcile", "limit": "500", "cursor": cursor, "type": ""}
    )
    assert query == EventQuery(status="dead", origin="reconcile", limit=500, cursor=cursor)
    with pytest.raises(BadRequest, match="source must not contain NUL"):
        RunQuery.parse({"source": "a\x00"})
    with pytest.raises(BadRequest, match="limit must be"):
        RunQuery.parse({"limit": "0"})
    assert RunQuery.parse({"source": "", "limit": "7"}) == RunQuery(None, 7)


def reconciled_sources() -> Sources:
    text = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
[sources.reconcile]
api_url = "http://127.0.0.1:9"
allow_insecure = true
token = "t"
hook = "repos/octo/hello/hooks/42"

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]
"""
    return parse_sources(text, Path("ops.toml"), env={})


async def test_sources_refuse_unknown_and_unreconciled(engine: AsyncEngine) -> None:
    sources = SourceOps(engine, reconciled_sources())
    with pytest.raises(NotFound):
        await sources.enable("nope")
    with pytest.raises(Conflict) as refused:
        await sources.enable("stripe")
    assert refused.value.reason == "not_configured"
    assert [s.name for s in sources.reconciled()] == ["github"]
    enabled = await sources.enable("github")
    assert enabled.name == "github"
    assert enabled.reconcile is not None and enabled.reconcile.state == "active"
    assert [r.name for r in await sources.overview()] == ["github", "stripe"]


async def test_a_started_run_of_a_disabled_source_ends_failed(engine: AsyncEngine) -> None:
    sources = SourceOps(engine, reconciled_sources())
    async with httpx.AsyncClient() as client:
        runs = RunOps(Reconciler(engine, client, BodyCipher("")), sources)
        with pytest.raises(NotFound):
            await runs.start("nope", dry_run=False)
        with pytest.raises(Conflict):
            await runs.start("stripe", dry_run=False)
        now = datetime.now(UTC)
        async with engine.begin() as conn:
            await rstate.ensure_state(conn, "github", now)
            await rstate.update_state(
                conn, "github", None, disabled=True, disabled_reason="auth_failed"
            )
        started = await runs.start("github", dry_run=True)
        assert started.run.status == "queued"
        assert started.run.trigger == "api"
        await started.task
        run = await runs.get(started.run.id)
        assert run.status == "failed"
        assert run.error == "disabled: auth_failed"
        assert [r.id for r in (await runs.recent(RunQuery(source="github"))).runs] == [run.id]
        with pytest.raises(NotFound):
            await runs.get(UNKNOWN)
        with pytest.raises(NotFound):
            await runs.get("nope")
        await runs.stop()
