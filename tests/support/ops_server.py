"""hookd on a real socket with something in every resource of the operations API:
events of every origin, processed and dead, a finished reconcile run, and alerts open,
acknowledged and resolved. The API
tests fuzz it (``test_openapi.py``) and check its answers against the document's
schemas (``test_openapi_schemas.py``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.providers.signing import sample_event
from hookd.sources import Sources, parse_sources
from store.admin import alerts as store_alerts
from tests.support.alerts import apply, breaker, dead, failing
from tests.support.asgi import running_app
from tests.support.constants import SECRETS, SOURCES_TOML
from tests.support.emulators import GitHubEmulator
from tests.support.http import serve_app
from tests.support.waiting import wait_for

TOKEN = "ops-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_TOKEN = "provider-api-token"
RECONCILED = "gh-reconciled"
DOOMED = "doomed"


def sources_for(api_url: str) -> Sources:
    """The shared sources, one that reconciles (against the emulator), one whose events die."""
    text = f"""{SOURCES_TOML}
[[sources]]
name = "{RECONCILED}"
provider = "github"
secrets = ["{SECRETS["github"]}"]
[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{API_TOKEN}"
hook = "repos/octo/hello/hooks/42"

[[sources]]
name = "{DOOMED}"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]
handlers = ["tests.support.handlers:echo_failure"]
max_attempts = 1
"""
    return parse_sources(text, Path("openapi.toml"), env={})


@dataclass
class Served:
    url: str
    event_ids: list[str]
    run_ids: list[str]
    sources: list[str] = field(default_factory=lambda: [RECONCILED, DOOMED, "github"])
    operation_ids: list[str] = field(default_factory=list)
    alert_ids: list[str] = field(default_factory=list)


async def wait_done(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    async def done() -> dict[str, Any]:
        seen.append((await client.get(path, headers=AUTH)).json())
        return seen[-1] if seen[-1]["done"] else {}

    # 10 s: the 200 pauses of 0.05 s this loop was written with.
    return await wait_for(
        done, timeout_s=10, interval_s=0.05, message=lambda: f"{path} not done: {seen[-1]}"
    )


@contextlib.asynccontextmanager
async def served_api(db_url: str) -> AsyncIterator[Served]:
    """hookd on a real socket, with events of every origin and status, and reconcile runs."""
    emulator = GitHubEmulator(API_TOKEN)
    emulator.add_events(3, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        sources = sources_for(api_url)
        async with running_app(
            sources, db_url, admin_token=TOKEN, sweep_s=0.05, reconcile_schedule=False
        ) as (app, client):
            event_ids = []
            for i, (name, provider) in enumerate(
                [("github", "github"), ("stripe", "stripe"), ("standard", "standard")] * 2
                + [(DOOMED, "stripe")]
            ):
                headers, body = sample_event(provider, SECRETS[provider], i)
                response = await client.post(f"/hooks/{name}", content=body, headers=headers)
                assert response.status_code == 202, response.text
                event_ids.append(response.json()["event_id"])
            started = await client.post(f"/api/sources/{RECONCILED}/reconcile", headers=AUTH)
            assert started.status_code == 202, started.text
            run = await wait_done(client, f"/api/reconcile-runs/{started.json()['id']}")
            assert (run["status"], run["items_repaired"]) == ("succeeded", 3), run
            dead = await wait_done(client, f"/api/events/{event_ids[-1]}")
            assert dead["status"] == "dead" and dead["error"] is not None, dead
            listed = (await client.get("/api/events?limit=500", headers=AUTH)).json()
            event_ids = [e["id"] for e in listed["events"]]
            assert len(event_ids) == 10
            counted = await client.post(
                "/api/operations",
                headers=AUTH,
                json={"action": "replay", "filter": {"source": DOOMED}, "dry_run": True},
            )
            assert counted.status_code == 200, counted.text
            alert_ids = await alerts_of_every_state(app.state.engine)
            async with serve_app(app) as url:
                yield Served(
                    url,
                    event_ids,
                    [run["id"]],
                    operation_ids=[counted.json()["id"]],
                    alert_ids=alert_ids,
                )


async def alerts_of_every_state(engine: AsyncEngine) -> list[str]:
    """Alerts as the lifecycle makes them: one open, one acknowledged, one resolved."""
    now = datetime.now(UTC)
    opened = (await apply(engine, [dead(), breaker(), failing()], now)).opened
    await store_alerts.acknowledge(engine, opened[1], "api token:admin", now)
    await apply(engine, [dead(), breaker()], now + timedelta(seconds=1))
    return opened
