"""The ack audit against emulated provider APIs: a delivery the provider says hookd
answered with a 2xx, whose key the store does not hold, is a broken promise, counted
once per key in ``hookd_ack_violations_total`` and on the run that found it, and logged
at ERROR with ids only.

The emulators send their webhooks to the real app and record what it answered, as the
providers' delivery logs do; a "forged" delivery is one the log says was answered 202
but that never reached hookd (another receiver answered for it, or its row and key were
lost).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hookd.sources import parse_sources
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.emulators import GitHubEmulator
from tests.support.emulators_paddle_square_gitlab import GitLabEmulator, PaddleEmulator
from tests.support.http import serve_app
from tests.support.logcapture import captured
from tests.support.reconcile_world import run_to_end

pytestmark = pytest.mark.anyio
TOKEN = "ack-audit-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_TOKEN = "provider-api-token"
HOOK = "repos/octo/hello/hooks/42"
PADDLE_KEY = "pdl_sdbx_apikey_01hemulatortestkey"
PADDLE_SECRET = "pdl_ntfset_01hv8x29kz0t586xy6zn1a62ny_c2lnbmluZy1rZXktZm9yLWhvb2tk"
GITLAB_KEY = "glpat-emulator"
GITLAB_SECRET = "gitlab-secret-token"

Emulator = GitHubEmulator | GitLabEmulator | PaddleEmulator


def sources_toml(provider: str, emulator: Emulator, api_url: str, extra: str = "") -> str:
    """One reconciled source; its overlap re-reads the whole hour the tests use."""
    if isinstance(emulator, GitHubEmulator):
        secret, token, specific = SECRETS["github"], API_TOKEN, f'hook = "{HOOK}"'
    elif isinstance(emulator, PaddleEmulator):
        secret, token = PADDLE_SECRET, PADDLE_KEY
        specific = f'notification_setting_id = "{emulator.setting_id}"'
    else:
        secret, token = GITLAB_SECRET, GITLAB_KEY
        specific = f'project = "{emulator.project}"\nhook_id = {emulator.hook_id}'
    return f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{secret}"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token}"
lookback_s = 7200
overlap_s = 7200
{specific}
{extra}
"""


@dataclass
class World:
    provider: str
    emulator: Emulator
    client: httpx.AsyncClient
    db_url: str

    @property
    def secret(self) -> str:
        return {"github": SECRETS["github"], "paddle": PADDLE_SECRET, "gitlab": GITLAB_SECRET}[
            self.provider
        ]

    async def send(self, drop: frozenset[str] = frozenset()) -> dict[str, int]:
        url = f"http://hookd/hooks/{self.provider}"
        return await self.emulator.send_webhooks(self.client, url, self.secret, drop=drop)

    async def reconcile(self, dry_run: bool = False) -> dict[str, Any]:
        return await run_to_end(self.client, self.provider, AUTH, dry_run=dry_run)

    async def violations_metric(self) -> float:
        text = (await self.client.get("/metrics", headers=AUTH)).text
        found = re.search(
            rf'^hookd_ack_violations_total\{{source="{self.provider}"\}} (\S+)$', text, re.M
        )
        assert found, "hookd_ack_violations_total missing"
        return float(found.group(1))

    async def ledger(self) -> int:
        return await scalar(self.db_url, "SELECT count(*) FROM ack_violations")


def make_emulator(provider: str) -> Emulator:
    if provider == "github":
        return GitHubEmulator(API_TOKEN, hook=HOOK)
    if provider == "paddle":
        return PaddleEmulator(PADDLE_KEY)
    return GitLabEmulator(GITLAB_KEY, resends_per_minute=10_000)


@pytest.fixture
async def world(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[World]:
    provider, extra = request.param if isinstance(request.param, tuple) else (request.param, "")
    emulator = make_emulator(provider)
    async with serve_app(emulator.app) as api_url:
        sources = parse_sources(
            sources_toml(provider, emulator, api_url, extra), Path("audit.toml"), env={}
        )
        async with running_app(
            sources, pg_url, admin_token=TOKEN, sweep_s=0.1, reconcile_schedule=False
        ) as (_, client):
            yield World(provider, emulator, client, pg_url)


def forge_acknowledged(world: World, count: int, at: float) -> list[str]:
    """Deliveries the provider's log says hookd answered with a 2xx, never sent to it."""
    emulator = world.emulator
    keys: list[str] = []
    for i in range(count):
        if isinstance(emulator, GitHubEmulator):
            delivery = emulator.add_delivery(at + i)
            delivery["status"], delivery["status_code"] = "OK", 202
            keys.append(delivery["guid"])
        elif isinstance(emulator, PaddleEmulator):
            event_id = emulator.add_event(at + i)
            [notification] = [
                n
                for n in emulator.notifications_for(event_id)
                if n["notification_setting_id"] == emulator.setting_id
            ]
            notification["status"] = "delivered"
            notification["times_attempted"] = 1
            keys.append(event_id)
        else:
            key = emulator.add_event(at + i)
            emulator.logs_for(key)[0]["response_status"] = "202"
            keys.append(key)
    return keys


async def test_each_guid_claimed_acknowledged_but_never_stored_counts_once_whoever_reads_it(
    pg_url: str,
) -> None:
    """GitHub: three GUIDs its deliveries list says hookd answered 202 and the store
    never saw: a dry run reports them and records nothing; the next run counts exactly
    three (and repairs them); a third run, whose overlap reads them again, adds none."""
    emulator = GitHubEmulator(API_TOKEN, hook=HOOK)
    async with serve_app(emulator.app) as api_url:
        sources = parse_sources(
            sources_toml("github", emulator, api_url), Path("audit.toml"), env={}
        )
        async with running_app(
            sources, pg_url, admin_token=TOKEN, sweep_s=0.1, reconcile_schedule=False
        ) as (_, client):
            world = World("github", emulator, client, pg_url)
            start = time.time() - 1800
            emulator.add_events(20, start=start, step_s=5.0)
            statuses = await world.send()
            assert set(statuses.values()) == {202}
            forged = forge_acknowledged(world, 3, start + 200)
            with captured("hookd.reconcile") as logs:
                dry = await world.reconcile(dry_run=True)
                assert (dry["status"], dry["ack_violations"], dry["items_missing"]) == (
                    "succeeded",
                    3,
                    3,
                )
                assert await world.ledger() == 0
                assert await world.violations_metric() == 0

                first = await world.reconcile()
                assert (first["status"], first["ack_violations"]) == ("succeeded", 3), first
                assert first["items_repaired"] == 3
                assert await world.violations_metric() == 3

                again = await world.reconcile()
                assert again["cursor_before"] - 7200 < start, "the overlap re-read the hour"
                assert (again["items_checked"], again["ack_violations"]) == (23, 0), again
                assert await world.violations_metric() == 3
            assert await world.ledger() == 3
            broken = [r for r in logs.records if r.getMessage() == "acknowledged but not stored"]
            assert all(r.levelno == logging.ERROR for r in broken)
            # Logged by the dry run and by the run that recorded them; never the body.
            assert sorted(r.__dict__["dedupe_key"] for r in broken) == sorted(forged * 2)
            assert all(r.__dict__["run_id"] in (dry["id"], first["id"]) for r in broken)
            assert not any("payload" in str(r.__dict__) for r in broken)
            sources_view = (await client.get("/api/sources", headers=AUTH)).json()["sources"]
            assert sources_view[0]["reconcile"]["ack_violations"] == 3


@pytest.mark.parametrize("world", [("github", 'repair = "redeliver"\nsettle_s = 0')], indirect=True)
async def test_a_guid_still_missing_at_the_next_run_is_not_counted_again(world: World) -> None:
    """repair = "redeliver" to a receiver GitHub cannot reach: the two GUIDs stay missing
    and every run reads them (and their redeliveries) again; the ledger holds them once."""
    assert isinstance(world.emulator, GitHubEmulator)
    forge_acknowledged(world, 2, time.time() - 900)
    runs = [await world.reconcile() for _ in range(3)]
    assert [r["status"] for r in runs] == ["succeeded"] * 3
    assert [r["items_missing"] for r in runs] == [2, 2, 2]
    assert [r["ack_violations"] for r in runs] == [2, 0, 0]
    assert await world.violations_metric() == 2
    assert await world.ledger() == 2


@pytest.mark.parametrize("world", ["github", "gitlab", "paddle"], indirect=True)
async def test_what_hookd_answered_and_what_it_never_got_raise_nothing(world: World) -> None:
    """The normal scenario: every delivery the provider made was either answered by
    hookd (and stored) or failed on the way (dropped: the log says so): the run repairs
    the dropped ones and finds no broken acknowledgement."""
    keys = world.emulator.add_events(30, start=time.time() - 1800, step_s=10.0)
    dropped = frozenset(keys[::6])
    statuses = await world.send(drop=dropped)
    assert set(statuses.values()) <= {200, 202}
    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert (run["items_missing"], run["ack_violations"]) == (len(dropped), 0)
    assert await world.violations_metric() == 0
    assert await world.ledger() == 0


@pytest.mark.parametrize("world", ["gitlab", "paddle"], indirect=True)
async def test_gitlab_and_paddle_logs_that_claim_a_2xx_for_a_missing_event_count_one_each(
    world: World,
) -> None:
    start = time.time() - 1800
    world.emulator.add_events(8, start=start, step_s=10.0)
    await world.send()
    forged = forge_acknowledged(world, 2, start + 100)
    run = await world.reconcile()
    assert (run["status"], run["ack_violations"], run["items_missing"]) == ("succeeded", 2, 2)
    again = await world.reconcile()
    assert again["ack_violations"] == 0
    assert await world.violations_metric() == 2
    recorded = await scalar(
        world.db_url,
        "SELECT count(*) FROM ack_violations WHERE dedupe_key IN ("
        + ", ".join(f"'{key}'" for key in forged)
        + f") AND run_id = '{run['id']}'",
    )
    assert recorded == 2
