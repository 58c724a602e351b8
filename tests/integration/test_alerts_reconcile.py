"""The reconciliation alerts, driven by their real causes against an emulated provider
API: hookd in-process on PostgreSQL, its runs started through the operations API, the
alerts evaluated by the schedule's own code (``AlertSchedule.evaluate``).

- A provider API that worked, then refuses the token: each run fails, three in a row switch the
  source's reconciliation off, and ``reconcile_failing`` opens (and the intervals those
  runs set out to check are a ``coverage_hole``). The token accepted again and the
  source switched on, the next run succeeds and covers them: both resolve by
  themselves.
- A failed run leaves a hole; a covering run fills it: ``coverage_hole`` opens, then
  resolves.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
import sqlalchemy as sa

from hookd.runtime.alerts import AlertSchedule
from hookd.sources import Sources
from store.admin import alerts as store_alerts
from store.reconcile import audit
from tests.support.data import engine_of
from tests.support.reconcile_world import (
    AUTH,
    ReconcileWorld,
    make_emulator,
    running_world,
    sources_toml,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio


class World(ReconcileWorld[object]):
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


async def live(world: World, sources: Sources) -> dict[str, str]:
    """One evaluation after this moment, as the schedule makes it (this test's, or the
    app's own schedule if it takes the lease first): the live alerts' kinds and keys."""
    asked = datetime.now(UTC)
    async with engine_of(world.db_url) as engine, httpx.AsyncClient() as client:
        async with engine.begin() as conn:  # due at once: the period is for processes
            await conn.execute(
                sa.text(
                    "UPDATE maintenance_state SET last_finished_at = NULL WHERE task = 'alerts'"
                )
            )
        schedule = AlertSchedule(engine, sources, client, prune_every_s=0)

        async def evaluated() -> bool:
            if await schedule.evaluate(datetime.now(UTC)) is not None:
                return True
            async with engine.connect() as conn:
                last = (
                    await conn.execute(
                        sa.text(
                            "SELECT last_finished_at FROM maintenance_state WHERE task = 'alerts'"
                        )
                    )
                ).scalar()
            return last is not None and last.replace(tzinfo=UTC) >= asked

        await wait_for(evaluated, timeout_s=30, interval_s=0.2)
        rows = await store_alerts.listed(engine, status="live")
    return {row.kind: row.key for row in rows}


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_a_token_refused_then_accepted_opens_then_resolves_reconcile_failing(
    world: World,
) -> None:
    world.emulator.add_events(3, start=time.time() - 600, step_s=1.0)  # type: ignore[attr-defined]
    assert (await world.reconcile())["status"] == "succeeded"  # it worked, once
    world.emulator.fail_next(401, count=3)  # type: ignore[attr-defined]  # the token revoked
    for _ in range(3):
        run = await world.reconcile()
        assert run["status"] == "failed", run
    alerts = await live(world, world.sources)
    assert alerts.get("reconcile_failing") == "github", alerts
    assert alerts.get("coverage_hole") == "github", alerts
    # The token accepted again (the emulator no longer refuses), the source switched on.
    enabled = await world.client.post("/api/sources/github/enable", headers=AUTH)
    assert enabled.status_code == 200, enabled.text
    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    alerts = await live(world, world.sources)
    assert "reconcile_failing" not in alerts, alerts
    assert "coverage_hole" not in alerts, alerts
    async with engine_of(world.db_url) as engine:
        resolved = await store_alerts.listed(engine, status="resolved")
    assert sorted(row.kind for row in resolved) == ["coverage_hole", "reconcile_failing"]
    assert {row.resolved_by for row in resolved} == {"hookd: the condition cleared"}


@pytest.mark.parametrize("world", ["stripe"], indirect=True)
async def test_a_failed_run_leaves_a_hole_that_a_covering_run_fills(world: World) -> None:
    world.emulator.add_events(5, start=time.time() - 600, step_s=1.0)  # type: ignore[attr-defined]
    assert (await world.reconcile())["status"] == "succeeded"
    assert "coverage_hole" not in await live(world, world.sources)
    world.emulator.add_events(5, start=time.time() - 60, step_s=1.0)  # type: ignore[attr-defined]
    world.emulator.fail_next(500, count=50)  # type: ignore[attr-defined]  # the API down
    run = await world.reconcile()
    assert run["status"] == "failed", run
    assert (await live(world, world.sources)).get("coverage_hole") == "stripe"
    world.emulator._faults.clear()  # type: ignore[attr-defined]  # the API is back
    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert "coverage_hole" not in await live(world, world.sources)


PUBLIC_URL = "https://hooks.example.test/hooks/github"


def registered_toml(api_url: str) -> str:
    """The GitHub source with the public URL its registration must post to."""
    return sources_toml("github", api_url).replace(
        'provider = "github"', f'provider = "github"\npublic_url = "{PUBLIC_URL}"', 1
    )


@pytest.fixture
async def registered(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    emulator = make_emulator("github")
    emulator.hook_url = "https://old-host.example.test/hooks/github"  # type: ignore[union-attr]
    async with running_world(
        World, "github", emulator, registered_toml, pg_url, monkeypatch
    ) as world:
        yield world


async def test_a_registration_that_drifted_then_is_fixed_opens_then_resolves_drift(
    registered: World,
) -> None:
    world = registered
    run = await world.reconcile()
    assert run["registration"]["ok"] is False, run
    assert (await live(world, world.sources)).get("registration_drift") == "github"
    # Fixed at the provider: the hook posts to the source's public URL again.
    world.emulator.hook_url = PUBLIC_URL  # type: ignore[attr-defined]
    run = await world.reconcile()
    assert run["registration"]["ok"] is True, run
    assert "registration_drift" not in await live(world, world.sources)


@pytest.mark.parametrize("world", ["github"], indirect=True)
async def test_deliveries_acknowledged_but_not_stored_open_ack_violation_until_resolved(
    world: World,
) -> None:
    """The provider lists deliveries it says hookd answered 2xx that hookd never stored
    (here: every delivery of the emulator, none of which reached hookd). Resolved by hand
    once understood, the alert stays resolved until another such delivery is found."""
    world.emulator.add_events(3, start=time.time() - 600, step_s=1.0)  # type: ignore[attr-defined]
    run = await world.reconcile()
    assert run["ack_violations"] == 3, run
    alerts = await live(world, world.sources)
    assert alerts.get("ack_violation") == "github"
    async with engine_of(world.db_url) as engine:
        [row] = await store_alerts.listed(engine, status="live", kind="ack_violation")
    assert row.severity == "critical"
    resolved = await world.client.post(f"/api/alerts/{row.id}:resolve", headers=AUTH)
    assert resolved.status_code == 200, resolved.text
    assert "ack_violation" not in await live(world, world.sources)
    # Another one found later (recorded as a run records it) opens a new alert.
    async with engine_of(world.db_url) as engine, engine.begin() as conn:
        await audit.record_violations(
            conn, "github", run["id"], [audit.Acked("later-guid")], datetime.now(UTC)
        )
    assert (await live(world, world.sources)).get("ack_violation") == "github"
    async with engine_of(world.db_url) as engine:
        [again] = await store_alerts.listed(engine, status="live", kind="ack_violation")
    assert again.id != row.id and again.value == 1
