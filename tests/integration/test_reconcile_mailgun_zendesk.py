"""Reconciliation of Mailgun and Zendesk sources against their emulated APIs, on SQLite
and PostgreSQL.

As ``test_reconcile_paddle_square_gitlab.py`` does for Paddle, Square and GitLab: the
emulators are real HTTP servers on loopback that speak each provider's documented
shapes and send its signed webhooks to the real app, some dropped, duplicated and
reordered. One pass must store each missed event exactly once (origin ``reconcile``,
under the key its webhook would have had), a second pass find nothing, the coverage
ledger show the window checked, and a webhook that comes after its repair count late.
A run that cannot finish (a refused token, an API down, an invocation whose body
Zendesk did not log) fails, and its window stays a hole with the reason.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hookd.errors import ConfigError
from hookd.sources import parse_sources
from tests.support.asgi import running_app
from tests.support.data import engine_of
from tests.support.emulators_mailgun_zendesk import MailgunEmulator, ZendeskEmulator
from tests.support.reconcile_world import AUTH, TOKEN, ReconcileWorld, running_world
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

API_KEYS = {"mailgun": "key-3ax6xnjp29jd6fds4gc373sgvjxteol0", "zendesk": "zendesk-api-token"}
SECRETS = {
    "mailgun": "mailgun-webhook-signing-key",
    "zendesk": "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3RpbmdfcHVycG9zZXNfb25seQ==",
}
PUBLIC_URLS = {
    "mailgun": "https://hookd.example/hooks/mailgun",
    "zendesk": "https://hookd.example/hooks/zendesk",
}
ZENDESK_EMAIL = "admin@example.com"
# Enough for several pages: Mailgun's are 300 events, Zendesk's 100 invocations.
COUNTS = {"mailgun": 650, "zendesk": 250}
# Old enough to be judged: Mailgun's settle window is half an hour, Zendesk's five minutes.
STARTS = {"mailgun": 3 * 3600, "zendesk": 3600}
STEPS = {"mailgun": 10.0, "zendesk": 5.0}

Emulator = MailgunEmulator | ZendeskEmulator


def make_emulator(provider: str, **options: Any) -> Emulator:
    if provider == "mailgun":
        mailgun = MailgunEmulator(API_KEYS["mailgun"])
        mailgun.webhooks = {"delivered": [PUBLIC_URLS["mailgun"]], "opened": []}
        return mailgun
    return ZendeskEmulator(
        API_KEYS["zendesk"], ZENDESK_EMAIL, endpoint=PUBLIC_URLS["zendesk"], **options
    )


def sources_toml(
    provider: str, emulator: Emulator, api_url: str, token: str | None = None, extra: str = ""
) -> str:
    if isinstance(emulator, MailgunEmulator):
        specific = f'domain = "{emulator.domain}"'
    else:
        specific = f'webhook_id = "{emulator.webhook_id}"\nemail = "{ZENDESK_EMAIL}"'
    return f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{SECRETS[provider]}"]
handlers = ["tests.support.handlers:effect_strict"]
public_url = "{PUBLIC_URLS[provider]}"

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token or API_KEYS[provider]}"
lookback_s = 86400
overlap_s = 120
{specific}
{extra}
"""


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class World(ReconcileWorld[Emulator]):
    polls = 1200

    async def send(self, **options: Any) -> dict[str, int]:
        return await self.emulator.send_webhooks(
            self.client, f"http://hookd/hooks/{self.provider}", SECRETS[self.provider], **options
        )

    def add(self, count: int) -> tuple[list[str], float, float]:
        """``count`` events of the provider, old enough to be judged: their keys, and
        the first's and last's times."""
        start = time.time() - STARTS[self.provider]
        step = STEPS[self.provider]
        keys = self.emulator.add_events(count, start, step)
        return keys, start, start + (count - 1) * step

    async def coverage(self, since: float, until: float) -> dict[str, Any]:
        answer = await self.client.get(
            f"/api/sources/{self.provider}/coverage",
            params={"since": iso(since), "until": iso(until)},
            headers=AUTH,
        )
        assert answer.status_code == 200, answer.text
        report: dict[str, Any] = answer.json()
        return report

    async def rows(self, sql: str) -> list[Any]:
        async with engine_of(self.db_url) as engine, engine.connect() as conn:
            return list((await conn.execute(sa.text(sql))).all())


@pytest.fixture
async def world(
    request: pytest.FixtureRequest, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[World]:
    provider: str = request.param
    emulator = make_emulator(provider)

    def toml(api_url: str) -> str:
        return sources_toml(provider, emulator, api_url)

    async with running_world(World, provider, emulator, toml, db_url, monkeypatch) as world:
        yield world


def hole_kinds(report: dict[str, Any]) -> list[list[str]]:
    return [[r["kind"] for r in i["reasons"]] for i in report["intervals"] if i["state"] == "hole"]


@pytest.mark.parametrize("world", ["mailgun", "zendesk"], indirect=True)
async def test_misses_are_repaired_once_then_covered_and_a_late_webhook_counts_late(
    world: World,
) -> None:
    count = COUNTS[world.provider]
    rng = random.Random(11)
    keys, first, last = world.add(count)
    dropped = set(rng.sample(keys, count // 10))
    doubled = set(rng.sample(sorted(set(keys) - dropped), count // 20))
    statuses = await world.send(drop=dropped, duplicate=doubled, shuffle=rng)
    assert set(statuses.values()) <= {200, 202}
    assert await world.scalar("SELECT count(*) FROM events") == count - len(dropped)
    lost_after_ack: str | None = None
    if isinstance(world.emulator, ZendeskEmulator):
        # Zendesk's log says the receiver took this one (a 200): the ack audit must
        # find it missing all the same.
        lost_after_ack = sorted(dropped)[0]
        invocation = lost_after_ack.removeprefix("invocation:")
        world.emulator.attempted(invocation, 200, world.emulator._logged_headers(invocation))

    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert run["items_checked"] == count
    assert (run["items_missing"], run["items_repaired"]) == (len(dropped), len(dropped))
    assert run["pages"] >= 3, "paged across several pages"
    assert run["ack_violations"] == (1 if lost_after_ack else 0)
    assert run["registration"]["ok"] is True, run["registration"]
    assert await world.scalar("SELECT count(*) FROM events") == count
    assert await world.scalar("SELECT count(DISTINCT dedupe_key) FROM events") == count
    repaired = await world.rows(
        "SELECT dedupe_key, type, occurred_at, verified_with, headers, body FROM events "
        "WHERE origin = 'reconcile'"
    )
    assert {r.dedupe_key for r in repaired} == dropped, "exactly the missed ones, once each"
    for row in repaired:
        body = json.loads(bytes(row.body))
        headers = row.headers if isinstance(row.headers, dict) else json.loads(row.headers)
        if isinstance(world.emulator, MailgunEmulator):
            # The webhook's body without its signature block.
            assert body == {"event-data": world.emulator.event(row.dedupe_key)}
            assert (row.type, row.verified_with) == ("delivered", "reconcile:mailgun-api")
            assert row.occurred_at is not None
        else:
            invocation = row.dedupe_key.removeprefix("invocation:")
            assert bytes(row.body) == world.emulator.bodies[invocation], "as Zendesk sent it"
            assert headers["x-zendesk-webhook-invocation-id"] == invocation
            assert headers["x-zendesk-webhook-id"] == world.emulator.webhook_id
            assert row.verified_with == f"reconcile:zendesk-api;invocation={invocation}"
    await world.wait_processed(count)
    assert await world.scalar("SELECT count(*) FROM calls") == count, "a handler ran twice"

    again = await world.reconcile()
    assert (again["status"], again["items_missing"], again["items_repaired"]) == (
        "succeeded",
        0,
        0,
    )
    assert again["ack_violations"] == 0, "a violation is recorded once"
    report = await world.coverage(first, last + 1)
    assert report["covered"] is True, report
    assert {i["state"] for i in report["intervals"]} == {"checked"}

    # The provider's retry of one missed event comes after all: a duplicate, counted
    # late on the run that repaired it.
    late = sorted(dropped)[-1]
    answered = await world.send(drop=set(keys) - {late})
    assert set(answered) == {late} and 200 <= answered[late] < 300
    assert await world.scalar("SELECT count(*) FROM events") == count

    async def counted() -> dict[str, Any]:
        shown: dict[str, Any] = (
            await world.client.get(f"/api/reconcile-runs/{run['id']}", headers=AUTH)
        ).json()
        return shown if shown["items_late"] == 1 else {}

    assert (await wait_for(counted, timeout_s=30, interval_s=0.05))["items_late"] == 1


@pytest.mark.parametrize("world", ["mailgun", "zendesk"], indirect=True)
async def test_a_refused_token_fails_the_run_and_leaves_a_hole(world: World) -> None:
    _, first, last = world.add(5)
    text = sources_toml(world.provider, world.emulator, world.api_url, token="not-the-token")
    sources = parse_sources(text, Path("r.toml"), env={})
    async with running_app(sources, world.db_url, admin_token=TOKEN, reconcile_schedule=False) as (
        _,
        client,
    ):
        world.client = client
        run = await world.reconcile()
        report = await world.coverage(first, last + 1)
    assert run["status"] == "failed", run
    assert "auth_failed" in run["error"]
    assert (run["items_checked"], run["items_repaired"]) == (0, 0)
    assert await world.scalar("SELECT count(*) FROM events") == 0
    assert report["covered"] is False
    assert hole_kinds(report) == [["failed"]]
    assert "auth_failed" in report["intervals"][0]["reasons"][0]["detail"]


@pytest.mark.parametrize("world", ["mailgun", "zendesk"], indirect=True)
async def test_an_api_that_keeps_failing_fails_the_run_with_a_hole(world: World) -> None:
    keys, first, last = world.add(5)
    await world.send(drop=set(keys))  # every delivery lost (Zendesk logs the attempts)
    world.emulator.fail_next(503, count=5)  # the first try and its four retries
    run = await world.reconcile()
    assert run["status"] == "failed", run
    assert "provider_error" in run["error"] and "HTTP 503" in run["error"]
    assert await world.scalar("SELECT count(*) FROM events") == 0
    report = await world.coverage(first, last + 1)
    assert (report["covered"], hole_kinds(report)) == (False, [["failed"]])
    # The API back, the next run checks the same window.
    retried = await world.reconcile()
    assert (retried["status"], retried["items_repaired"]) == ("succeeded", 5), retried
    assert (await world.coverage(first, last + 1))["covered"] is True


@pytest.mark.parametrize("world", ["zendesk"], indirect=True)
async def test_a_zendesk_invocation_without_a_logged_body_is_a_hole_with_its_reason(
    world: World,
) -> None:
    assert isinstance(world.emulator, ZendeskEmulator)
    start = time.time() - 3600
    shown = world.emulator.add_events(3, start, 5)
    hidden = world.emulator.add_events(1, start + 20, 5, logged=False)
    await world.send(drop={shown[0], hidden[0]})
    run = await world.reconcile()
    # The one invocation it cannot store fails alone: the other is repaired, the run
    # succeeds, and its window is a hole that names the invocation.
    assert (run["status"], run["items_repaired"]) == ("succeeded", 1), run
    report = await world.coverage(start, start + 30)
    assert (report["covered"], hole_kinds(report)) == (False, [["failed"]])
    detail = report["intervals"][0]["reasons"][0]["detail"]
    assert "unjudged:" in detail and "unrepairable" in detail, detail
    assert hidden[0].removeprefix("invocation:") in detail
    assert "shows the request body" in detail
    assert await world.scalar("SELECT count(*) FROM events WHERE origin = 'reconcile'") == 1


async def test_a_zendesk_webhook_subscribed_to_events_cannot_be_reconciled(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = make_emulator("zendesk", subscriptions=("zen:event-type:user.created",))
    assert isinstance(emulator, ZendeskEmulator)
    emulator.add_events(2, time.time() - 3600, 5)

    def toml(api_url: str) -> str:
        return sources_toml("zendesk", emulator, api_url)

    async with running_world(World, "zendesk", emulator, toml, db_url, monkeypatch) as world:
        run = await world.reconcile()
    assert run["status"] == "failed", run
    assert "unsupported" in run["error"] and "subscribed to Zendesk events" in run["error"]


@pytest.mark.parametrize(
    ("provider", "table", "message"),
    [
        ("mailgun", "", "'reconcile.domain': is required for mailgun"),
        ("mailgun", 'domain = "not a domain"', "must be a sending domain"),
        ("mailgun", 'domain = "mg.example.com"\nlog_retention_days = 31', "must be 30 or less"),
        ("mailgun", 'domain = "mg.example.com"\nwebhook_id = "01GB2G9R1Q"', "not a mailgun"),
        ("zendesk", 'api_url = "https://acme.zendesk.com"', "'reconcile.webhook_id': is required"),
        ("zendesk", 'webhook_id = "01GB2G9R1Q0B1QJQXAJX2HRT5C"', "'reconcile.api_url': is req"),
        ("zendesk", 'webhook_id = "no!"', "must be a webhook ID"),
        ("zendesk", 'email = "nobody"', "must be an e-mail address"),
    ],
)
async def test_reconcile_tables_say_what_is_missing_or_wrong(
    provider: str, table: str, message: str
) -> None:
    text = f"""
[[sources]]
name = "s"
provider = "{provider}"
secrets = ["{SECRETS[provider]}"]
[sources.reconcile]
token = "t"
{table}
"""
    with pytest.raises(ConfigError) as raised:
        parse_sources(text, Path("hookd.toml"), env={})
    assert str(raised.value).startswith("hookd.toml: source 's': key ")
    assert message in str(raised.value)


@pytest.mark.parametrize("world", ["mailgun", "zendesk"], indirect=True)
async def test_registration_drift_is_recorded_on_the_run(world: World) -> None:
    world.add(3)
    await world.send()
    if isinstance(world.emulator, MailgunEmulator):
        world.emulator.webhooks = {"delivered": ["https://elsewhere.example/hook"]}
        expected = "no webhook of the domain posts to the source's public_url"
    else:
        world.emulator.webhook.update(status="inactive", endpoint="https://elsewhere.example/in")
        expected = "the webhook is inactive: Zendesk sends it nothing"
    run = await world.reconcile()
    assert (run["status"], run["items_checked"], run["items_missing"]) == ("succeeded", 3, 0)
    registration = run["registration"]
    assert registration["ok"] is False, registration
    assert any(expected in p for p in registration["problems"]), registration
    if isinstance(world.emulator, ZendeskEmulator):
        assert any("https://elsewhere.example/in" in p for p in registration["problems"])
