"""The Mailgun and Zendesk API emulators speak the documented shapes over real loopback
HTTP, and sign their webhooks as the providers document (checked here by hand, with
the standard library, not with hookd's own verification)."""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from tests.support import emulator_servers
from tests.support.emulator_servers import Clock, Target
from tests.support.emulators_mailgun_zendesk import (
    ZENDESK_INVOCATION_FIELDS,
    MailgunEmulator,
    ZendeskEmulator,
    webhook_key,
)

pytestmark = pytest.mark.anyio

MAILGUN_KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
MAILGUN_SIGNING_KEY = "mailgun-webhook-signing-key"
ZENDESK_TOKEN = "zendesk-api-token-6wiIBWbGkBMo1mRDMuVwkw"
ZENDESK_SECRET = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3RpbmdfcHVycG9zZXNfb25seQ=="
DAY = 86_400

anyio_backend = emulator_servers.anyio_backend
servers = emulator_servers.servers
serve = emulator_servers.serve
target = emulator_servers.recording_target(webhook_key)


def mailgun_auth(key: str = MAILGUN_KEY) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode()}


def zendesk_auth(email: str = "admin@example.com", token: str = ZENDESK_TOKEN) -> dict[str, str]:
    basic = base64.b64encode(f"{email}/token:{token}".encode()).decode()
    return {"Authorization": f"Basic {basic}"}


# -- Mailgun -------------------------------------------------------------------------


async def test_mailgun_events_page_newest_first_through_paging_next(
    serve: Callable[[Any], str],
) -> None:
    mailgun = MailgunEmulator(MAILGUN_KEY, retention_days=5, listing_lag_s=60)
    clock = Clock(time.time())
    mailgun.now = clock
    old = mailgun.add_event(clock.t - 6 * DAY)
    ids = mailgun.add_events(650, clock.t - 7200, 10)
    unlisted = mailgun.add_event(clock.t - 30)  # younger than the listing lag
    base = serve(mailgun.app)
    path = f"/v3/{mailgun.domain}/events"
    async with httpx.AsyncClient(base_url=base, headers=mailgun_auth()) as client:
        query = {"begin": int(clock.t), "end": int(clock.t - DAY), "ascending": "no", "limit": 300}
        answer = await client.get(path, params=query)
        pages = [answer.json()]
        while pages[-1]["items"]:
            following = pages[-1]["paging"]["next"]
            assert following.startswith(f"{base}{path}/")
            pages.append((await client.get(following)).json())
        rfc2822 = format_datetime(datetime.fromtimestamp(clock.t - 1000, UTC), usegmt=True)
        recent = await client.get(path, params={"begin": rfc2822, "ascending": "yes"})
        only_begin = await client.get(path, params={"begin": int(clock.t)})
        too_many = await client.get(path, params={"limit": 301})
        contradicting = await client.get(
            path, params={"begin": int(clock.t), "end": int(clock.t - 60), "ascending": "yes"}
        )
        other_domain = await client.get("/v3/other.example.com/events")
    assert [len(p["items"]) for p in pages] == [300, 300, 50, 0]
    listed = [e["id"] for p in pages for e in p["items"]]
    assert listed == ids[::-1], "newest first, each once, across the pages"
    assert old not in listed and unlisted not in listed
    assert set(pages[0]["paging"]) == {"first", "last", "next", "previous"}
    first = pages[0]["items"][0]
    assert first["event"] == "delivered" and isinstance(first["timestamp"], float)
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", first["id"])
    assert first["message"]["headers"]["message-id"].endswith(f"@{mailgun.domain}")
    assert {"envelope", "flags", "delivery-status", "recipient", "storage"} <= set(first)
    ascending = [e["id"] for e in recent.json()["items"]]
    assert 29 <= len(ascending) <= 31 and ascending == ids[-len(ascending) :], "oldest first"
    assert only_begin.status_code == 400 and "ascending" in only_begin.json()["message"]
    assert too_many.status_code == 400
    assert contradicting.status_code == 400
    assert other_domain.status_code == 404
    assert mailgun.queries[0] == {k: str(v) for k, v in query.items()}


async def test_mailgun_auth_faults_and_registered_webhooks(serve: Callable[[Any], str]) -> None:
    mailgun = MailgunEmulator(MAILGUN_KEY)
    mailgun.add_events(2, time.time() - 60, 1)
    mailgun.webhooks = {"delivered": ["https://hookd.example/hooks/mailgun"], "opened": []}
    base = serve(mailgun.app)
    path = f"/v3/{mailgun.domain}/events"
    async with httpx.AsyncClient(base_url=base) as client:
        missing = await client.get(path)
        wrong = await client.get(path, headers=mailgun_auth("key-wrong"))
        mailgun.fail_next(429, retry_after=3)
        limited = await client.get(path, headers=mailgun_auth())
        mailgun.fail_next(503)
        broken = await client.get(path, headers=mailgun_auth())
        hooks = await client.get(f"/v3/domains/{mailgun.domain}/webhooks", headers=mailgun_auth())
    assert (missing.status_code, missing.text) == (401, "Forbidden")
    assert (wrong.status_code, wrong.text) == (401, "Forbidden")
    assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
    assert broken.status_code == 503
    assert hooks.json() == {
        "webhooks": {
            "delivered": {"urls": ["https://hookd.example/hooks/mailgun"]},
            "opened": {"urls": []},
        }
    }


async def test_mailgun_webhooks_carry_the_listed_event_signed(
    target: tuple[Target, str],
) -> None:
    recorder, target_url = target
    mailgun = MailgunEmulator(MAILGUN_KEY)
    ids = mailgun.add_events(4, time.time() - 60, 1)
    async with httpx.AsyncClient() as client:
        statuses = await mailgun.send_webhooks(
            client, target_url, MAILGUN_SIGNING_KEY, drop={ids[0]}, duplicate={ids[1]}
        )
    assert set(statuses) == set(ids[1:])
    assert recorder.keys() == collections.Counter({ids[1]: 2, ids[2]: 1, ids[3]: 1})
    for _, body in recorder.received:
        payload = json.loads(body)
        block = payload["signature"]
        signed = (block["timestamp"] + block["token"]).encode()
        digest = hmac.new(MAILGUN_SIGNING_KEY.encode(), signed, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(digest, block["signature"])
        assert payload["event-data"] == mailgun.event(payload["event-data"]["id"])


# -- Zendesk -------------------------------------------------------------------------


async def test_zendesk_invocations_page_by_cursor_within_seven_days(
    serve: Callable[[Any], str],
) -> None:
    zendesk = ZendeskEmulator(ZENDESK_TOKEN)
    clock = Clock(time.time())
    zendesk.now = clock
    old = zendesk.add_invocation(clock.t - 8 * DAY)
    keys = zendesk.add_events(250, clock.t - 3600, 10)
    base = serve(zendesk.app)
    path = f"/api/v2/webhooks/{zendesk.webhook_id}/invocations"
    async with httpx.AsyncClient(base_url=base, headers=zendesk_auth()) as client:
        params: dict[str, Any] = {"page[size]": 100}
        pages = []
        while True:
            page = (await client.get(path, params=params)).json()
            pages.append(page)
            if not page["meta"]["has_more"]:
                break
            params["page[after]"] = page["meta"]["after_cursor"]
        start = zendesk.invocations[11]["created_at"]
        end = zendesk.invocations[20]["created_at"]
        ranged = await client.get(path, params={"filter[from_ts]": start, "filter[to_ts]": end})
        too_big = await client.get(path, params={"page[size]": 101})
        bad_status = await client.get(path, params={"filter[status]": "lost"})
        bad_time = await client.get(path, params={"filter[from_ts]": "yesterday"})
        other = await client.get("/api/v2/webhooks/01GB2G9R1Q0B1QJQXAJX2HZZZZ/invocations")
        hook = await client.get(f"/api/v2/webhooks/{zendesk.webhook_id}")
    assert [len(p["invocations"]) for p in pages] == [100, 100, 50]
    listed = [f"invocation:{i['id']}" for p in pages for i in p["invocations"]]
    assert listed == keys[::-1], "newest first, each once"
    assert f"invocation:{old}" not in listed
    assert tuple(pages[0]["invocations"][0]) == ZENDESK_INVOCATION_FIELDS
    assert pages[0]["links"]["next"] is not None and pages[-1]["links"]["next"] is None
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", pages[0]["invocations"][0]["created_at"]
    )
    assert len(ranged.json()["invocations"]) == 10
    assert too_big.status_code == 400
    assert bad_status.status_code == 400 and bad_time.status_code == 400
    assert other.status_code == 404
    assert hook.json()["webhook"]["subscriptions"] == ["conditional_ticket_events"]


async def test_zendesk_attempts_show_the_request_and_the_receivers_answer(
    target: tuple[Target, str], serve: Callable[[Any], str]
) -> None:
    recorder, target_url = target
    zendesk = ZendeskEmulator(ZENDESK_TOKEN)
    keys = zendesk.add_events(3, time.time() - 120, 1)
    unlogged = zendesk.add_events(1, time.time() - 60, 1, logged=False)
    async with httpx.AsyncClient() as client:
        await zendesk.send_webhooks(
            client, target_url, ZENDESK_SECRET, drop={keys[0], unlogged[0]}, duplicate={keys[1]}
        )
    base = serve(zendesk.app)
    ids = [k.removeprefix("invocation:") for k in [*keys, *unlogged]]
    prefix = f"/api/v2/webhooks/{zendesk.webhook_id}/invocations"
    async with httpx.AsyncClient(base_url=base, headers=zendesk_auth()) as client:
        attempts = [(await client.get(f"{prefix}/{i}/attempts")).json()["attempts"] for i in ids]
        failed = (await client.get(prefix, params={"filter[status]": "failed"})).json()
        unknown = await client.get(f"{prefix}/1/attempts")
    dropped, doubled, delivered, hidden = attempts
    assert dropped[0]["status"] == "timeout" and dropped[0]["response"]["status"] is None
    assert json.loads(dropped[0]["request"]["payload"])["trigger"]
    assert [a["response"]["status"] for a in doubled] == [202, 202]
    assert delivered[0]["request"]["payload"].encode() == zendesk.bodies[ids[2]]
    assert delivered[0]["request"]["headers"]["X-Zendesk-Webhook-Invocation-Id"] == ids[2]
    assert "payload" not in hidden[0]["request"], "its log shows no body"
    assert {i["id"] for i in failed["invocations"]} == {ids[0], ids[3]}
    assert zendesk.invocation(ids[2])["latest_status"] == 202
    assert unknown.status_code == 404
    # Signed as Zendesk documents: base64(HMAC-SHA256(timestamp + body)).
    assert recorder.keys() == collections.Counter({keys[1]: 2, keys[2]: 1})
    for headers, body in recorder.received:
        stamp = headers["x-zendesk-webhook-signature-timestamp"].encode()
        mac = hmac.new(ZENDESK_SECRET.encode(), stamp + body, hashlib.sha256).digest()
        assert hmac.compare_digest(
            base64.b64encode(mac).decode(), headers["x-zendesk-webhook-signature"]
        )


async def test_zendesk_auth_and_faults(serve: Callable[[Any], str]) -> None:
    zendesk = ZendeskEmulator(ZENDESK_TOKEN)
    bearer = ZendeskEmulator(ZENDESK_TOKEN, email=None)
    zendesk.add_events(1, time.time(), 1)
    path = f"/api/v2/webhooks/{zendesk.webhook_id}/invocations"
    base = serve(zendesk.app)
    async with httpx.AsyncClient(base_url=base) as client:
        missing = await client.get(path)
        wrong = await client.get(path, headers=zendesk_auth(token="wrong"))
        other_user = await client.get(path, headers=zendesk_auth(email="agent@example.com"))
        zendesk.fail_next(429, retry_after=5)
        limited = await client.get(path, headers=zendesk_auth())
        zendesk.fail_next(500)
        broken = await client.get(path, headers=zendesk_auth())
        ok = await client.get(path, headers=zendesk_auth())
    base = serve(bearer.app)
    async with httpx.AsyncClient(base_url=base) as client:
        with_bearer = await client.get(path, headers={"Authorization": f"Bearer {ZENDESK_TOKEN}"})
        basic_there = await client.get(path, headers=zendesk_auth())
    assert [missing.status_code, wrong.status_code, other_user.status_code] == [401] * 3
    assert wrong.json() == {"error": "Couldn't authenticate you"}
    assert limited.status_code == 429 and limited.headers["retry-after"] == "5"
    assert limited.json()["error"] == "APIRateLimitExceeded"
    assert broken.status_code == 500
    assert ok.status_code == 200
    assert (with_bearer.status_code, basic_there.status_code) == (200, 401)
