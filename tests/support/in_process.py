"""Destinations processed in the test's own process, on a real database: Stripe-shaped
events of six types stored directly, processors (as that many workers) drained until
something holds, and counts by status. The destination tests and ``test_forward.py``,
``test_handoff.py`` and ``test_park_order.py`` share them.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.sources import Sources, parse_sources
from processing.attempt import RetryPolicy
from processing.destinations import Router
from processing.handlers import load_handlers
from processing.limits import Limits, LocalLimits
from processing.processor import Processor
from store.crypto import BodyCipher
from store.intake.events import NewEvent, insert_events
from store.models import EVENTS
from tests.support.waiting import wait_for

FAST = RetryPolicy(base_s=0.01, cap_s=0.05)
TYPES = (
    "invoice.paid",
    "invoice.created",
    "invoice.deleted",
    "customer.created",
    "customer.updated",
    "charge.succeeded",
)
TENANTS = ("a", "b", "c")


def mixed(count: int, prefix: str = "evt") -> list[NewEvent]:
    """Stripe-shaped events: six types, live and test mode, some without an email,
    three tenants in a header."""
    out = []
    now = datetime.now(UTC)
    for i in range(count):
        obj: dict[str, Any] = {"id": f"obj_{i}", "livemode": i % 3 != 0}
        if i % 5:
            obj["email"] = f"user{i}@example.com"
        body = {"id": f"{prefix}_{i}", "type": TYPES[i % len(TYPES)], "data": {"object": obj}}
        out.append(
            NewEvent(
                source="stripe",
                provider="stripe",
                dedupe_key=f"{prefix}_{i}",
                type=TYPES[i % len(TYPES)],
                origin="webhook",
                received_at=now + timedelta(milliseconds=i),
                occurred_at=None,
                verified_with="stripe-v1;key=0",
                headers={"X-Tenant": TENANTS[(i // 2) % 3]},
                body=json.dumps(body).encode(),
            )
        )
    return out


# The stripe source these tests configure destinations on.
STRIPE_SOURCE = """
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_test_stripe"]
max_attempts = 3
"""


def processors(
    engine: AsyncEngine,
    sources: Sources,
    client: httpx.AsyncClient,
    count: int = 2,
    batch_size: int = 64,
    limits: Callable[[], Limits] = LocalLimits,
    concurrency: int = 16,
) -> list[Processor]:
    """``count`` processors over one database, as that many workers (each with the
    rate and concurrency limits ``limits`` makes)."""
    return [
        Processor(
            engine,
            sources,
            load_handlers(sources, client),
            BodyCipher(""),
            retry=FAST,
            rng=random.Random(i),
            batch_size=batch_size,
            concurrency=concurrency,
            router=Router(sources, client, limits(), retry_base_s=0.01, retry_cap_s=0.05),
        )
        for i in range(count)
    ]


async def store(engine: AsyncEngine, events: list[NewEvent]) -> list[str]:
    async with engine.begin() as conn:
        return [s.event_id for s in await insert_events(conn, events, BodyCipher(""))]


async def drain_until(
    procs: list[Processor], done: Callable[[], Any], timeout_s: float = 60.0
) -> None:
    async def step() -> Any:
        await asyncio.gather(*(p.drain(max_s=1.0) for p in procs))
        return await done() if asyncio.iscoroutinefunction(done) else done()

    await wait_for(step, timeout_s=timeout_s, interval_s=0.01)


async def count_status(engine: AsyncEngine, status: str) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.select(sa.func.count()).select_from(EVENTS).where(EVENTS.c.status == status)
                )
            ).scalar_one()
        )


def parse(text: str) -> Sources:
    return parse_sources(text, Path("hookd.toml"), env={})
