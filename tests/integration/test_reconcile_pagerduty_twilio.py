"""Reconciliation of PagerDuty and Twilio sources against their emulated APIs, hookd
in-process on SQLite and PostgreSQL.

The emulators (``tests.support.emulators_pagerduty_twilio``) are real HTTP servers on
loopback speaking each provider's documented shapes; they send the signed webhooks to
the real app with some dropped, duplicated and reordered. What their lists can show
is reconciled (PagerDuty: each incident's ``incident.triggered``; Twilio: the status
callback of the status each outbound message and call shows), and exactly that: a
dropped ``incident.acknowledged`` or an intermediate ``sent`` callback stays missing.
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
from hookd.providers.base import Envelope, Verified
from hookd.sources import parse_sources
from reconcile.http import RETRIES
from reconcile.providers import pagerduty as pd_adapter
from reconcile.providers import twilio as twilio_adapter
from tests.support import emulators_pagerduty_twilio as pd_emulator
from tests.support.data import engine_of
from tests.support.emulators_pagerduty_twilio import PagerDutyEmulator, TwilioEmulator
from tests.support.reconcile_world import AUTH, ReconcileWorld, running_world
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

PD_KEY = "u+pagerdutyrestapikey"
PD_SECRET = "pagerduty-subscription-secret"
PD_URL = "https://hookd.example/hooks/pagerduty"
ACCOUNT = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "twilio-auth-token-for-hookd"
TW_URL = "https://hookd.example/hooks/twilio"

Emulator = PagerDutyEmulator | TwilioEmulator


def make_emulator(provider: str) -> Emulator:
    if provider == "pagerduty":
        return PagerDutyEmulator(PD_KEY, subscription_url=PD_URL)
    return TwilioEmulator(ACCOUNT, AUTH_TOKEN, TW_URL)


def sources_toml(provider: str, api_url: str, token: str | None = None, extra: str = "") -> str:
    if provider == "pagerduty":
        secret, public, specific = PD_SECRET, PD_URL, ""
        token = token or PD_KEY
    else:
        secret, public = AUTH_TOKEN, TW_URL
        specific = f'account_sid = "{ACCOUNT}"\nlists = ["messages", "calls"]'
        token = token or AUTH_TOKEN
    return f"""
[[sources]]
name = "{provider}"
provider = "{provider}"
secrets = ["{secret}"]
public_url = "{public}"
handlers = ["tests.support.handlers:effect_strict"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{token}"
lookback_s = 86400
overlap_s = 120
{specific}
{extra}
"""


class World(ReconcileWorld[Emulator]):
    polls = 1200

    async def send(self, **options: Any) -> dict[str, int]:
        secret = PD_SECRET if self.provider == "pagerduty" else AUTH_TOKEN
        return await self.emulator.send_webhooks(
            self.client, f"http://hookd/hooks/{self.provider}", secret, **options
        )

    async def coverage(self, since: float, until: float) -> dict[str, Any]:
        answer = await self.client.get(
            f"/api/sources/{self.provider}/coverage",
            params={"since": iso(since), "until": iso(until)},
            headers=AUTH,
        )
        assert answer.status_code == 200, answer.text
        report: dict[str, Any] = answer.json()
        return report


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture
async def world(
    request: pytest.FixtureRequest, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[World]:
    provider: str = request.param
    emulator = make_emulator(provider)
    # Twilio answers up to 1,000 a page: smaller pages, so that a run pages.
    monkeypatch.setattr(twilio_adapter, "PAGE_SIZE", 40)

    def toml(api_url: str) -> str:
        return sources_toml(provider, api_url)

    async with running_world(World, provider, emulator, toml, db_url, monkeypatch) as world:
        yield world


def add_traffic(emulator: Emulator, start: float) -> list[str]:
    """What the lists show, four hours back: the keys of the webhooks reconciliation can
    check (an incident's trigger; a message's or call's final status callback)."""
    if isinstance(emulator, PagerDutyEmulator):
        return emulator.add_events(250, start=start, step_s=30)
    keys = emulator.add_events(150, start=start, step_s=60)
    return keys + [emulator.add_call(start + 30 + i * 120) for i in range(30)]


@pytest.mark.parametrize("world", ["pagerduty", "twilio"], indirect=True)
async def test_one_pass_repairs_exactly_the_missed_then_a_second_finds_none(
    world: World,
) -> None:
    rng = random.Random(11)
    now = time.time()
    checkable = add_traffic(world.emulator, now - 4 * 3600)
    before = set(world.emulator.webhook_keys())
    # Younger than the settle window (PagerDuty 1,800 s, Twilio 300 s), their webhooks
    # not sent yet: not judged, so neither missed nor stored.
    world.emulator.add_events(4, start=now - 200, step_s=20)
    every = world.emulator.webhook_keys()
    young = set(every) - before
    others = sorted(set(every) - set(checkable))
    assert others, "webhooks no list shows: acknowledgements, intermediate statuses"
    dropped = set(rng.sample(checkable, len(checkable) // 10))
    dropped_others = set(rng.sample(sorted(set(others) - young), 5))
    doubled = set(rng.sample(sorted(set(checkable) - dropped), 8))
    unsent = dropped | dropped_others | young
    statuses = await world.send(drop=unsent, duplicate=doubled, shuffle=rng)
    assert set(statuses.values()) <= {200, 202}
    sent = len(every) - len(unsent)
    assert await world.scalar("SELECT count(*) FROM events") == sent

    run = await world.reconcile()
    assert run["status"] == "succeeded", run
    assert run["items_checked"] == len(checkable), "one item per checkable webhook"
    assert (run["items_missing"], run["items_repaired"]) == (len(dropped), len(dropped))
    assert run["pages"] >= 4, run
    assert await world.scalar("SELECT count(*) FROM events") == sent + len(dropped)
    assert await world.scalar("SELECT count(DISTINCT dedupe_key) FROM events") == sent + len(
        dropped
    )
    repaired = await keys_of(world, "origin = 'reconcile'")
    assert repaired == dropped, "exactly the dropped checkable webhooks, each once"
    # The cursor stops at the run's start less the settle window: short of the young.
    settle_end = now - settle_of(world.provider)
    assert settle_end <= run["cursor_after"] < settle_end + 120
    # Each repair, read as the webhook path reads a body, has the key and type it was
    # stored under.
    async with engine_of(world.db_url) as engine, engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT dedupe_key, type, occurred_at, body, body_encrypted, headers "
                "FROM events WHERE origin = 'reconcile'"
            )
        )
        for key, kind, occurred, body, encrypted, headers in rows:
            assert not encrypted
            as_read = enveloped(world, bytes(body), headers)
            assert (as_read.dedupe_key, as_read.type) == (key, kind)
            # The time it reached its status; a message's callback names none itself.
            assert occurred is not None
    # The acknowledgements and intermediate callbacks no list shows stay missing.
    assert not (dropped_others | young) & await keys_of(world, "true")
    await world.wait_processed(sent + len(dropped))
    assert await world.scalar("SELECT count(*) FROM calls") == sent + len(dropped)

    again = await world.reconcile()
    assert again["status"] == "succeeded", again
    assert (again["items_missing"], again["items_repaired"]) == (0, 0)
    assert again["cursor_before"] == run["cursor_after"]

    # The window the first run judged is covered, with no hole: from its start (a day
    # back, the look-back) to its end (now less the settle window).
    settle = settle_of(world.provider)
    report = await world.coverage(now - 86_000, now - settle - 60)
    assert report["covered"] is True, report
    assert [i["state"] for i in report["intervals"]] == ["checked"]
    assert report["intervals"][0]["repaired"] == len(dropped)

    # A dropped webhook arriving after all is a duplicate, counted late on the run.
    late = sorted(dropped)[:3]
    again_sent = await world.send(duplicate=set(), drop=set(every) - set(late))
    assert set(again_sent.values()) == {200}

    async def counted() -> dict[str, Any]:
        path = f"/api/reconcile-runs/{run['id']}"
        shown: dict[str, Any] = (await world.client.get(path, headers=AUTH)).json()
        return shown if shown["items_late"] == len(late) else {}

    await wait_for(counted, timeout_s=30, interval_s=0.1)
    assert await world.scalar("SELECT count(*) FROM events") == sent + len(dropped)


def enveloped(world: World, body: bytes, headers: object) -> Envelope:
    """``body`` as the receiver's envelope reads it (its signature aside)."""
    shown = json.loads(headers) if isinstance(headers, str) else headers
    assert isinstance(shown, dict)
    source = world.sources.get(world.provider)
    assert source is not None
    provider = source.adapter
    as_lists = {k: [v] for k, v in shown.items()}
    return provider.envelope(as_lists, body, Verified("reconcile", 0, None))


def settle_of(provider: str) -> float:
    return 1800.0 if provider == "pagerduty" else 300.0


async def keys_of(world: World, where: str) -> set[str]:
    async with engine_of(world.db_url) as engine, engine.connect() as conn:
        rows = await conn.execute(sa.text(f"SELECT dedupe_key FROM events WHERE {where}"))
        return {r[0] for r in rows}


@pytest.mark.parametrize(
    ("provider", "status"),
    [("pagerduty", 401), ("pagerduty", 503), ("twilio", 401), ("twilio", 503)],
)
async def test_a_refused_token_or_a_failing_api_fails_the_run_and_leaves_a_hole(
    provider: str, status: int, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 (the token refused) fails the run at once as an authentication failure; a
    5xx that persists through the run's retries fails it as a provider error. Either
    way nothing is stored, the cursor stays, and the window is a hole, not covered."""
    emulator = make_emulator(provider)
    now = time.time()
    add_traffic(emulator, now - 4 * 3600)
    # A 5xx is tried again RETRIES times within the run; then the run gives up.
    emulator.fail_next(status, count=1 if status == 401 else RETRIES + 1)

    def toml(api_url: str) -> str:
        return sources_toml(provider, api_url)

    async with running_world(World, provider, emulator, toml, pg_url, monkeypatch) as world:
        run = await world.reconcile()
        assert run["status"] == "failed", run
        expected = "auth_failed" if status == 401 else "provider_error"
        assert expected in run["error"], run
        assert (run["items_checked"], run["cursor_after"]) == (0, None)
        assert await world.scalar("SELECT count(*) FROM events") == 0
        report = await world.coverage(now - 86_000, now - 3600)
        assert report["covered"] is False, report
        assert [i["state"] for i in report["intervals"]] == ["hole"]
        reasons = [r["kind"] for r in report["intervals"][0]["reasons"]]
        print(f"\n{provider} {status}: {run['error']}; hole: {reasons}")

        # The API back (and the token right): the next run checks it all.
        ok = await world.reconcile()
        assert ok["status"] == "succeeded", ok
        assert (await world.coverage(now - 86_000, now - 3600))["covered"] is True


@pytest.mark.parametrize(
    ("provider", "table", "message"),
    [
        ("twilio", "", "'reconcile.account_sid': is required for twilio"),
        ("twilio", 'account_sid = "AC12"', "must be an Account SID"),
        ("twilio", f'account_sid = "{ACCOUNT}"\nlists = []', "names no list"),
        ("twilio", f'account_sid = "{ACCOUNT}"\nlists = ["faxes"]', "reconcile.lists"),
        ("twilio", f'account_sid = "{ACCOUNT}"\nfrom_numbers = ["555"]', "not an E.164"),
        ("pagerduty", 'service_ids = ["p-1"]', "is not a PagerDuty ID"),
        ("pagerduty", 'webhook_subscription_id = "x"', "must be a webhook subscription ID"),
    ],
)
async def test_reconcile_tables_say_what_is_missing_or_wrong(
    provider: str, table: str, message: str
) -> None:
    public = TW_URL if provider == "twilio" else PD_URL
    text = f"""
[[sources]]
name = "s"
provider = "{provider}"
secrets = ["secret"]
public_url = "{public}"
[sources.reconcile]
token = "t"
{table}
"""
    with pytest.raises(ConfigError) as raised:
        parse_sources(text, Path("hookd.toml"), env={})
    assert str(raised.value).startswith("hookd.toml: source 's': key ")
    assert message in str(raised.value)


async def test_pagerduty_registration_check_reads_the_subscription(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The subscription whose URL is the source's public_url is the registration: as
    expected at first; deactivated and without incident.triggered, drift that says so."""
    emulator = PagerDutyEmulator(PD_KEY, subscription_url=PD_URL)
    emulator.add_events(3, start=time.time() - 4 * 3600, step_s=30)

    def toml(api_url: str) -> str:
        return sources_toml("pagerduty", api_url, extra='service_ids = ["PF9KMXH"]')

    async with running_world(World, "pagerduty", emulator, toml, pg_url, monkeypatch) as world:
        run = await world.reconcile()
        assert run["registration"]["state"] == "ok", run["registration"]
        # A subscription for another service than the one reconciled: said, with the fix.
        emulator.subscriptions[0]["filter"] = {"id": "PQ9K7I8", "type": "service_reference"}
        run = await world.reconcile()
        assert run["registration"]["problems"] == [
            "the subscription sends the incidents of service PQ9K7I8 only: set "
            'service_ids = ["PQ9K7I8"], or triggers of other services are stored as missed'
        ]
        emulator.subscriptions[0]["active"] = False
        emulator.subscriptions[0]["events"] = ["incident.resolved"]
        run = await world.reconcile()
        registration = run["registration"]
        assert registration["state"] == "drift", registration
        problems = " | ".join(registration["problems"])
        assert "not active" in problems
        assert "does not send incident.triggered" in problems
        assert "service PQ9K7I8 only" in problems


async def test_twilio_authenticates_with_an_api_key_and_filters_by_sender(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API key (``api_key_sid`` and its secret as ``token``) instead of the auth
    token; ``from_numbers`` asks the list for those senders' messages only."""
    key = ("SK" + "fedcba9876543210" * 2, "api-key-secret")
    emulator = TwilioEmulator(
        ACCOUNT, AUTH_TOKEN, TW_URL, numbers=("+15017122661", "+15017122662"), api_key=key
    )
    emulator.add_events(20, start=time.time() - 4 * 3600, step_s=60)
    # Still on its way: its status callback has not come, nor is it judged.
    emulator.add_message(time.time() - 3 * 3600, sender="+15017122661", stuck="sending")
    ours = {m["sid"] for m in emulator.messages if m["from"] == "+15017122661"}
    resting = {
        m["sid"]
        for m in emulator.messages
        if m["sid"] in ours and m["status"] in {"delivered", "undelivered"}
    }

    def toml(api_url: str) -> str:
        extra = f'api_key_sid = "{key[0]}"\nfrom_numbers = ["+15017122661"]'
        return sources_toml("twilio", api_url, token=key[1], extra=extra)

    async with running_world(World, "twilio", emulator, toml, pg_url, monkeypatch) as world:
        run = await world.reconcile()
        assert run["status"] == "succeeded", run
        assert all(q.get("From") == "+15017122661" for q in emulator.queries)
        stored = await keys_of(world, "true")
        assert stored, "nothing was sent: every callback is missing"
        assert {k.split(":")[1] for k in stored} == resting
        assert run["items_checked"] == len(resting)
        bodies = await world.scalar(
            "SELECT count(*) FROM events WHERE type IN ('message.delivered', 'message.undelivered')"
        )
        assert bodies == len(stored) == run["items_repaired"]


async def test_pagerduty_goes_on_below_the_oldest_time_past_the_offset_limit(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PagerDuty answers no offset past 10,000 (here: 300, to keep the log small): the
    run goes on from offset 0 below the oldest entry it saw, and checks every trigger
    once."""
    monkeypatch.setattr(pd_emulator, "PD_MAX_OFFSET_END", 300)
    monkeypatch.setattr(pd_adapter, "MAX_OFFSET_END", 300)
    emulator = PagerDutyEmulator(PD_KEY, subscription_url=PD_URL)
    keys = emulator.add_events(400, start=time.time() - 6 * 3600, step_s=30)

    def toml(api_url: str) -> str:
        return sources_toml("pagerduty", api_url)

    async with running_world(World, "pagerduty", emulator, toml, pg_url, monkeypatch) as world:
        run = await world.reconcile()
        assert run["status"] == "succeeded", run
        assert (run["items_checked"], run["items_repaired"]) == (400, 400)
        assert await keys_of(world, "origin = 'reconcile'") == set(keys)
    offsets = [int(q["offset"]) for q in emulator.queries]
    assert max(offsets) + 100 <= 300
    assert offsets.count(0) >= 2, "started again from offset 0, lower down"


async def test_pagerduty_fails_a_run_whose_log_is_too_dense_to_page_below(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More entries at one time than the offset limit reaches: nothing lower to go on
    from, so the run fails (its window a hole) rather than ending short of it."""
    monkeypatch.setattr(pd_emulator, "PD_MAX_OFFSET_END", 300)
    monkeypatch.setattr(pd_adapter, "MAX_OFFSET_END", 300)
    emulator = PagerDutyEmulator(PD_KEY, subscription_url=PD_URL)
    emulator.add_events(400, start=time.time() - 6 * 3600, step_s=0)

    def toml(api_url: str) -> str:
        return sources_toml("pagerduty", api_url)

    async with running_world(World, "pagerduty", emulator, toml, pg_url, monkeypatch) as world:
        run = await world.reconcile()
    assert run["status"] == "failed", run
    assert run["error"].startswith("too_many_entries: more than 300 log entries at "), run
