"""Destinations on real PostgreSQL, delivering to real HTTP servers on loopback that
verify every signature: filters, the ledger, a failing destination beside healthy
ones, the circuit breaker, and pausing a destination.

Processing runs in this process (two ``Processor``s over one database, as two workers
would); ``test_destinations_processes.py`` runs ``hookd serve`` and ``hookd worker``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import pytest
import sqlalchemy as sa
from jsonschema import Draft202012Validator
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.ops.destinations import DestinationOps
from hookd.ops.events import EventOps
from hookd.web import openapi
from store.delivery.destinations import PARKED_FROM
from store.intake.events import NewEvent
from store.models import DESTINATION_BREAKERS, EVENTS, HANDLER_RUNS
from tests.support.destinations import Destination, app, whsec
from tests.support.http import serve_app
from tests.support.in_process import (
    STRIPE_SOURCE,
    count_status,
    drain_until,
    mixed,
    parse,
    processors,
    store,
)
from tests.support.services import ONLY_POSTGRES

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


# What each destination's filter selects, written out here apart from the code.
def billing_takes(e: NewEvent) -> bool:
    return bool(e.type and e.type.startswith("invoice.") and e.type != "invoice.deleted")


def live_takes(e: NewEvent) -> bool:
    return bool(json.loads(e.body)["data"]["object"]["livemode"] is True)


def crm_takes(e: NewEvent) -> bool:
    obj = json.loads(e.body)["data"]["object"]
    return bool(
        e.type
        and e.type.startswith("customer.")
        and "email" in obj
        and e.headers["X-Tenant"] in ("a", "b")
    )


def sources_toml(base: str, *, crm_breaker: str = "", extra: str = "") -> str:
    return f"""{STRIPE_SOURCE}
[[sources.destinations]]
name = "billing"
url = "{base}/billing"
allow_insecure = true
secret = "{whsec("billing")}"
types = ["invoice.*", "!invoice.deleted"]

[[sources.destinations]]
name = "live"
url = "{base}/live"
allow_insecure = true
secret = "{whsec("live")}"
where = {{ "data.object.livemode" = true }}
origins = ["webhook"]

[[sources.destinations]]
name = "crm"
url = "{base}/crm"
allow_insecure = true
secret = "{whsec("crm")}"
types = ["customer.*"]
where = {{ "data.object.email" = {{ exists = true }} }}
where_headers = {{ "x-tenant" = ["a", "b"] }}
max_attempts = 60
retry_base_s = 0.01
retry_cap_s = 0.05
{crm_breaker}
{extra}
"""


@pytest.fixture
async def servers() -> AsyncIterator[tuple[dict[str, Destination], str]]:
    targets = {name: Destination(whsec(name)) for name in ("billing", "live", "crm")}
    async with serve_app(app(targets)) as url:
        yield targets, url


@ONLY_POSTGRES
async def test_three_filtered_destinations_get_exactly_their_events_once_signed_while_one_fails(
    engine: AsyncEngine, servers: tuple[dict[str, Destination], str]
) -> None:
    """600 mixed events, two processors: billing and live take theirs at once while crm
    answers 503; once crm recovers it gets its own, and nobody gets anything twice."""
    targets, base = servers
    targets["crm"].status = 503
    sources = parse(sources_toml(base, crm_breaker="breaker = { failures = 5, cooldown_s = 0.3 }"))
    events = mixed(600)
    ids = dict(zip((e.dedupe_key for e in events), await store(engine, events), strict=True))
    expected = {
        name: {ids[e.dedupe_key] for e in events if takes(e)}
        for name, takes in (("billing", billing_takes), ("live", live_takes), ("crm", crm_takes))
    }
    assert all(expected.values()) and len(expected["crm"]) < 600
    async with httpx.AsyncClient() as client:
        procs = processors(engine, sources, client)

        def healthy_done() -> bool:
            return all(set(targets[n].ids()) == expected[n] for n in ("billing", "live"))

        await drain_until(procs, healthy_done)
        # crm failed all along: it has delivered nothing, and was tried.
        assert targets["crm"].accepted == [] and targets["crm"].refused
        targets["crm"].status = 200

        async def all_processed() -> bool:
            return await count_status(engine, "processed") == 600

        await drain_until(procs, all_processed)
    for name, target in targets.items():
        assert not target.unsigned, name
        got = target.ids()
        assert len(got) == len(set(got)), f"{name} got an event twice"
        assert set(got) == expected[name], name
    # The filters' decisions are in the ledger, as skipped, once per event and destination.
    async with engine.connect() as conn:
        skipped = {
            (r.handler, r.n)
            for r in await conn.execute(
                sa.select(HANDLER_RUNS.c.handler, sa.func.count().label("n"))
                .where(HANDLER_RUNS.c.outcome == "skipped")
                .group_by(HANDLER_RUNS.c.handler)
            )
        }
    assert skipped == {(name, 600 - len(expected[name])) for name in expected}


async def test_the_breaker_opens_probes_and_closes_and_the_held_deliveries_are_made_once(
    engine: AsyncEngine, servers: tuple[dict[str, Destination], str]
) -> None:
    targets, base = servers
    targets["crm"].status = 503
    sources = parse(sources_toml(base, crm_breaker="breaker = { failures = 3, cooldown_s = 2 }"))
    events = [e for e in mixed(120) if crm_takes(e)]
    event_ids = await store(engine, events)
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1)

        async def opened() -> bool:
            async with engine.connect() as conn:
                state = (
                    await conn.execute(
                        sa.select(DESTINATION_BREAKERS.c.state).where(
                            DESTINATION_BREAKERS.c.destination == "crm"
                        )
                    )
                ).scalar()
            return state == "open"

        await drain_until([proc], opened, timeout_s=20)
        tried_before = len(targets["crm"].refused)
        ops = DestinationOps(engine, sources, _nothing)
        [crm] = [d.answer() for d in await ops.list() if d.name == "crm"]
        assert crm["breaker"]["state"] == "open" and crm["breaker"]["failures"] >= 3
        Draft202012Validator(
            {"$ref": "#/components/schemas/Destination", **openapi.document()}
        ).validate(crm)
        # While it is open nothing is sent; the deliveries it holds back use no attempt.
        await proc.drain(max_s=0.3)
        assert datetime.now(UTC) < datetime.fromisoformat(crm["breaker"]["retry_at"])
        assert len(targets["crm"].refused) == tried_before
        async with engine.connect() as conn:
            most = (await conn.execute(sa.select(sa.func.max(EVENTS.c.attempts)))).scalar()
        assert most is not None and most <= 3
        # Still failing when the cool-down ends: one probe, and open again.
        wait_s = datetime.fromisoformat(crm["breaker"]["retry_at"]) - datetime.now(UTC)
        await asyncio.sleep(wait_s.total_seconds() + 0.1)
        await drain_until([proc], lambda: len(targets["crm"].refused) > tried_before, 10)
        assert len(targets["crm"].refused) == tried_before + 1
        [crm] = [d.answer() for d in await ops.list() if d.name == "crm"]
        assert crm["breaker"]["state"] == "open"
        targets["crm"].status = 200

        async def all_processed() -> bool:
            return await count_status(engine, "processed") == len(event_ids)

        await drain_until([proc], all_processed, timeout_s=30)
    got = targets["crm"].ids()
    assert sorted(got) == sorted(event_ids)
    assert len(got) == len(set(got))
    [crm] = [d.answer() for d in await ops.list() if d.name == "crm"]
    assert crm["breaker"]["state"] == "closed" and crm["waiting"] == 0


async def test_a_paused_destination_waits_without_attempts_and_resume_delivers_in_receipt_order(
    engine: AsyncEngine, servers: tuple[dict[str, Destination], str]
) -> None:
    targets, base = servers
    sources = parse(sources_toml(base))
    ops = DestinationOps(engine, sources, _nothing)
    assert await ops.pause("stripe", "billing", by="test", reason="billing maintenance")
    events = mixed(60)
    event_ids = await store(engine, events)
    expected = [i for i, e in zip(event_ids, events, strict=True) if billing_takes(e)]
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1)

        def others_done() -> bool:
            return len(targets["live"].accepted) == sum(map(live_takes, events))

        await drain_until([proc], others_done)
        await proc.drain(max_s=0.5)
        assert targets["billing"].accepted == []
        async with engine.connect() as conn:
            parked = (
                await conn.execute(
                    sa.select(EVENTS.c.id, EVENTS.c.attempts, EVENTS.c.status).where(
                        EVENTS.c.next_attempt_at >= PARKED_FROM
                    )
                )
            ).all()
        assert sorted(r.id for r in parked) == sorted(expected)
        assert {(r.attempts, r.status) for r in parked} == {(0, "retrying")}
        [billing] = [d.answer() for d in await ops.list() if d.name == "billing"]
        assert billing["paused"] and billing["pause"]["by"] == "test"
        assert billing["waiting"] == len(expected)
        assert await ops.resume("stripe", "billing", by="test")

        async def all_processed() -> bool:
            return await count_status(engine, "processed") == len(event_ids)

        # One event at a time, so that the order of arrival is the order of claims.
        [one_by_one] = processors(engine, sources, client, count=1, batch_size=1, concurrency=1)
        await drain_until([one_by_one], all_processed)
    assert targets["billing"].ids() == expected


async def _nothing() -> None:
    return None


@ONLY_POSTGRES
async def test_a_destination_out_of_attempts_makes_the_event_dead_and_replay_reruns_only_it(
    engine: AsyncEngine, servers: tuple[dict[str, Destination], str]
) -> None:
    targets, base = servers
    targets["crm"].status = 503
    sources = parse(
        sources_toml(base, crm_breaker="breaker = { enabled = false }").replace(
            "max_attempts = 60", "max_attempts = 2"
        )
    )
    crm_only = next(e for e in mixed(12) if crm_takes(e))
    body = json.loads(crm_only.body)
    body["data"]["object"]["livemode"] = True  # and live's too
    event = replace(crm_only, body=json.dumps(body).encode())
    assert crm_takes(event) and live_takes(event) and not billing_takes(event)
    [event_id] = await store(engine, [event])
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1)

        async def dead() -> bool:
            return await count_status(engine, "dead") == 1

        await drain_until([proc], dead)
        assert [d.event_id for d in targets["live"].accepted] == [event_id]
        assert len(targets["crm"].refused) == 2  # its two attempts, no more
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(EVENTS.c.attempts, EVENTS.c.last_error_handler).where(
                        EVENTS.c.id == event_id
                    )
                )
            ).one()
        assert (row.attempts, row.last_error_handler) == (2, "crm")
        targets["crm"].status = 200
        events = EventOps(engine, _nothing)
        await events.replay(event_id)

        async def processed() -> bool:
            return await count_status(engine, "processed") == 1

        await drain_until([proc], processed)
    assert [d.event_id for d in targets["crm"].accepted] == [event_id]
    assert [d.event_id for d in targets["live"].accepted] == [event_id]  # not again
