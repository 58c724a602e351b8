"""Reconciliation against emulated provider APIs: find and repair what webhooks never brought.

The emulators are real HTTP servers on loopback that speak the providers'
documented shapes; they also send the signed webhooks, so a test can drop,
duplicate and reorder deliveries and then check what one reconciliation pass does.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hookd.sources import parse_sources
from store.ids import new_id
from store.reconcile import runs as rstate
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of, scalar
from tests.support.emulators import GitHubEmulator, StripeEmulator
from tests.support.http import serve_app
from tests.support.reconcile_world import (
    API_TOKEN,
    AUTH,
    STRIPE_KEY,
    TOKEN,
    Emulator,
    ReconcileWorld,
    make_emulator,
    running_world,
    sources_toml,
)

pytestmark = pytest.mark.anyio


class World(ReconcileWorld[Emulator]):
    pass


@pytest.fixture
async def world(
    request: pytest.FixtureRequest, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[World]:
    provider: str = request.param
    emulator = make_emulator(provider)
    toml = functools.partial(sources_toml, provider)
    async with running_world(World, provider, emulator, toml, pg_url, monkeypatch) as world:
        yield world


def webhook_url(provider: str) -> str:
    return f"http://hookd/hooks/{provider}"


@pytest.mark.parametrize(
    ("world", "count"), [("github", 2000), ("stripe", 2000), ("slack", 300)], indirect=["world"]
)
async def test_one_pass_repairs_exactly_the_dropped_events(world: World, count: int) -> None:
    rng = random.Random(11)
    keys = world.emulator.add_events(count, start=time.time() - 3600, step_s=1.0)
    dropped = set(rng.sample(keys, count // 10))
    doubled = set(rng.sample(sorted(set(keys) - dropped), count // 20))
    statuses = await world.emulator.send_webhooks(
        world.client,
        webhook_url(world.provider),
        SECRETS[world.provider],
        drop=dropped,
        duplicate=doubled,
        shuffle=rng,
    )
    assert set(statuses.values()) <= {200, 202}
    assert await world.scalar("SELECT count(*) FROM events") == count - len(dropped)

    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert run["items_checked"] == count
    assert run["items_missing"] == len(dropped)
    assert run["items_repaired"] == len(dropped)
    assert run["cursor_after"] is not None
    assert await world.scalar("SELECT count(*) FROM events") == count
    assert await world.scalar("SELECT count(DISTINCT dedupe_key) FROM events") == count
    assert await world.scalar("SELECT count(*) FROM events WHERE origin = 'reconcile'") == len(
        dropped
    )
    await world.wait_processed(count)
    assert await world.scalar("SELECT count(*) FROM effects") == count
    assert await world.scalar("SELECT count(*) FROM calls") == count, "a handler ran twice"
    assert await world.metric("hookd_reconcile_missed_total") == len(dropped)

    again = await world.reconcile()
    assert again["status"] == "succeeded"
    assert again["items_missing"] == 0
    assert again["cursor_before"] == run["cursor_after"]
    assert await world.metric("hookd_reconcile_missed_total") == len(dropped)
    print(
        f"\n{world.provider}: checked={run['items_checked']} api_calls={run['api_calls']} "
        f"({1000 * run['api_calls'] / run['items_checked']:.1f} per 1000 checked)"
    )


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_odd_labels_are_repaired_safely_and_an_unusable_id_fails_the_run(
    world: World,
) -> None:
    """A listed event's type with a NUL or 300 characters is repaired with the type in
    the receiver's safe form (before, the repair's insert failed the run on PostgreSQL,
    and every later run too); an id no row can hold fails the run with a clear reason
    instead of a driver error, and covers nothing."""
    now = time.time()
    world.emulator.add_event(now - 600, type="invoice.\x00paid")
    world.emulator.add_event(now - 590, type="t" * 300)
    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert run["items_repaired"] == 2
    assert await world.scalar("SELECT count(*) FROM events WHERE type = 'invoice.\ufffdpaid'") == 1
    assert await world.scalar("SELECT max(length(type)) FROM events") == 255

    # Inside the next run's overlap with this one, so that it is listed again.
    bad = world.emulator.add_event(float(run["cursor_after"]) - 60)
    world.emulator._order["evt_\x1b[2Jodd"] = world.emulator._order.pop(bad["id"])
    bad["id"] = "evt_\x1b[2Jodd"
    failed = await world.reconcile()
    assert failed["status"] == "failed", failed
    assert failed["error"] == (
        "unstorable_item: the provider listed an event whose dedupe_key holds control "
        "characters; it can be neither compared nor stored"
    )
    assert await world.scalar("SELECT count(*) FROM events") == 2


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_two_runs_started_in_one_process_do_not_overlap(world: World) -> None:
    world.emulator.add_events(30, start=time.time() - 600, step_s=1.0)
    world.emulator.latency_s = 0.2  # the first run is still going when the second starts
    first, second = await asyncio.gather(
        *(world.client.post("/api/sources/stripe/reconcile", headers=AUTH) for _ in range(2))
    )
    assert (first.status_code, second.status_code) == (202, 202)
    runs = []
    for started in (first, second):
        for _ in range(300):
            run = (
                await world.client.get(f"/api/reconcile-runs/{started.json()['id']}", headers=AUTH)
            ).json()
            if run["done"]:
                break
            await asyncio.sleep(0.1)
        runs.append(run)
    assert sorted(r["status"] for r in runs) == ["lease_held", "succeeded"], runs
    assert sum(r["items_repaired"] for r in runs) == 30


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_dry_run_reports_without_writing(world: World) -> None:
    keys = world.emulator.add_events(50, start=time.time() - 600, step_s=1.0)
    await world.emulator.send_webhooks(
        world.client, webhook_url("stripe"), SECRETS["stripe"], drop=set(keys[:7])
    )
    run = await world.reconcile(dry_run=True)
    assert (run["status"], run["items_missing"], run["items_repaired"]) == ("succeeded", 7, 0)
    assert run["dry_run"] is True
    assert run["cursor_after"] is None
    assert await world.scalar("SELECT count(*) FROM events") == 43
    assert await world.metric("hookd_reconcile_missed_total") == 0


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_webhook_arriving_during_the_repair_still_makes_one_row_one_effect(
    world: World,
) -> None:
    emulator = world.emulator
    assert isinstance(emulator, GitHubEmulator)
    [guid] = emulator.add_events(1, start=time.time() - 60, step_s=1.0)
    emulator.latency_s = 0.3
    run_task = asyncio.create_task(world.reconcile())
    await asyncio.sleep(0.45)  # the listing has been answered; the fetch is in flight
    statuses = await emulator.send_webhooks(world.client, webhook_url("github"), SECRETS["github"])
    run = await run_task
    assert run["status"] == "succeeded"
    assert await world.scalar("SELECT count(*) FROM events") == 1
    await world.wait_processed(1)
    assert await world.scalar("SELECT count(*) FROM effects") == 1
    webhook_won = statuses[guid] == 202
    assert run["items_repaired"] == (0 if webhook_won else 1)
    assert await world.metric("hookd_reconcile_missed_total") == (0 if webhook_won else 1)


@pytest.mark.parametrize("world", ["github", "slack"], indirect=True)
async def test_429_with_retry_after_waits_then_finishes(world: World) -> None:
    world.emulator.add_events(20, start=time.time() - 600, step_s=1.0)
    world.emulator.fail_next(429, retry_after=2)
    started = time.monotonic()
    run = await world.reconcile()
    assert time.monotonic() - started >= 2
    assert run["status"] == "succeeded"
    assert run["items_repaired"] == 20
    assert run["rate_limited"] == 1
    assert await world.metric("hookd_provider_rate_limited_total") == 1


async def leave_a_run_behind(db_url: str, source: str, lease_left_s: float) -> str:
    """What a process SIGKILLed mid-run leaves: its run ``running`` and the source's
    lease in its name, running out in ``lease_left_s`` (negative: already expired)."""
    run_id = new_id()
    now = datetime.now(UTC)
    async with engine_of(db_url) as engine, engine.begin() as conn:
        await rstate.ensure_state(conn, source, now)
        await rstate.update_state(
            conn,
            source,
            None,
            lease_owner="gone-host:4242",
            lease_expires_at=now + timedelta(seconds=lease_left_s),
        )
        await rstate.create_run(
            conn,
            id=run_id,
            source=source,
            status="running",
            trigger="cli",
            dry_run=False,
            started_at=now - timedelta(minutes=5),
        )
    return run_id


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_next_run_closes_a_run_left_running_once_its_lease_expired(world: World) -> None:
    world.emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    left = await leave_a_run_behind(world.db_url, "stripe", lease_left_s=-1)
    run = await world.reconcile()
    assert (run["status"], run["items_repaired"]) == ("succeeded", 5), run
    closed = (await world.client.get(f"/api/reconcile-runs/{left}", headers=AUTH)).json()
    assert (closed["status"], closed["done"], closed["error"]) == (
        "failed",
        True,
        "abandoned: lease expired",
    )
    assert closed["finished_at"] is not None


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_a_run_whose_lease_is_still_live_is_left_running(world: World) -> None:
    live = await leave_a_run_behind(world.db_url, "stripe", lease_left_s=300)
    run = await world.reconcile()
    assert run["status"] == "lease_held", run
    still = (await world.client.get(f"/api/reconcile-runs/{live}", headers=AUTH)).json()
    assert (still["status"], still["error"]) == ("running", None)


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_server_errors_are_retried_within_the_run(world: World) -> None:
    world.emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    world.emulator.fail_next(500, count=2)
    run = await world.reconcile()
    assert (run["status"], run["items_repaired"]) == ("succeeded", 5)


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_three_auth_failures_disable_the_source_until_enabled(world: World) -> None:
    world.emulator.add_events(3, start=time.time() - 600, step_s=1.0)
    world.emulator.fail_next(401, count=3)
    for attempt in range(3):
        run = await world.reconcile()
        assert run["status"] == "failed", run
        assert "auth_failed" in run["error"]
        sources = (await world.client.get("/api/sources", headers=AUTH)).json()["sources"]
        state = sources[0]["reconcile"]
        assert state["state"] == ("disabled" if attempt == 2 else "active")
    assert "authentication failures" in state["reason"]
    assert await world.metric("hookd_source_reconcile_disabled") == 1
    calls = world.emulator.api_calls
    started = await world.client.post("/api/sources/github/reconcile", headers=AUTH)
    await asyncio.sleep(0.5)
    assert world.emulator.api_calls == calls, "a disabled source calls no API"
    assert started.status_code == 202

    enabled = await world.client.post("/api/sources/github/enable", headers=AUTH)
    assert enabled.json()["reconcile"]["state"] == "active"
    run = await world.reconcile()
    assert (run["status"], run["items_repaired"]) == ("succeeded", 3)
    assert await world.metric("hookd_source_reconcile_disabled") == 0


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_redeliver_mode_asks_github_to_send_again(world: World, pg_url: str) -> None:
    emulator = world.emulator
    assert isinstance(emulator, GitHubEmulator)
    keys = emulator.add_events(30, start=time.time() - 600, step_s=1.0)
    await emulator.send_webhooks(
        world.client, webhook_url("github"), SECRETS["github"], drop=set(keys[:4])
    )
    text = sources_toml("github", world.api_url, extra='repair = "redeliver"')
    sources = parse_sources(text, Path("r.toml"), env={})
    async with (
        running_app(sources, pg_url, admin_token=TOKEN, reconcile_schedule=False) as (
            app,
            client,
        ),
        serve_app(app) as hookd_url,
    ):
        emulator.webhook_target = (f"{hookd_url}/hooks/github", SECRETS["github"])
        world.client = client
        run = await world.reconcile()
        await emulator.drain()
    assert (run["status"], run["items_missing"]) == ("succeeded", 4)
    assert await world.scalar("SELECT count(*) FROM events") == 30
    assert await world.scalar("SELECT count(*) FROM events WHERE origin = 'reconcile'") == 0
    assert len(emulator.deliveries) == 34, "four redeliveries, same GUIDs"


@pytest.mark.parametrize("hook", ["app", "orgs/octo-org/hooks/7"])
async def test_github_app_and_org_hooks_are_reconciled(
    hook: str, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app hook authenticates with an RS256 JWT made from the app's private key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    if hook == "app":
        emulator = GitHubEmulator(
            "unused", hook="app/hook", app_id=4242, app_public_key=key.public_key()
        )
        auth = f'hook = "app"\napp_id = 4242\nprivate_key = """{pem}"""'
    else:
        emulator = GitHubEmulator(API_TOKEN, hook=hook)
        auth = f'hook = "{hook}"\ntoken = "{API_TOKEN}"'
    emulator.add_events(120, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        text = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
{auth}
"""
        sources = parse_sources(text, Path("app.toml"), env={})
        async with running_app(
            sources, sqlite_url, admin_token=TOKEN, reconcile_schedule=False
        ) as (_, client):
            world = World("github", emulator, api_url, sources, client, sqlite_url)
            run = await world.reconcile()
    assert (run["status"], run["items_repaired"], run["pages"]) == ("succeeded", 120, 2), run


@pytest.mark.parametrize("started_by", ["api", "schedule"])
async def test_serve_shutdown_records_its_runs_in_progress_as_failed(
    started_by: str, pg_url: str
) -> None:
    emulator = StripeEmulator(STRIPE_KEY)
    emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    emulator.latency_s = 3600  # the run is waiting on the API when the server stops
    async with serve_app(emulator.app) as api_url:
        sources = parse_sources(sources_toml("stripe", api_url), Path("r.toml"), env={})
        async with running_app(
            sources, pg_url, admin_token=TOKEN, reconcile_schedule=started_by == "schedule"
        ) as (_, client):
            if started_by == "api":
                started = await client.post("/api/sources/stripe/reconcile", headers=AUTH)
                assert started.status_code == 202
            deadline = time.monotonic() + 30
            while emulator.api_calls < 1:
                assert time.monotonic() < deadline, "the run never called the API"
                await asyncio.sleep(0.05)
        emulator.cut_latency()
    rows = await scalar(
        pg_url,
        "SELECT count(*) FROM reconcile_runs WHERE status = 'failed' "
        "AND error = 'interrupted: hookd serve shut down' AND finished_at IS NOT NULL",
    )
    assert rows == 1
    assert await scalar(pg_url, "SELECT count(*) FROM reconcile_runs") == 1
    assert (
        await scalar(pg_url, "SELECT count(*) FROM reconcile_state WHERE lease_owner IS NOT NULL")
        == 0
    ), "the lease was given back"
