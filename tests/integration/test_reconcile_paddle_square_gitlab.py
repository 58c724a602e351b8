"""Reconciliation of Paddle, Square and GitLab sources against their emulated APIs.

As ``test_reconcile.py`` does for GitHub, Stripe and Slack: the emulators are real
HTTP servers on loopback that speak each provider's documented shapes and send its
signed webhooks to the real app, with some dropped, duplicated and reordered; one
reconciliation pass must then store each event exactly once and run its handler once.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hookd.errors import ConfigError
from hookd.providers.rfc3339 import epoch
from hookd.sources import parse_sources
from tests.support.asgi import running_app
from tests.support.data import scalar
from tests.support.emulators_paddle_square_gitlab import (
    GitLabEmulator,
    PaddleEmulator,
    SquareEmulator,
)
from tests.support.http import serve_app
from tests.support.reconcile_world import AUTH, TOKEN, ReconcileWorld, running_world

pytestmark = pytest.mark.anyio
API_KEYS = {
    "paddle": "pdl_sdbx_apikey_01hemulatortestkey",
    "square": "EAAAlemulatortoken",
    "gitlab": "glpat-emulator",
}
SECRETS = {
    "paddle": "pdl_ntfset_01hv8x29kz0t586xy6zn1a62ny_c2lnbmluZy1rZXktZm9yLWhvb2tk",
    "square": "square-signature-key",
    "gitlab": "gitlab-secret-token",
}
PUBLIC_URL = "https://hookd.example/hooks/square"
TYPES = {"paddle": "transaction.completed", "square": "payment.updated", "gitlab": "push"}
DAY = 86400

Emulator = PaddleEmulator | SquareEmulator | GitLabEmulator


def make_emulator(provider: str) -> Emulator:
    if provider == "paddle":
        return PaddleEmulator(API_KEYS["paddle"])
    if provider == "square":
        return SquareEmulator(API_KEYS["square"], PUBLIC_URL)
    # GitLab's own limit is five resends a minute; these tests pace to more.
    return GitLabEmulator(API_KEYS["gitlab"], resends_per_minute=10_000)


def sources_toml(
    provider: str, emulator: Emulator, api_url: str, token: str | None = None, extra: str = ""
) -> str:
    specific = ""
    head = ""
    if isinstance(emulator, PaddleEmulator):
        specific = f'notification_setting_id = "{emulator.setting_id}"'
    elif isinstance(emulator, SquareEmulator):
        head = f'public_url = "{PUBLIC_URL}"'
    else:
        specific = f'project = "{emulator.project}"\nhook_id = {emulator.hook_id}'
    return f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{SECRETS[provider]}"]
handlers = ["tests.support.handlers:effect_strict"]
{head}

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token or API_KEYS[provider]}"
lookback_s = 86400
overlap_s = 120
{specific}
{extra}
"""


class World(ReconcileWorld[Emulator]):
    polls = 1200

    async def send(self, **options: Any) -> dict[str, int]:
        return await self.emulator.send_webhooks(
            self.client, f"http://hookd/hooks/{self.provider}", SECRETS[self.provider], **options
        )


@pytest.fixture
async def world(
    request: pytest.FixtureRequest, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[World]:
    provider: str = request.param
    emulator = make_emulator(provider)

    def toml(api_url: str) -> str:
        return sources_toml(provider, emulator, api_url)

    async with running_world(World, provider, emulator, toml, pg_url, monkeypatch) as world:
        yield world


@pytest.mark.parametrize(
    ("world", "count"), [("paddle", 700), ("square", 700), ("gitlab", 300)], indirect=["world"]
)
async def test_one_pass_repairs_exactly_the_dropped_events(world: World, count: int) -> None:
    rng = random.Random(7)
    keys = world.emulator.add_events(count, start=time.time() - 3600, step_s=1.0)
    dropped = set(rng.sample(keys, count // 10))
    doubled = set(rng.sample(sorted(set(keys) - dropped), count // 20))
    statuses = await world.send(drop=dropped, duplicate=doubled, shuffle=rng)
    assert set(statuses.values()) <= {200, 202}
    assert await world.scalar("SELECT count(*) FROM events") == count - len(dropped)

    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert run["items_checked"] == count, "one item per event (other destinations left out)"
    assert run["items_missing"] == len(dropped)
    assert run["items_repaired"] == len(dropped)
    assert await world.scalar("SELECT count(*) FROM events") == count
    assert await world.scalar("SELECT count(DISTINCT dedupe_key) FROM events") == count
    reconciled = "SELECT count(*) FROM events WHERE origin = 'reconcile'"
    assert await world.scalar(reconciled) == len(dropped)
    # Stored as the webhook would have been: its type, and (where the payload has one)
    # its time.
    kind = TYPES[world.provider]
    assert await world.scalar(f"SELECT count(*) FROM events WHERE type = '{kind}'") == count
    if world.provider != "gitlab":
        assert await world.scalar(f"{reconciled} AND occurred_at IS NOT NULL") == len(dropped)
    else:
        # GitLab logs what it sent with e-mail addresses redacted: that is what is stored.
        redacted = f"{reconciled} AND position('[REDACTED]'::bytea in body) > 0"
        assert await world.scalar(redacted) == len(dropped)
        kept = f"{reconciled} AND (headers::jsonb ->> 'idempotency-key') IS NOT NULL"
        assert await world.scalar(kept) == len(dropped)
    await world.wait_processed(count)
    assert await world.scalar("SELECT count(*) FROM effects") == count
    assert await world.scalar("SELECT count(*) FROM calls") == count, "a handler ran twice"
    assert await world.metric("hookd_reconcile_missed_total") == len(dropped)

    again = await world.reconcile()
    assert again["status"] == "succeeded"
    assert again["items_missing"] == 0
    assert again["cursor_before"] == run["cursor_after"]
    assert await world.metric("hookd_reconcile_missed_total") == len(dropped)


@pytest.mark.parametrize("world", ["paddle", "gitlab"], indirect=True)
async def test_redeliver_mode_asks_the_provider_to_send_again(world: World, pg_url: str) -> None:
    """Paddle replays a notification it has ``delivered`` or that ``failed`` (one it is
    still retrying is left to it); GitLab resends the logged request. Either way the
    webhook arrives again, under the same dedupe key, and nothing is stored from the list."""
    emulator = world.emulator
    keys = emulator.add_events(30, start=time.time() - 600, step_s=1.0)
    dropped = set(keys[:5])
    still_retrying = keys[0]
    if isinstance(emulator, PaddleEmulator):
        await world.send(drop=dropped, dropped_status="failed")
        emulator.notifications_for(still_retrying)[0]["status"] = "needs_retry"
    else:
        await world.send(drop=dropped)
    assert isinstance(emulator, PaddleEmulator | GitLabEmulator)
    before = len(emulator.notifications if isinstance(emulator, PaddleEmulator) else emulator.logs)
    extra = 'repair = "redeliver"'
    if isinstance(emulator, GitLabEmulator):
        extra += "\nresends_per_minute = 6000"
    text = sources_toml(world.provider, emulator, world.api_url, extra=extra)
    sources = parse_sources(text, Path("r.toml"), env={})
    outer = world.client
    async with (
        running_app(sources, pg_url, admin_token=TOKEN, reconcile_schedule=False) as (
            app,
            client,
        ),
        serve_app(app) as hookd_url,
    ):
        assert isinstance(emulator, PaddleEmulator | GitLabEmulator)
        emulator.webhook_target = (f"{hookd_url}/hooks/{world.provider}", SECRETS[world.provider])
        world.client = client
        run = await world.reconcile()
        if isinstance(emulator, PaddleEmulator):
            await emulator.drain()
    world.client = outer
    assert (run["status"], run["items_missing"]) == ("succeeded", 5), run
    assert await world.scalar("SELECT count(*) FROM events WHERE origin = 'reconcile'") == 0
    if isinstance(emulator, PaddleEmulator):
        assert await world.scalar("SELECT count(*) FROM events") == 29
        assert len(emulator.notifications) == before + 4, "four replays, same event IDs"
        assert [e for e, _ in emulator.replay_statuses if e == still_retrying] == []
        assert {status for _, status in emulator.replay_statuses} == {202}
        # Paddle's own retry brings the last one.
        await world.send(drop=set(keys) - {still_retrying})
    else:
        assert len(emulator.logs) == before + 5, "five resends, same Idempotency-Keys"
        assert sorted(k for k, _ in emulator.resent) == sorted(dropped)
        assert {status for _, status in emulator.resent} == {202}
    assert await world.scalar("SELECT count(*) FROM events") == 30
    assert await world.scalar("SELECT count(DISTINCT dedupe_key) FROM events") == 30


async def test_gitlab_resends_are_paced_to_resends_per_minute(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitLab allows a few resends a minute: hookd spaces them out rather than
    running into its 429 (which would make the run wait a minute each time)."""
    monkeypatch.setenv("HOOKD_DATABASE_URL", pg_url)
    emulator = GitLabEmulator(API_KEYS["gitlab"], project_id=42, resends_per_minute=120)
    keys = emulator.add_events(10, start=time.time() - 600, step_s=1.0)
    async with serve_app(emulator.app) as api_url:
        extra = 'repair = "redeliver"\nresends_per_minute = 120'
        text = sources_toml("gitlab", emulator, api_url, extra=extra).replace(
            f'project = "{emulator.project}"', "project = 42"
        )
        sources = parse_sources(text, Path("r.toml"), env={})
        async with (
            running_app(sources, pg_url, admin_token=TOKEN, reconcile_schedule=False) as (
                app,
                client,
            ),
            serve_app(app) as hookd_url,
        ):
            await emulator.send_webhooks(
                client, "http://hookd/hooks/gitlab", SECRETS["gitlab"], drop=set(keys[:4])
            )
            emulator.webhook_target = (f"{hookd_url}/hooks/gitlab", SECRETS["gitlab"])
            world = World("gitlab", emulator, api_url, sources, client, pg_url)
            started = time.monotonic()
            run = await world.reconcile()
            elapsed = time.monotonic() - started
    assert (run["status"], run["items_missing"], run["rate_limited"]) == ("succeeded", 4, 0), run
    assert elapsed >= 3 * 0.5, "four resends, half a second apart"
    assert emulator.resend_limited == 0
    assert await scalar(pg_url, "SELECT count(*) FROM events") == 10


@pytest.mark.parametrize("world", ["paddle", "square", "gitlab"], indirect=True)
async def test_a_refused_token_fails_the_run_as_an_auth_failure(world: World, pg_url: str) -> None:
    world.emulator.add_events(3, start=time.time() - 600, step_s=1.0)
    text = sources_toml(world.provider, world.emulator, world.api_url, token="not-the-token")
    sources = parse_sources(text, Path("r.toml"), env={})
    async with running_app(sources, pg_url, admin_token=TOKEN, reconcile_schedule=False) as (
        _,
        client,
    ):
        world.client = client
        run = await world.reconcile()
        listed = (await client.get("/api/sources", headers=AUTH)).json()["sources"]
    assert run["status"] == "failed", run
    assert "auth_failed" in run["error"]
    assert run["items_checked"] == 0
    assert listed[0]["reconcile"]["state"] == "active", "disabled only after three in a row"
    assert await world.scalar("SELECT count(*) FROM events") == 0


@pytest.mark.parametrize("world", ["paddle", "square", "gitlab"], indirect=True)
async def test_429_with_retry_after_waits_then_finishes(world: World) -> None:
    world.emulator.add_events(20, start=time.time() - 600, step_s=1.0)
    world.emulator.fail_next(429, retry_after=2)
    started = time.monotonic()
    run = await world.reconcile()
    assert time.monotonic() - started >= 2
    assert run["status"] == "succeeded", run
    assert run["items_repaired"] == 20
    assert run["rate_limited"] == 1
    assert await world.metric("hookd_provider_rate_limited_total") == 1


@pytest.mark.parametrize("world", ["paddle", "square", "gitlab"], indirect=True)
async def test_server_errors_are_retried_within_the_run(world: World) -> None:
    world.emulator.add_events(5, start=time.time() - 600, step_s=1.0)
    world.emulator.fail_next(502, count=2)
    run = await world.reconcile()
    assert (run["status"], run["items_repaired"]) == ("succeeded", 5), run


RETENTION = {"paddle": 90 * DAY, "square": 28 * DAY, "gitlab": 7 * DAY}


@pytest.mark.parametrize("provider", ["paddle", "square", "gitlab"])
async def test_the_window_is_capped_at_what_the_provider_keeps(
    provider: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run looking back further than the provider keeps asks only for what it
    keeps, and checks nothing older, even from an API that answers with more."""
    monkeypatch.setenv("HOOKD_DATABASE_URL", pg_url)
    emulator = make_emulator(provider)
    now = time.time()
    keep = RETENTION[provider]
    # An API more generous than the documented one: nothing expires.
    emulator.now = lambda: now - 10 * keep
    inside = emulator.add_events(3, start=now - keep + DAY, step_s=60)
    emulator.add_events(2, start=now - keep - 2 * DAY, step_s=60)
    async with serve_app(emulator.app) as api_url:
        text = sources_toml(provider, emulator, api_url).replace(
            "lookback_s = 86400", f"lookback_s = {keep * 2}"
        )
        sources = parse_sources(text, Path("r.toml"), env={})
        async with running_app(sources, pg_url, admin_token=TOKEN, reconcile_schedule=False) as (
            _,
            client,
        ):
            world = World(provider, emulator, api_url, sources, client, pg_url)
            run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert (run["items_checked"], run["items_repaired"]) == (3, 3)
    assert await scalar(pg_url, "SELECT count(*) FROM events") == len(inside)
    # What was asked for: Paddle's ``from`` and Square's ``created_at.start_at`` (GitLab's
    # list takes no time filter: its window is kept on our side).
    if isinstance(emulator, PaddleEmulator):
        asked = [q["from"] for q in emulator.queries]
    elif isinstance(emulator, SquareEmulator):
        asked = [b["query"]["filter"]["created_at"]["start_at"] for b in emulator.searches]
    else:
        asked = []
    assert all(epoch(a) >= now - keep for a in asked)
    assert all(epoch(a) <= now - keep + 120 for a in asked)


@pytest.mark.parametrize(
    ("provider", "table", "message"),
    [
        ("paddle", "", "'reconcile.notification_setting_id': is required for paddle"),
        ("paddle", 'notification_setting_id = "ntf_1"', "must be a notification setting ID"),
        ("square", 'repair = "redeliver"', "'reconcile.repair': must be 'fetch'"),
        ("square", 'event_types = ["payment updated"]', "is not a Square ID or event type"),
        ("gitlab", 'project = "octo/hello"', "'reconcile.hook_id': is required for gitlab"),
        ("gitlab", "hook_id = 7", "'reconcile.project': is required for gitlab"),
        ("gitlab", 'project = "hello"\nhook_id = 7', 'must be a project ID or path ("group/'),
        ("gitlab", 'project = "a/b"\nhook_id = 7\nhook = "app"', "'reconcile.hook': not a gitlab"),
    ],
)
async def test_reconcile_tables_say_what_is_missing_or_wrong(
    provider: str, table: str, message: str
) -> None:
    public_url = f'public_url = "{PUBLIC_URL}"' if provider == "square" else ""
    text = f"""
[[sources]]
name = "s"
provider = "{provider}"
secrets = ["{SECRETS[provider]}"]
{public_url}
[sources.reconcile]
token = "t"
{table}
"""
    with pytest.raises(ConfigError) as raised:
        parse_sources(text, Path("hookd.toml"), env={})
    assert str(raised.value).startswith("hookd.toml: source 's': key ")
    assert message in str(raised.value)
