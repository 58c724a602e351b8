"""The operator's checklist: claims and lease takeovers counted, duplicates suppressed on
the reconcile path, how long runs take, which sources are overdue and how many runs
started; and the admin's lists beside dead letters: events stuck in ``processing``
past their lease, and events still being tried after many attempts.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY

from hookd.sources import Sources, parse_sources
from processing.processor import Processor
from store.claims import claiming
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import EVENTS
from tests.support import handlers
from tests.support.admin import login
from tests.support.asgi import running_app
from tests.support.data import engine_of, new_event
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app
from tests.support.reconcile_world import sources_toml

pytestmark = pytest.mark.anyio
TOKEN = "checklist-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def stored(url: str, keys: list[str], source: str = "github") -> list[str]:
    async with engine_of(url) as engine, engine.begin() as conn:
        done = await insert_events(conn, [new_event(k, source) for k in keys], BodyCipher(""))
    return [s.event_id for s in done]


async def set_rows(url: str, event_id: str, **values: Any) -> None:
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.execute(sa.update(EVENTS).where(EVENTS.c.id == event_id).values(**values))


async def test_the_admin_lists_stuck_and_many_attempt_events(sources: Sources, db_url: str) -> None:
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    ids = await stored(db_url, ["stuck", "held", "flaky", "once", "dead", "done"])
    stuck, held, flaky, once, dead, done = ids
    # Claimed by a worker that died a minute ago, and by one whose lease still runs.
    await set_rows(
        db_url,
        stuck,
        status="processing",
        attempts=2,
        lease_owner="web-7:4242:deadbeef",
        lease_expires_at=now - timedelta(seconds=60),
    )
    await set_rows(
        db_url, held, status="processing", attempts=1, lease_owner="w:1:x", lease_expires_at=later
    )
    await set_rows(
        db_url, flaky, status="retrying", attempts=5, next_attempt_at=later, last_error="E: flaky"
    )
    await set_rows(db_url, once, status="retrying", attempts=1, next_attempt_at=later)
    await set_rows(db_url, dead, status="dead", attempts=8, last_error="E: gave up")
    await set_rows(db_url, done, status="processed", attempts=4)

    # A sweep far away: the in-process consumer must not take the stuck event over.
    async with running_app(sources, db_url, admin_token=TOKEN, sweep_s=600) as (_, client):
        await login(client, TOKEN)

        async def listed(path: str) -> set[str]:
            page = await client.get(path)
            assert page.status_code == 200, page.text
            return {i for i in ids if i in page.text}

        page = await client.get("/admin/stuck")
        assert "web-7:4242:deadbeef" in page.text
        assert await listed("/admin/stuck") == {stuck}
        assert await listed("/admin/stuck?source=stripe") == set()
        assert await listed("/admin/retried") == {flaky}
        assert await listed("/admin/retried?attempts=2") == {flaky, stuck}
        assert await listed("/admin/retried?attempts=1") == {flaky, stuck, held, once}
        for bad in ("0", "x", "99999999"):
            refused = await client.get(f"/admin/retried?attempts={bad}")
            assert refused.status_code == 400
            assert "Attempts must be a whole number" in refused.text
        nav = (await client.get("/admin")).text
        assert 'href="/admin/stuck"' in nav and 'href="/admin/retried"' in nav
    # Looking changed nothing.
    async with engine_of(db_url) as engine, engine.connect() as conn:
        status = await conn.scalar(sa.select(EVENTS.c.status).where(EVENTS.c.id == stuck))
    assert status == "processing"


async def test_claims_and_lease_takeovers_are_counted(sources: Sources, pg_url: str) -> None:
    async with engine_of(pg_url) as engine:
        processor = Processor(engine, sources, {}, BodyCipher(""), lease_s=30)
        claims_before = sample("hookd_claims_total", source="github")
        takeovers_before = sample("hookd_lease_takeovers_total", source="github")
        (crashed,) = await stored(pg_url, ["crashed"])
        async with engine.begin() as conn:
            claimed = await claiming.claim_due(
                conn,
                "dead-worker",
                0.2,
                10,
                datetime.now(UTC),
                shares=claiming.alone(["github"], 10),
            )
        assert [r.id for r in claimed] == [crashed]
        await asyncio.sleep(0.3)  # its lease ends
        await stored(pg_url, ["fresh"])
        assert await processor.run_once() == 2
        assert sample("hookd_claims_total", source="github") == claims_before + 2
        assert sample("hookd_lease_takeovers_total", source="github") == takeovers_before + 1
        # A claim of an event nobody held is no takeover.
        await stored(pg_url, ["another"])
        assert await processor.run_once() == 1
        assert sample("hookd_lease_takeovers_total", source="github") == takeovers_before + 1
        assert sample("hookd_claims_total", source="github") == claims_before + 3


def metric(text: str, name: str, source: str) -> float:
    match = re.search(rf'^{name}\{{source="{source}"\}} (\S+)$', text, re.M)
    assert match, f"{name} missing"
    return float(match.group(1))


async def test_reconcile_duplicates_duration_runs_started_and_overdue(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The source's handler writes to the same database.
    monkeypatch.setenv("HOOKD_DATABASE_URL", pg_url)
    await handlers.prepare(pg_url)
    emulator = StripeEmulator("sk_test_hookd")
    # Older than Stripe's settle window (300 s), and within the runs' overlap (120 s)
    # before the cursor it leaves (now - 300 s): the second run lists them again.
    emulator.add_events(5, start=time.time() - 400, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        sources = parse_sources(sources_toml("stripe", api_url), Path("c.toml"), env={})
        async with running_app(
            sources, pg_url, admin_token=TOKEN, reconcile_schedule=False, sweep_s=600
        ) as (_, client):
            scrape = (await client.get("/metrics", headers=AUTH)).text
            assert metric(scrape, "hookd_reconcile_runs_started_total", "stripe") == 0
            assert metric(scrape, "hookd_reconcile_overdue_seconds", "stripe") == 0
            duplicates = sample("hookd_reconcile_duplicates_total", source="stripe")
            durations = sample("hookd_reconcile_run_seconds_count", source="stripe")

            async def reconcile() -> dict[str, Any]:
                started = await client.post("/api/sources/stripe/reconcile", headers=AUTH)
                assert started.status_code == 202
                run_id = started.json()["id"]
                for _ in range(300):
                    run = (await client.get(f"/api/reconcile-runs/{run_id}", headers=AUTH)).json()
                    if run["done"]:
                        return dict(run)
                    await asyncio.sleep(0.05)
                raise AssertionError("run not done")

            first = await reconcile()
            assert (first["status"], first["items_missing"]) == ("succeeded", 5)
            assert sample("hookd_reconcile_duplicates_total", source="stripe") == duplicates
            # The second run lists the same five (its overlap): all stored already.
            second = await reconcile()
            assert (second["items_checked"], second["items_missing"]) == (5, 0)
            assert sample("hookd_reconcile_duplicates_total", source="stripe") == duplicates + 5
            assert sample("hookd_reconcile_run_seconds_count", source="stripe") == durations + 2
            scrape = (await client.get("/metrics", headers=AUTH)).text
            assert metric(scrape, "hookd_reconcile_runs_started_total", "stripe") == 2
            assert metric(scrape, "hookd_reconcile_overdue_seconds", "stripe") == 0

            # Due two minutes ago and nobody ran it: overdue; while a run holds the lease, not.
            async with engine_of(pg_url) as engine:
                async with engine.begin() as conn:
                    await conn.exec_driver_sql(
                        "UPDATE reconcile_state SET next_run_at = now() - interval '120 seconds'"
                    )
                overdue = metric(
                    (await client.get("/metrics", headers=AUTH)).text,
                    "hookd_reconcile_overdue_seconds",
                    "stripe",
                )
                assert 119 <= overdue < 180
                async with engine.begin() as conn:
                    await conn.exec_driver_sql(
                        "UPDATE reconcile_state SET lease_owner = 'w:1:x', "
                        "lease_expires_at = now() + interval '60 seconds'"
                    )
            scrape = (await client.get("/metrics", headers=AUTH)).text
            assert metric(scrape, "hookd_reconcile_overdue_seconds", "stripe") == 0


async def test_metrics_are_refused_without_a_token_of_ours(
    sources: Sources, sqlite_url: str
) -> None:
    async with running_app(sources, sqlite_url, metrics_token=TOKEN) as (_, client):
        assert (await client.get("/metrics", headers=AUTH)).status_code == 200
        assert (await client.get("/metrics")).status_code == 401
        # The metrics token opens nothing else.
        assert (await client.get("/api/events", headers=AUTH)).status_code == 403
        login_page = await client.post("/admin/login", data={"token": TOKEN})
        assert login_page.status_code == 401
