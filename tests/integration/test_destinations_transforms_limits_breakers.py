"""Destinations' transforms, limits and breaker on real PostgreSQL, delivering to real
HTTP servers on loopback that verify every signature: a transform, the concurrency limit (in one
process, and across two sharing Redis), the breaker's failure-rate trip, handlers'
filters in the ledger, a source paused and resumed from the command line, and the
breaker's state on ``/metrics``.

Built on the fixtures and helpers of ``test_destinations.py`` (processing in this
process) and ``test_destinations_processes.py`` (the command line).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import Response

from hookd.errors import PermanentError
from hookd.event import Event, idempotency_key
from hookd.ops.destinations import DestinationOps
from hookd.sources import Sources
from processing.limits import RedisLimits
from store.delivery import destinations as state
from store.delivery.destinations import WHOLE_SOURCE
from store.models import DESTINATION_BREAKERS, EVENTS, HANDLER_RUNS
from tests.integration.test_destinations import live_takes
from tests.integration.test_destinations_processes import config, env_for, hookd
from tests.support.asgi import running_app
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
from tests.support.server import RedisServer
from tests.support.services import ONLY_POSTGRES
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, ONLY_POSTGRES]
HERE = __name__
TOKEN = "destinations-more-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RESERVED = (
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "idempotency-key",
    "x-hookd-source",
    "x-hookd-event-type",
)


def source_toml(destinations: str, extra: str = "") -> str:
    return f"""{STRIPE_SOURCE}{extra}
{destinations}
"""


def destination(name: str, base_url: str, extra: str = "") -> str:
    return f"""
[[sources.destinations]]
name = "{name}"
url = "{base_url}/{name}"
allow_insecure = true
secret = "{whsec(name)}"
{extra}
"""


@dataclass
class Recording(Destination):
    """A destination that also keeps each request's raw header list (to see a header
    sent twice), answers after ``delay_s``, and counts the requests in flight at once.
    With ``fail_every`` set, every one in that many requests is answered 503."""

    delay_s: float = 0.0
    fail_every: int = 0
    raw: list[list[tuple[str, str]]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    requests: int = 0

    async def endpoint(self, request: Request) -> Response:
        self.raw.append([(k.decode().lower(), v.decode()) for k, v in request.headers.raw])
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            self.requests += 1
            if self.fail_every:
                self.status = 503 if self.requests % self.fail_every == 1 else 200
            return await super().endpoint(request)
        finally:
            self.in_flight -= 1


@pytest.fixture
async def recording() -> AsyncIterator[tuple[dict[str, Recording], str]]:
    targets = {name: Recording(whsec(name)) for name in ("billing", "live", "slow", "flaky")}
    async with serve_app(app(dict(targets))) as url:
        yield targets, url


# -- transforms (referenced from the sources file as tests.integration.…:NAME) --------


def reshaped_body(event: Event) -> dict[str, Any]:
    return {"kind": event.type, "original": json.loads(event.body)["id"], "via": "transform"}


FORGED = {
    "webhook-id": "msg_forged",
    "Webhook-Timestamp": "1",
    "WEBHOOK-SIGNATURE": "v1,Zm9yZ2Vk",
    "idempotency-key": "mine",
    "Idempotency-Key": "mine-too",
    "x-HOOKD-source": "forged-source",
    "X-Hookd-Event-Type": "forged.type",
}


def reshape(event: Event) -> tuple[Any, dict[str, str]]:
    """A new JSON body and headers, with a try at the signing headers."""
    headers = {"X-Reshaped": event.id, "content-type": "application/vnd.reshaped+json"}
    return reshaped_body(event), {**headers, **FORGED}


async def reshape_async(event: Event) -> tuple[Any, dict[str, str]]:
    await asyncio.sleep(0)
    return reshape(event)


def faulty(event: Event) -> Any:
    """What a transform can get wrong, one way per event type."""
    match event.type:
        case "invoice.paid":
            raise RuntimeError("transform bug")
        case "invoice.created":
            raise PermanentError("not_for_billing", "billing takes no drafts")
        case "invoice.deleted":
            return b"a body without headers"
        case "customer.created":
            return b"{}", {"X-Count": 1}
        case "customer.updated":
            return object(), {}
        case _:
            return "as text", {}


# -- handlers (referenced from the sources file) --------------------------------------

RAN: dict[str, list[str]] = {}
FAILED_ONCE: set[str] = set()


async def on_invoice(event: Event) -> None:
    RAN.setdefault("on_invoice", []).append(event.id)


async def on_every_event(event: Event) -> None:
    RAN.setdefault("on_every_event", []).append(event.id)


async def fails_first_time(event: Event) -> None:
    if event.id not in FAILED_ONCE:
        FAILED_ONCE.add(event.id)
        raise RuntimeError("first time")
    RAN.setdefault("fails_first_time", []).append(event.id)


# -- 1. transform ------------------------------------------------------------------


@pytest.mark.parametrize("transform", ["reshape", "reshape_async"])
async def test_a_transform_shapes_what_is_sent_signed_and_cannot_touch_the_signing_headers(
    engine: AsyncEngine, recording: tuple[dict[str, Recording], str], transform: str
) -> None:
    targets, url = recording
    sources = parse(
        source_toml(
            destination("billing", url, f'transform = "{HERE}:{transform}"')
            + destination("live", url)
        )
    )
    events = mixed(12)
    event_ids = await store(engine, events)
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1)

        async def processed() -> bool:
            return await count_status(engine, "processed") == len(events)

        await drain_until([proc], processed, timeout_s=30)
    billing = targets["billing"]
    # Every delivery verified (the Destination checks the signature over what it got).
    assert not billing.unsigned and not targets["live"].unsigned
    assert sorted(billing.ids()) == sorted(event_ids)
    by_id = dict(zip(event_ids, events, strict=True))
    for delivery, raw in zip(billing.accepted, billing.raw, strict=True):
        stored = by_id[delivery.event_id]
        shaped = {"kind": stored.type, "original": stored.dedupe_key, "via": "transform"}
        # The transform's body (compact JSON) is what was sent, and signed.
        assert delivery.body == json.dumps(shaped, separators=(",", ":")).encode()
        assert delivery.headers["x-reshaped"] == delivery.event_id
        assert delivery.headers["content-type"] == "application/vnd.reshaped+json"
        # The signing headers, Idempotency-Key and X-Hookd-* are hookd's, each sent once.
        for name in RESERVED:
            assert [k for k, _ in raw].count(name) == 1, (name, raw)
        assert delivery.headers["webhook-id"] == delivery.event_id
        assert delivery.headers["idempotency-key"] == idempotency_key(delivery.event_id, "billing")
        assert delivery.headers["x-hookd-event-type"] == stored.type
        assert delivery.headers["x-hookd-source"] == stored.source
    # A destination without a transform gets the original body.
    assert {d.event_id: d.body for d in targets["live"].accepted} == {
        i: by_id[i].body for i in event_ids
    }


async def test_a_failing_transform_fails_only_its_destination_and_never_moves_its_breaker(
    engine: AsyncEngine, recording: tuple[dict[str, Recording], str]
) -> None:
    """Raising retries (until the destination's attempts run out); a PermanentError or a
    value that is not (body, headers) is dead at once. Nothing is sent for them, the
    breaker (open after one failure) stays closed, and the other destination is served."""
    targets, url = recording
    billing = (
        f'transform = "{HERE}:faulty"\nmax_attempts = 2\n'
        "breaker = { failures = 1, cooldown_s = 60 }"
    )
    sources = parse(
        source_toml(
            destination("billing", url, billing)
            + destination("live", url, 'where = { "data.object.livemode" = true }')
        )
    )
    events = mixed(12)
    event_ids = await store(engine, events)
    type_of = {i: e.type for i, e in zip(event_ids, events, strict=True)}
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1)

        async def settled() -> bool:
            done = await count_status(engine, "processed") + await count_status(engine, "dead")
            return done == len(events)

        await drain_until([proc], settled, timeout_s=30)
    async with engine.connect() as conn:
        rows = {
            r.id: r
            for r in await conn.execute(
                sa.select(
                    EVENTS.c.id,
                    EVENTS.c.status,
                    EVENTS.c.attempts,
                    EVENTS.c.last_error,
                    EVENTS.c.last_error_handler,
                    EVENTS.c.last_error_type,
                )
            )
        }
        breaker = (
            await conn.execute(
                sa.select(DESTINATION_BREAKERS.c.state).where(
                    DESTINATION_BREAKERS.c.destination == "billing"
                )
            )
        ).scalar()
    expected = {
        "invoice.paid": ("dead", 2, "billing: RuntimeError: transform bug", "RuntimeError"),
        "invoice.created": (
            "dead",
            1,
            "billing: not_for_billing: billing takes no drafts",
            "PermanentError",
        ),
        "invoice.deleted": ("dead", 1, "billing: transform_invalid", "PermanentError"),
        "customer.created": ("dead", 1, "billing: transform_invalid", "PermanentError"),
        "customer.updated": ("dead", 1, "billing: transform_invalid", "PermanentError"),
        "charge.succeeded": ("processed", 1, None, None),
    }
    for event_id, row in rows.items():
        status, attempts, error, kind = expected[str(type_of[event_id])]
        assert (row.status, row.attempts, row.last_error_type) == (status, attempts, kind), row
        assert row.last_error is None if error is None else row.last_error.startswith(error), row
        assert row.last_error_handler == (None if error is None else "billing")
    # Only the events it could shape reached billing (the str body as it was given).
    charges = sorted(i for i, t in type_of.items() if t == "charge.succeeded")
    assert sorted(targets["billing"].ids()) == charges and targets["billing"].refused == []
    assert {d.body for d in targets["billing"].accepted} == {b"as text"}
    # A transform's failure says nothing about the destination: its breaker stays closed.
    assert breaker in (None, "closed")
    # live got its own, once each, whatever billing's transform did.
    wanted = sorted(i for i, e in zip(event_ids, events, strict=True) if live_takes(e))
    assert sorted(targets["live"].ids()) == wanted


# -- 2. concurrency ----------------------------------------------------------------


@pytest.mark.parametrize("shared", ["memory", "redis"])
async def test_at_most_concurrency_requests_are_in_flight_at_a_destination(
    engine: AsyncEngine,
    recording: tuple[dict[str, Recording], str],
    tmp_path: Path,
    shared: str,
) -> None:
    """``concurrency = 3`` against a slow destination: one processor (limits in its
    memory), or two each with their own connection to one Redis (as two workers)."""
    targets, url = recording
    slow = targets["slow"]
    slow.delay_s = 0.25
    sources = parse(source_toml(destination("slow", url, "concurrency = 3")))
    events = mixed(12)
    await store(engine, events)
    async with httpx.AsyncClient() as client:
        if shared == "memory":
            procs = processors(engine, sources, client, count=1)
            await _deliver_all(engine, procs, len(events))
        else:
            with RedisServer(tmp_path) as redis_server:
                redis = Redis.from_url(redis_server.url)
                try:
                    # Small batches: both claim while the other's requests are in flight.
                    procs = processors(
                        engine, sources, client, batch_size=6, limits=lambda: RedisLimits(redis)
                    )
                    await _deliver_all(engine, procs, len(events))
                finally:
                    await redis.aclose()
    assert len(slow.accepted) == len(events) and not slow.unsigned
    # Never more than 3 at once, and 3 were (the limit, not one at a time).
    assert slow.most_in_flight == 3


async def _deliver_all(engine: AsyncEngine, procs: list[Any], count: int) -> None:
    async def processed() -> bool:
        return await count_status(engine, "processed") == count

    await drain_until(procs, processed, timeout_s=30)


# -- 3. the breaker's failure rate ----------------------------------------------------


@pytest.mark.parametrize(("rate", "opens"), [(0.5, True), (0.75, False)])
async def test_the_breaker_opens_on_its_failure_rate_without_failures_in_a_row(
    engine: AsyncEngine, recording: tuple[dict[str, Recording], str], rate: float, opens: bool
) -> None:
    """Every other request fails: never 1,000 failures in a row, but half of the
    deliveries in the window. At ``failure_rate = 0.5`` that opens the breaker; at 0.75
    it stays closed and everything is delivered."""
    targets, url = recording
    flaky = targets["flaky"]
    flaky.fail_every = 2
    breaker = (
        f"breaker = {{ failures = 1000, failure_rate = {rate}, window_s = 60,"
        " min_deliveries = 10, cooldown_s = 60 }"
    )
    sources = parse(source_toml(destination("flaky", url, f"max_attempts = 60\n{breaker}")))
    events = mixed(40)
    await store(engine, events)

    async def breaker_row() -> Any:
        async with engine.connect() as conn:
            return (await state.all_breakers(conn)).get(("stripe", "flaky"))

    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1, batch_size=8)
        if opens:

            async def opened() -> bool:
                row = await breaker_row()
                return row is not None and row.state == "open"

            await drain_until([proc], opened, timeout_s=30)
            row = await breaker_row()
            assert row.reason == "delivery failed: RuntimeError"
            # It opened on the rate: at least min_deliveries went out, about half failed.
            assert flaky.requests >= 10
            assert len(flaky.refused) >= flaky.requests // 2
            # While it is open, nothing more is sent.
            sent = flaky.requests
            await proc.drain(max_s=0.5)
            assert flaky.requests == sent
            assert await count_status(engine, "processed") < len(events)
        else:
            await _deliver_all(engine, [proc], len(events))
            row = await breaker_row()
            assert row is None or row.state == "closed"
            assert len(flaky.refused) >= 10  # it failed as often as in the other case
    assert not flaky.unsigned


# -- 4. handlers' filters -------------------------------------------------------------


async def test_a_filtered_handler_runs_for_what_it_selects_and_is_skipped_once_for_the_rest(
    engine: AsyncEngine,
) -> None:
    """``on_invoice`` takes live invoices only; ``fails_first_time`` (after it) makes
    every event go round twice, and the filter's decision is not made again."""
    RAN.clear()
    FAILED_ONCE.clear()
    handlers = (
        f'handlers = [{{ ref = "{HERE}:on_invoice", types = ["invoice.*"],'
        ' where = { "data.object.livemode" = true } },'
        f' "{HERE}:on_every_event", "{HERE}:fails_first_time"]'
    )
    sources = parse(source_toml("", extra=handlers))
    events = mixed(24)
    event_ids = await store(engine, events)
    selected = sorted(
        i
        for i, e in zip(event_ids, events, strict=True)
        if str(e.type).startswith("invoice.") and live_takes(e)
    )
    assert 0 < len(selected) < len(events)
    skips_before = _skips("stripe")
    async with httpx.AsyncClient() as client:
        [proc] = processors(engine, sources, client, count=1)

        async def processed() -> bool:
            return await count_status(engine, "processed") == len(events)

        await drain_until([proc], processed, timeout_s=30)
    assert sorted(RAN["on_invoice"]) == selected  # once each, and only those
    assert sorted(RAN["on_every_event"]) == sorted(event_ids)
    assert sorted(RAN["fails_first_time"]) == sorted(event_ids)
    async with engine.connect() as conn:
        ledger = {
            (r.event_id, r.handler.rpartition(":")[2]): r.outcome
            for r in await conn.execute(
                sa.select(HANDLER_RUNS.c.event_id, HANDLER_RUNS.c.handler, HANDLER_RUNS.c.outcome)
            )
        }
        attempts = {
            r.attempts for r in await conn.execute(sa.select(EVENTS.c.attempts, EVENTS.c.status))
        }
    for event_id in event_ids:
        assert ledger[(event_id, "on_invoice")] == (None if event_id in selected else "skipped")
        assert ledger[(event_id, "on_every_event")] is None
        assert ledger[(event_id, "fails_first_time")] is None
    assert attempts == {2}
    # Counted once per event it left out, though each event was processed twice.
    assert _skips("stripe") - skips_before == len(events) - len(selected)


def _skips(source: str) -> float:
    return REGISTRY.get_sample_value("hookd_handler_skips_total", {"source": source}) or 0.0


# -- 5. pausing a source from the command line -----------------------------------------


async def test_the_command_line_pauses_a_source_and_resume_drains_it_in_order_of_receipt(
    tmp_path: Path, pg_url: str, engine: AsyncEngine
) -> None:
    sink = Destination(whsec("sink"))
    async with serve_app(app({"sink": sink})) as url:
        path = config(tmp_path / "hookd.toml", url)
        env = env_for(path, pg_url)
        code, out, err = await hookd(env, "sources", "pause", "stripe", "--reason", "migration")
        assert (code, out.strip()) == (0, "stripe: processing paused"), err
        sources: Sources = parse(path.read_text())
        # Received in one order, stored in another (ids follow the order of storing).
        events = mixed(16)
        order = list(range(len(events)))
        random.Random(7).shuffle(order)
        stored = await store(engine, [events[i] for i in order])
        id_of = {events[i].dedupe_key: event_id for i, event_id in zip(order, stored, strict=True)}
        received_order = [id_of[e.dedupe_key] for e in events]
        assert received_order != sorted(received_order)
        async with httpx.AsyncClient() as client:
            procs = processors(engine, sources, client)
            for _ in range(2):
                await asyncio.gather(*(p.drain(max_s=0.3) for p in procs))
            assert sink.accepted == [] and sink.refused == []
            async with engine.connect() as conn:
                untouched = (
                    await conn.execute(
                        sa.select(sa.func.count())
                        .select_from(EVENTS)
                        .where(EVENTS.c.status == "pending", EVENTS.c.attempts == 0)
                    )
                ).scalar_one()
                pause = (await state.all_pauses(conn))[("stripe", WHOLE_SOURCE)]
            assert untouched == len(events)
            assert (
                pause.paused and pause.changed_by.startswith("cli") and pause.reason == "migration"
            )
            # (The command line's resume: test_destinations_processes.py.)
            assert await DestinationOps(engine, sources, _nothing).resume_source("stripe", by="t")
            # One event at a time, so that the order of claims is the order of arrival.
            [one_by_one] = processors(engine, sources, client, count=1, batch_size=1, concurrency=1)
            await _deliver_all(engine, [one_by_one], len(events))
    assert sink.ids() == received_order and not sink.unsigned


async def _nothing() -> None:
    return None


# -- 6. the breaker's state on /metrics -----------------------------------------------


async def test_the_breaker_state_on_metrics_goes_to_open_and_back_to_closed(
    pg_url: str, engine: AsyncEngine, recording: tuple[dict[str, Recording], str]
) -> None:
    targets, url = recording
    flaky = targets["flaky"]
    flaky.status = 503
    extra = (
        "max_attempts = 60\nretry_base_s = 0.01\nretry_cap_s = 0.05\n"
        "breaker = { failures = 2, cooldown_s = 1 }"
    )
    sources = parse(source_toml(destination("flaky", url, extra) + destination("live", url)))
    async with running_app(
        sources, pg_url, admin_token=TOKEN, sweep_s=0.1, reconcile_schedule=False
    ) as (_, client):

        async def breaker_states() -> dict[str, float]:
            text = (await client.get("/metrics", headers=AUTH)).text
            return {
                s.labels["destination"]: s.value
                for family in text_string_to_metric_families(text)
                if family.name == "hookd_destination_breaker_state"
                for s in family.samples
                if s.labels["source"] == "stripe"
            }

        assert await breaker_states() == {"flaky": 0.0, "live": 0.0}
        events = mixed(6)
        event_ids = await store(engine, events)

        async def is_open() -> bool:
            return await breaker_states() == {"flaky": 2.0, "live": 0.0}

        await wait_for(is_open, timeout_s=30, interval_s=0.05)
        flaky.status = 200

        async def closed_and_done() -> bool:
            return await breaker_states() == {"flaky": 0.0, "live": 0.0} and await count_status(
                engine, "processed"
            ) == len(events)

        await wait_for(closed_and_done, timeout_s=30, interval_s=0.1)
    assert sorted(flaky.ids()) == sorted(event_ids)
