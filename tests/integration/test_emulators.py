"""The provider API emulators speak the documented shapes, over real loopback HTTP."""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import random
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric import rsa

from hookd.sources import Sources
from store.models import EVENTS
from tests.support import emulator_servers
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.emulator_servers import Clock, Target
from tests.support.emulators import (
    GITHUB_SUMMARY_FIELDS,
    GitHubEmulator,
    SlackEmulator,
    StripeEmulator,
    make_app_jwt,
    webhook_key,
)

pytestmark = pytest.mark.anyio

TOKEN = "ghp_emulator"
STRIPE_KEY = "sk_test_emulator"
SLACK_TOKEN = "xoxb-emulator"
HOOK = "repos/octo/hello/hooks/42"
T0 = 1_700_000_000.0
DAY = 86400


anyio_backend = emulator_servers.anyio_backend
servers = emulator_servers.servers
serve = emulator_servers.serve
target = emulator_servers.recording_target(webhook_key)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def next_link(response: httpx.Response) -> str | None:
    match = re.search(r'<([^>]+)>;\s*rel="next"', response.headers.get("link", ""))
    return match.group(1) if match else None


def hmac_hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


# -- GitHub --------------------------------------------------------------------------


async def test_github_link_pagination_yields_every_delivery_once_newest_first(
    serve: Callable[[Any], str],
) -> None:
    gh = GitHubEmulator(TOKEN, HOOK, rate_limit=100)
    guids = gh.add_events(7, T0, 60)
    base = serve(gh.app)
    async with httpx.AsyncClient() as client:
        url: str | None = f"{base}/{HOOK}/deliveries?per_page=3"
        pages: list[list[dict[str, Any]]] = []
        remaining: list[int] = []
        while url is not None:
            response = await client.get(url, headers=auth(TOKEN))
            assert response.status_code == 200
            pages.append(response.json())
            remaining.append(int(response.headers["x-ratelimit-remaining"]))
            assert response.headers["x-ratelimit-limit"] == "100"
            assert int(response.headers["x-ratelimit-reset"]) > time.time()
            url = next_link(response)
            if url is not None:
                assert url.startswith(f"{base}/{HOOK}/deliveries?per_page=3&cursor=")
        default = await client.get(f"{base}/{HOOK}/deliveries", headers=auth(TOKEN))
    assert [len(p) for p in pages] == [3, 3, 1]
    listed = [d for page in pages for d in page]
    ids = [d["id"] for d in listed]
    assert ids == sorted({d["id"] for d in gh.deliveries}, reverse=True)
    assert [d["guid"] for d in listed] == guids[::-1]
    assert all(tuple(d) == GITHUB_SUMMARY_FIELDS for d in listed)
    first = listed[-1]
    assert first["delivered_at"] == "2023-11-14T22:13:20Z"
    assert (first["redelivery"], first["status"], first["status_code"]) == (False, "OK", 200)
    assert (first["event"], first["action"], first["installation_id"]) == (
        "issues",
        "opened",
        None,
    )
    assert remaining == [99, 98, 97]
    assert len(default.json()) == 7 and "link" not in default.headers
    assert gh.api_calls == 4
    assert gh.calls_by_path[f"/{HOOK}/deliveries"] == 4


async def test_github_full_delivery_matches_the_webhook_body(serve: Callable[[Any], str]) -> None:
    gh = GitHubEmulator(TOKEN, "orgs/octo/hooks/7")
    gh.add_events(2, T0, 1, event="push", action=None)
    delivery = gh.deliveries[0]
    base = serve(gh.app)
    async with httpx.AsyncClient(base_url=base) as client:
        full = await client.get(
            f"/orgs/octo/hooks/7/deliveries/{delivery['id']}", headers=auth(TOKEN)
        )
        missing = await client.get("/orgs/octo/hooks/7/deliveries/1", headers=auth(TOKEN))
        other_hook = await client.get("/orgs/octo/hooks/8/deliveries", headers=auth(TOKEN))
    assert full.status_code == 200
    body = full.json()
    assert set(GITHUB_SUMMARY_FIELDS) | {"url", "request", "response"} == set(body)
    assert body["action"] is None
    headers = body["request"]["headers"]
    assert headers["X-GitHub-Delivery"] == delivery["guid"]
    assert headers["X-GitHub-Event"] == "push"
    assert headers["X-GitHub-Hook-ID"] == "7"
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("GitHub-Hookshot/")
    assert body["response"] == {"headers": {}, "payload": ""}
    payload = json.dumps(body["request"]["payload"], separators=(",", ":")).encode()
    assert payload == GitHubEmulator.delivery_payload(delivery)
    assert missing.status_code == 404 and missing.json()["message"] == "Not Found"
    assert other_hook.status_code == 404


async def test_github_redelivery_keeps_the_guid_and_sends_the_webhook(
    target: tuple[Target, str], serve: Callable[[Any], str]
) -> None:
    recorder, target_url = target
    gh = GitHubEmulator(TOKEN, HOOK)
    gh.webhook_target = (target_url, SECRETS["github"])
    guid = gh.add_events(3, T0, 60)[1]
    original = gh.deliveries_for(guid)[0]
    base = serve(gh.app)
    async with httpx.AsyncClient(base_url=base) as client:
        attempt = await client.post(
            f"/{HOOK}/deliveries/{original['id']}/attempts", headers=auth(TOKEN)
        )
        await gh.drain()
        listed = (await client.get(f"/{HOOK}/deliveries", headers=auth(TOKEN))).json()
    assert attempt.status_code == 202 and attempt.json() == {}
    newest = listed[0]
    assert newest["guid"] == guid and newest["redelivery"] is True
    assert newest["id"] > max(d["id"] for d in listed[1:])
    assert [d["guid"] for d in listed].count(guid) == 2
    assert len(recorder.received) == 1
    headers, body = recorder.received[0]
    assert headers["x-github-delivery"] == guid
    assert headers["x-github-event"] == "issues"
    assert headers["x-github-hook-id"] == "42"
    assert headers["x-hub-signature-256"] == "sha256=" + hmac_hex(SECRETS["github"], body)
    assert body == GitHubEmulator.delivery_payload(original)
    assert gh.redelivery_statuses == [(guid, 202)]


async def test_github_app_hook_needs_a_valid_rs256_jwt(serve: Callable[[Any], str]) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    gh = GitHubEmulator("unused", "app/hook", app_id=321, app_public_key=key.public_key())
    gh.add_events(1, T0, 1)
    now = time.time()
    good = [
        make_app_jwt(key, 321),
        make_app_jwt(key, "321", iat=now - 30, exp=now + 570),
    ]
    bad = [
        make_app_jwt(other, 321),  # wrong key
        make_app_jwt(key, 322),  # wrong issuer
        make_app_jwt(key, 321, iat=now - 700, exp=now - 100),  # expired
        make_app_jwt(key, 321, iat=now - 60, exp=now + 900),  # exp more than 10 min after iat
        make_app_jwt(key, 321, header={"alg": "HS256", "typ": "JWT"}),
        "unused",
        "not.a.jwt",
    ]
    base = serve(gh.app)
    async with httpx.AsyncClient(base_url=base) as client:
        accepted = [
            (await client.get("/app/hook/deliveries", headers=auth(t))).status_code for t in good
        ]
        refused = [await client.get("/app/hook/deliveries", headers=auth(t)) for t in bad]
        no_auth = await client.get("/app/hook/deliveries")
    assert accepted == [200, 200]
    assert [r.status_code for r in refused] == [401] * len(bad)
    assert all("message" in r.json() for r in refused)
    assert no_auth.status_code == 401


async def test_github_fail_next_rate_limit_and_bad_credentials(serve: Callable[[Any], str]) -> None:
    gh = GitHubEmulator(TOKEN, HOOK, rate_limit=3)
    gh.add_events(1, T0, 1)
    path = f"/{HOOK}/deliveries"
    base = serve(gh.app)
    async with httpx.AsyncClient(base_url=base) as client:
        bad = await client.get(path, headers=auth("ghp_wrong"))
        gh.fail_next(429, retry_after=2)
        limited = await client.get(path, headers=auth(TOKEN))
        gh.fail_next(502, count=2)
        errors = [(await client.get(path, headers=auth(TOKEN))).status_code for _ in range(2)]
        ok = [(await client.get(path, headers=auth(TOKEN))).status_code for _ in range(3)]
        exhausted = await client.get(path, headers=auth(TOKEN))
        gh.latency_s = 0.2
        started = time.monotonic()
        slow = await client.get(path, headers=auth(TOKEN))
        elapsed = time.monotonic() - started
    assert bad.status_code == 401 and bad.json()["message"] == "Bad credentials"
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert int(limited.headers["x-ratelimit-reset"]) >= int(time.time()) + 1
    assert errors == [502, 502]
    assert ok == [200, 200, 200]
    assert exhausted.status_code == 403
    assert exhausted.headers["x-ratelimit-remaining"] == "0"
    assert "rate limit" in exhausted.json()["message"]
    assert slow.status_code == 403 and elapsed >= 0.2
    assert gh.api_calls == 9 and gh.calls_by_path[path] == 9


# -- Stripe --------------------------------------------------------------------------


async def test_stripe_paging_with_starting_after_and_created_filter(
    serve: Callable[[Any], str],
) -> None:
    stripe = StripeEmulator(STRIPE_KEY)
    stripe.now = Clock(T0 + DAY)
    stripe.add_events(22, T0, 10)
    tied = [stripe.add_event(T0 + 105)["id"] for _ in range(3)]  # same second as others
    stripe.add_events(2, T0 + 500, 1, type="charge.refunded")
    expected = [e["id"] for e in stripe.listed()]
    assert len(expected) == 27
    base = serve(stripe.app)
    async with httpx.AsyncClient(base_url=base) as client:
        seen: list[str] = []
        params: dict[str, Any] = {"limit": 10}
        has_more = True
        while has_more:
            page = (await client.get("/v1/events", params=params, headers=auth(STRIPE_KEY))).json()
            assert page["object"] == "list" and page["url"] == "/v1/events"
            assert len(page["data"]) <= 10
            seen += [e["id"] for e in page["data"]]
            has_more = page["has_more"]
            params["starting_after"] = page["data"][-1]["id"]
        default = (await client.get("/v1/events", headers=auth(STRIPE_KEY))).json()
        recent = (
            await client.get(
                "/v1/events", params={"created[gte]": int(T0 + 150)}, headers=auth(STRIPE_KEY)
            )
        ).json()
        window = (
            await client.get(
                "/v1/events",
                params={"created[gt]": int(T0 + 100), "created[lte]": int(T0 + 120), "limit": 100},
                headers=auth(STRIPE_KEY),
            )
        ).json()
        typed = (
            await client.get(
                "/v1/events", params={"types[]": ["charge.refunded"]}, headers=auth(STRIPE_KEY)
            )
        ).json()
        unknown = await client.get(
            "/v1/events", params={"starting_after": "evt_nope"}, headers=auth(STRIPE_KEY)
        )
        too_many = await client.get("/v1/events", params={"limit": 101}, headers=auth(STRIPE_KEY))
    assert seen == expected and len(set(seen)) == 27
    created = [stripe.event(i)["created"] for i in seen]
    assert created == sorted(created, reverse=True)
    # ties keep a stable order: the later recorded first, like the rest of the list
    assert [i for i in seen if i in tied] == tied[::-1]
    assert len(default["data"]) == 10 and default["has_more"] is True
    assert all(e["created"] >= T0 + 150 for e in recent["data"])
    assert len(recent["data"]) == 9 and recent["has_more"] is False
    assert {e["created"] for e in window["data"]} == {T0 + 105, T0 + 110, T0 + 120}
    assert len(window["data"]) == 5
    assert [e["type"] for e in typed["data"]] == ["charge.refunded"] * 2
    event = default["data"][0]
    assert set(event) == {
        "id",
        "object",
        "api_version",
        "created",
        "data",
        "livemode",
        "pending_webhooks",
        "request",
        "type",
    }
    assert event["object"] == "event" and event["id"].startswith("evt_")
    assert event["request"] == {"id": None, "idempotency_key": None}
    assert unknown.status_code == 400
    assert unknown.json()["error"]["type"] == "invalid_request_error"
    assert "evt_nope" in unknown.json()["error"]["message"]
    assert too_many.status_code == 400


async def test_stripe_keeps_thirty_days(serve: Callable[[Any], str]) -> None:
    stripe = StripeEmulator(STRIPE_KEY)
    clock = Clock(T0)
    stripe.now = clock
    old = stripe.add_event(T0 - 31 * DAY)["id"]
    edge = stripe.add_event(T0 - 30 * DAY)["id"]
    fresh = stripe.add_event(T0 - DAY)["id"]
    base = serve(stripe.app)
    async with httpx.AsyncClient(base_url=base) as client:
        before = (await client.get("/v1/events", headers=auth(STRIPE_KEY))).json()["data"]
        clock.t += 2 * DAY
        after = (await client.get("/v1/events", headers=auth(STRIPE_KEY))).json()["data"]
        expired_cursor = await client.get(
            "/v1/events", params={"starting_after": edge}, headers=auth(STRIPE_KEY)
        )
    assert [e["id"] for e in before] == [fresh, edge]
    assert old not in [e["id"] for e in before]
    assert [e["id"] for e in after] == [fresh]
    assert expired_cursor.status_code == 400


async def test_stripe_auth_and_faults(serve: Callable[[Any], str]) -> None:
    stripe = StripeEmulator(STRIPE_KEY)
    stripe.add_events(1, time.time(), 1)
    basic = base64.b64encode(f"{STRIPE_KEY}:".encode()).decode()
    base = serve(stripe.app)
    async with httpx.AsyncClient(base_url=base) as client:
        with_basic = await client.get("/v1/events", headers={"Authorization": f"Basic {basic}"})
        wrong = await client.get("/v1/events", headers=auth("sk_test_wrong"))
        missing = await client.get("/v1/events")
        stripe.fail_next(429, retry_after=1.5)
        limited = await client.get("/v1/events", headers=auth(STRIPE_KEY))
        stripe.fail_next(500, count=2)
        errors = [(await client.get("/v1/events", headers=auth(STRIPE_KEY))) for _ in range(2)]
        ok = await client.get("/v1/events", headers=auth(STRIPE_KEY))
    assert with_basic.status_code == 200 and len(with_basic.json()["data"]) == 1
    assert wrong.status_code == 401
    assert wrong.json() == {
        "error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}
    }
    assert missing.status_code == 401
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1.5"
    assert limited.json()["error"]["code"] == "rate_limit"
    assert [r.status_code for r in errors] == [500, 500]
    assert errors[0].json()["error"]["type"] == "api_error"
    assert ok.status_code == 200 and ok.headers["request-id"].startswith("req_")
    assert stripe.api_calls == 7 and stripe.calls_by_path["/v1/events"] == 7


# -- Slack ---------------------------------------------------------------------------


async def test_slack_history_paging_cursor_oldest_and_cap(serve: Callable[[Any], str]) -> None:
    slack = SlackEmulator(SLACK_TOKEN, channels=["C0HOOKD", "C0OTHER"])
    keys = slack.add_events(40, T0, 1.5, channel="C0HOOKD", bot_every=5)
    slack.add_events(3, T0, 1.0, channel="C0OTHER")
    messages = slack.messages["C0HOOKD"]
    ts = [m["ts"] for m in messages]
    assert ts[0] == "1700000000.000000" and ts[1] == "1700000001.500000"
    assert keys[0] == f"msg:T0HOOKD:C0HOOKD:{ts[0]}"
    base = serve(slack.app)
    async with httpx.AsyncClient(base_url=base) as client:
        seen: list[str] = []
        cursor = ""
        pages = 0
        while True:
            data: dict[str, Any] = {"channel": "C0HOOKD", "limit": 100}
            if cursor:
                data["cursor"] = cursor
            page = (
                await client.post("/conversations.history", data=data, headers=auth(SLACK_TOKEN))
            ).json()
            pages += 1
            assert page["ok"] is True and page["pin_count"] == 0
            assert len(page["messages"]) <= 15
            seen += [m["ts"] for m in page["messages"]]
            cursor = page["response_metadata"]["next_cursor"]
            assert page["has_more"] is bool(cursor)
            if not cursor:
                break
        newer = (
            await client.get(
                "/api/conversations.history",
                params={"channel": "C0HOOKD", "oldest": ts[30]},
                headers=auth(SLACK_TOKEN),
            )
        ).json()
        inclusive = (
            await client.get(
                "/conversations.history",
                params={"channel": "C0HOOKD", "oldest": ts[30], "inclusive": "true", "limit": 5},
                headers=auth(SLACK_TOKEN),
            )
        ).json()
        between = (
            await client.get(
                "/conversations.history",
                params={"channel": "C0HOOKD", "oldest": ts[5], "latest": ts[9]},
                headers=auth(SLACK_TOKEN),
            )
        ).json()
        other = (
            await client.get(
                "/conversations.history", params={"channel": "C0OTHER"}, headers=auth(SLACK_TOKEN)
            )
        ).json()
        me = (await client.post("/auth.test", headers=auth(SLACK_TOKEN))).json()
    assert pages == 3
    assert seen == ts[::-1]
    assert [m["ts"] for m in newer["messages"]] == ts[31:][::-1]
    assert newer["has_more"] is False and newer["response_metadata"]["next_cursor"] == ""
    assert [m["ts"] for m in inclusive["messages"]] == ts[35:][::-1]
    assert inclusive["has_more"] is True
    assert [m["ts"] for m in between["messages"]] == ts[6:9][::-1]
    assert len(other["messages"]) == 3
    bots = [m for m in messages if m.get("subtype") == "bot_message"]
    assert len(bots) == 8 and all("bot_id" in m and "user" not in m for m in bots)
    human = messages[0]
    assert set(human) == {"type", "user", "text", "ts"} and human["user"].startswith("U")
    assert me["ok"] is True and me["team_id"] == "T0HOOKD" and me["user_id"] == "U0BOT"


async def test_slack_rate_limit_answers_429_with_retry_after(serve: Callable[[Any], str]) -> None:
    slack = SlackEmulator(SLACK_TOKEN, requests_per_minute=2)
    clock = Clock(T0)
    slack.now = clock
    slack.add_events(3, T0, 1)
    params = {"channel": "C0HOOKD"}

    base = serve(slack.app)
    async with httpx.AsyncClient(base_url=base) as client:

        async def history() -> httpx.Response:
            return await client.get(
                "/conversations.history", params=params, headers=auth(SLACK_TOKEN)
            )

        first = await history()
        clock.t += 20
        second = await history()
        clock.t += 10
        third = await history()
        me = await client.post("/auth.test", headers=auth(SLACK_TOKEN))
        clock.t += 30  # the first call leaves the window
        fourth = await history()
        clock.t += 0.5
        fifth = await history()
    assert [first.status_code, second.status_code] == [200, 200]
    assert third.status_code == 429
    assert third.json() == {"ok": False, "error": "ratelimited"}
    assert third.headers["retry-after"] == "30"
    assert me.status_code == 200 and me.json()["ok"] is True
    assert fourth.status_code == 200
    assert fifth.status_code == 429 and fifth.headers["retry-after"] == "20"
    assert slack.ratelimited == 2 and slack.history_calls == 5


async def test_slack_errors_are_200_except_faults(serve: Callable[[Any], str]) -> None:
    slack = SlackEmulator(SLACK_TOKEN)
    base = serve(slack.app)
    async with httpx.AsyncClient(base_url=base) as client:
        wrong = await client.get(
            "/conversations.history", params={"channel": "C0HOOKD"}, headers=auth("xoxb-wrong")
        )
        missing = await client.get("/conversations.history", params={"channel": "C0HOOKD"})
        form_token = await client.post(
            "/conversations.history", data={"channel": "C0HOOKD", "token": SLACK_TOKEN}
        )
        no_channel = await client.get(
            "/conversations.history", params={"channel": "C0NOPE"}, headers=auth(SLACK_TOKEN)
        )
        slack.fail_next(503)
        slack.fail_next(429, retry_after=3)
        down = await client.get("/auth.test", headers=auth(SLACK_TOKEN))
        limited = await client.get("/auth.test", headers=auth(SLACK_TOKEN))
    assert (wrong.status_code, wrong.json()) == (200, {"ok": False, "error": "invalid_auth"})
    assert (missing.status_code, missing.json()) == (200, {"ok": False, "error": "not_authed"})
    assert form_token.json()["ok"] is True
    assert no_channel.json() == {"ok": False, "error": "channel_not_found"}
    assert down.status_code == 503 and down.json()["ok"] is False
    assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
    assert limited.json()["error"] == "ratelimited"
    assert slack.api_calls == 6


# -- send_webhooks -------------------------------------------------------------------


def github_emulator() -> tuple[GitHubEmulator, list[str]]:
    gh = GitHubEmulator(TOKEN, HOOK)
    guids = gh.add_events(6, time.time() - 600, 60)
    gh.add_delivery(time.time(), guid=guids[0], redelivery=True)  # one webhook per GUID
    return gh, guids


def stripe_emulator() -> tuple[StripeEmulator, list[str]]:
    stripe = StripeEmulator(STRIPE_KEY)
    return stripe, stripe.add_events(6, time.time() - 600, 60)


def slack_emulator() -> tuple[SlackEmulator, list[str]]:
    slack = SlackEmulator(SLACK_TOKEN, channels=["C0HOOKD", "C0OTHER"])
    return slack, slack.add_events(6, time.time() - 600, 60, bot_every=3)


Factory = Callable[[], tuple[GitHubEmulator | StripeEmulator | SlackEmulator, list[str]]]
EMULATORS: dict[str, Factory] = {
    "github": github_emulator,
    "stripe": stripe_emulator,
    "slack": slack_emulator,
}


def check_signature(provider: str, headers: dict[str, str], body: bytes) -> None:
    secret = SECRETS[provider]
    if provider == "github":
        assert headers["x-hub-signature-256"] == "sha256=" + hmac_hex(secret, body)
    elif provider == "stripe":
        parts = dict(p.split("=", 1) for p in headers["stripe-signature"].split(","))
        assert parts["v1"] == hmac_hex(secret, f"{parts['t']}.".encode() + body)
    else:
        ts = headers["x-slack-request-timestamp"]
        assert headers["x-slack-signature"] == "v0=" + hmac_hex(secret, f"v0:{ts}:".encode() + body)


@pytest.mark.parametrize("provider", list(EMULATORS))
async def test_send_webhooks_drops_duplicates_and_reorders(
    provider: str, target: tuple[Target, str]
) -> None:
    recorder, url = target
    emulator, keys = EMULATORS[provider]()
    async with httpx.AsyncClient() as client:
        statuses = await emulator.send_webhooks(
            client,
            url,
            SECRETS[provider],
            drop={keys[1], keys[4]},
            duplicate={keys[2]},
            shuffle=random.Random(7),
        )
    assert set(statuses) == set(keys) - {keys[1], keys[4]}
    assert set(statuses.values()) == {202}
    received = recorder.keys()
    assert received == collections.Counter({k: 1 for k in keys if k not in (keys[1], keys[4])}) + (
        collections.Counter({keys[2]: 1})
    )
    order = [webhook_key(h, b) for h, b in recorder.received]
    assert order != sorted(order, key=keys.index)  # shuffled
    for headers, body in recorder.received:
        check_signature(provider, headers, body)
    if provider == "slack":
        payload = json.loads(recorder.received[0][1])
        assert payload["type"] == "event_callback" and payload["api_app_id"] == "A0HOOKD"
        assert payload["event_id"].startswith("Ev")
        assert payload["event"]["event_ts"] == payload["event"]["ts"]
        assert payload["event"]["channel_type"] == "channel"


async def test_webhooks_are_accepted_and_deduped_by_hookd(
    sources: Sources, sqlite_url: str
) -> None:
    """The real receiver verifies the signatures and dedupes on the emulators' keys."""
    emulators = {name: factory() for name, factory in EMULATORS.items()}
    async with running_app(sources, sqlite_url) as (_, client):
        for name, (emulator, keys) in emulators.items():
            first = await emulator.send_webhooks(
                client, f"/hooks/{name}", SECRETS[name], drop={keys[0]}
            )
            again = await emulator.send_webhooks(client, f"/hooks/{name}", SECRETS[name])
            assert set(first.values()) == {202}, (name, first)
            assert again == {k: 200 if k != keys[0] else 202 for k in keys}, (name, again)
    async with engine_of(sqlite_url) as engine, engine.connect() as conn:
        rows = (await conn.execute(sa.select(EVENTS.c.source, EVENTS.c.dedupe_key))).all()
    stored: dict[str, set[str]] = collections.defaultdict(set)
    for source, key in rows:
        stored[source].add(key)
    assert len(rows) == 18
    for name, (_, keys) in emulators.items():
        assert stored[name] == set(keys)


async def test_github_record_status_marks_drops_as_failed(target: tuple[Target, str]) -> None:
    _, url = target
    gh, guids = github_emulator()
    async with httpx.AsyncClient() as client:
        await gh.send_webhooks(client, url, SECRETS["github"], drop={guids[3]}, record_status=True)
    assert {d["status_code"] for d in gh.deliveries_for(guids[3])} == {502}
    assert gh.deliveries_for(guids[3])[0]["status"] == "failed to connect"
    assert {d["status_code"] for d in gh.deliveries if d["guid"] != guids[3]} == {202}
