"""The PagerDuty and Twilio API emulators speak the documented shapes over real
loopback HTTP, and sign their webhooks as the providers do (Twilio's own request
validator checks its callbacks)."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from twilio.request_validator import RequestValidator

from hookd.providers.base import Verified
from hookd.providers.pagerduty import PROVIDER as PAGERDUTY
from tests.support import emulator_servers
from tests.support.emulator_servers import Target
from tests.support.emulators_pagerduty_twilio import (
    PAGERDUTY_PAGE_FIELDS,
    PAGERDUTY_TRIGGER_FIELDS,
    TWILIO_CALL_FIELDS,
    TWILIO_MESSAGE_FIELDS,
    TWILIO_PAGE_FIELDS,
    PagerDutyEmulator,
    TwilioEmulator,
)

pytestmark = pytest.mark.anyio

PD_KEY = "u+pagerdutyrestapikey"
PD_SECRET = "pagerduty-subscription-secret"
ACCOUNT = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "twilio-auth-token"
PUBLIC_URL = "https://hookd.example/hooks/twilio"
PD_HEADERS = {
    "Authorization": f"Token token={PD_KEY}",
    "Accept": "application/vnd.pagerduty+json;version=2",
}


def webhook_key(headers: Mapping[str, str], body: bytes) -> str:
    """The key hookd stores a PagerDuty webhook under."""
    as_lists = {k: [v] for k, v in headers.items()}
    return PAGERDUTY.envelope(as_lists, body, Verified("pagerduty-v1", 0, None)).dedupe_key


anyio_backend = emulator_servers.anyio_backend
servers = emulator_servers.servers
serve = emulator_servers.serve
target = emulator_servers.recording_target(webhook_key)


def basic(user: str, password: str) -> dict[str, str]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


async def test_pagerduty_log_entries_page_filter_and_expand(serve: Any) -> None:
    emulator = PagerDutyEmulator(PD_KEY)
    start = time.time() - 3600
    keys = emulator.add_events(120, start=start, step_s=10)
    base = serve(emulator.app)
    async with httpx.AsyncClient(base_url=base, headers=PD_HEADERS) as client:
        seen: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = (
                await client.get(
                    "/log_entries",
                    params={"is_overview": "true", "limit": 500, "offset": offset},
                )
            ).json()
            assert page["limit"] == 100, "PagerDuty answers 100 a page at most"
            seen += page["log_entries"]
            if not page["more"]:
                break
            offset += len(page["log_entries"])
        # The shapes of PagerDuty's published example.
        assert set(page) == PAGERDUTY_PAGE_FIELDS
        first_trigger = next(e for e in seen if e["type"] == "trigger_log_entry")
        assert set(first_trigger) >= PAGERDUTY_TRIGGER_FIELDS
        # The overview leaves the notifications out: triggers and acknowledgements.
        kinds = {e["type"] for e in seen}
        assert kinds == {"trigger_log_entry", "acknowledge_log_entry"}
        assert len(seen) == 120 + 120 // emulator.ack_every
        times = [e["created_at"] for e in seen]
        assert times == sorted(times, reverse=True), "newest first"
        everything = (await client.get("/log_entries", params={"limit": 100})).json()
        assert "notify_log_entry" in {e["type"] for e in everything["log_entries"]}

        # since/until bound the log; include[]=incidents expands the incident.
        window = await client.get(
            "/log_entries",
            params={
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 100)),
                "until": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 200)),
                "is_overview": "true",
                "include[]": "incidents",
            },
        )
        entries = window.json()["log_entries"]
        triggers = [e for e in entries if e["type"] == "trigger_log_entry"]
        assert len(triggers) == 10
        assert all(e["incident"]["type"] == "incident" for e in entries)
        assert all("assignments" in e["incident"] for e in entries)

        # The 10,000 offset limit, and the error shape.
        refused = await client.get("/log_entries", params={"offset": 9950, "limit": 100})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == 2001
        bad = await client.get("/log_entries", headers={"Authorization": "Token token=nope"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (401, 2006)
        bearer = await client.get("/log_entries", headers={"Authorization": f"Bearer {PD_KEY}"})
        assert bearer.status_code == 401

        subscriptions = (await client.get("/webhook_subscriptions")).json()
        assert subscriptions["webhook_subscriptions"][0]["type"] == "webhook_subscription"
        one = await client.get("/webhook_subscriptions/PY1OL64")
        assert one.json()["webhook_subscription"]["active"] is True
        assert (await client.get("/webhook_subscriptions/PNONE01")).status_code == 404

    # A trigger's log entry id is not its webhook's event.id: only the incident joins them.
    entry_ids = {e["id"] for e in seen}
    event_ids = {event["event"]["id"] for _, event in emulator.webhooks}
    assert not entry_ids & event_ids
    assert keys == [f"incident.triggered:{i}" for i in emulator.incidents]


async def test_pagerduty_webhooks_are_signed_and_keyed_as_hookd_keys_them(
    serve: Any, target: tuple[Target, str]
) -> None:
    recorder, url = target
    emulator = PagerDutyEmulator(PD_KEY)
    keys = emulator.add_events(8, start=time.time() - 600, step_s=10)
    async with httpx.AsyncClient() as client:
        statuses = await emulator.send_webhooks(client, url, PD_SECRET, drop={keys[0]})
    assert set(statuses.values()) == {202}
    assert set(recorder.keys()) == set(emulator.webhook_keys()) - {keys[0]}
    secret = PAGERDUTY.parse_secret(PD_SECRET)
    for headers, body in recorder.received:
        as_lists = {k: [v] for k, v in headers.items()}
        assert PAGERDUTY.verify_request(as_lists, body, [secret], time.time(), 300).key_index == 0


async def test_twilio_lists_page_with_next_page_uri_and_filter(serve: Any) -> None:
    emulator = TwilioEmulator(
        ACCOUNT, AUTH_TOKEN, PUBLIC_URL, numbers=("+15017122661", "+15017122662")
    )
    start = time.time() - 7200
    emulator.add_events(95, start=start, step_s=60)
    for i in range(7):
        emulator.add_call(start + i * 600)
    base = serve(emulator.app)
    path = f"/2010-04-01/Accounts/{ACCOUNT}/Messages.json"
    async with httpx.AsyncClient(base_url=base, headers=basic(ACCOUNT, AUTH_TOKEN)) as client:
        listed: list[dict[str, Any]] = []
        url: str | None = f"{path}?PageSize=20"
        pages = 0
        while url:
            page = (await client.get(url)).json()
            pages += 1
            assert page["page_size"] == 20
            listed += page["messages"]
            url = page["next_page_uri"]
        assert pages == 5
        assert set(page) == TWILIO_PAGE_FIELDS | {"messages"}
        assert all(set(m) == TWILIO_MESSAGE_FIELDS for m in listed)
        assert sorted(m["sid"] for m in listed) == sorted(m["sid"] for m in emulator.messages)
        assert all(m["date_sent"].endswith("+0000") for m in listed), "RFC 2822"

        after = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(start + 3600))
        recent = (await client.get(path, params={"DateSent>": after, "PageSize": 1000})).json()
        assert len(recent["messages"]) == 35
        assert recent["next_page_uri"] is None
        mine = (await client.get(path, params={"From": "+15017122662", "PageSize": 1000})).json()
        assert {m["from"] for m in mine["messages"]} == {"+15017122662"}
        calls = (
            await client.get(f"/2010-04-01/Accounts/{ACCOUNT}/Calls.json", params={"PageSize": 5})
        ).json()
        assert len(calls["calls"]) == 5 and calls["next_page_uri"]
        assert all(set(c) == TWILIO_CALL_FIELDS for c in calls["calls"])

        refused = await client.get(path, headers=basic(ACCOUNT, "wrong"))
        assert (refused.status_code, refused.json()["code"]) == (401, 20003)
        other = f"/2010-04-01/Accounts/AC{'f' * 32}/Messages.json"
        assert (await client.get(other)).status_code == 403


async def test_twilio_callbacks_verify_with_twilios_validator(
    serve: Any, target: tuple[Target, str]
) -> None:
    recorder, url = target
    emulator = TwilioEmulator(ACCOUNT, AUTH_TOKEN, PUBLIC_URL)
    emulator.add_events(10, start=time.time() - 600, step_s=10)
    emulator.add_call(time.time() - 300)
    async with httpx.AsyncClient() as client:
        await emulator.send_webhooks(client, url, AUTH_TOKEN)
    validator = RequestValidator(AUTH_TOKEN)
    assert len(recorder.received) == len(emulator.callbacks)
    for headers, body in recorder.received:
        params = dict(parse_qsl(body.decode()))
        assert validator.validate(PUBLIC_URL, params, headers["x-twilio-signature"])
