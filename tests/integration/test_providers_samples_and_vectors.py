"""Each provider's own sample event and published requests through the real receiver
and store (Paddle, Square, Zendesk, Intercom): a signed sample is accepted once and a
duplicate after, a tampered one is refused with its reason and stores nothing, and
``hookd send-test`` reaches each source. Where the provider publishes a signed request
(Paddle's and Square's library tests) that exact request goes through the app too;
Zendesk's stale and trigger deliveries and Intercom's ping and HEAD check as well."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from hookd.cli.parser import build_parser
from hookd.cli.send_test import cmd_send_test
from hookd.settings import Settings
from hookd.sources import Sources, parse_sources
from store import db
from store.models import EVENTS
from tests.support.asgi import running_app
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000
PADDLE_SECRET = "pdl_ntfset_01hs0t3tw21j988db1pam5xg8m_GrOWLNef+vmtjJYq4mSnHNzvc8uWoJ1I"
SQUARE_KEY = "Ibxx_5AKakO-3qeNVR61Dw"
SQUARE_URL = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
ZENDESK_SECRET = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="
INTERCOM_SECRET = "5b0e8c52-7f1f-4c36-9f5b-7d0b2f4d9a11"
SECRETS = {"pd": PADDLE_SECRET, "sq": SQUARE_KEY, "zd": ZENDESK_SECRET, "ic": INTERCOM_SECRET}
SOURCES = f"""
[[sources]]
name = "pd"
provider = "paddle"
secrets = ["{PADDLE_SECRET}"]

[[sources]]
name = "sq"
provider = "square"
secrets = ["{SQUARE_KEY}"]
public_url = "{SQUARE_URL}"

[[sources]]
name = "zd"
provider = "zendesk"
secrets = ["{ZENDESK_SECRET}"]

[[sources]]
name = "ic"
provider = "intercom"
secrets = ["{INTERCOM_SECRET}"]
"""
# What each sample's dedupe key is read from, and the reason a changed body gets.
KEY_FIELD = {"pd": "event_id", "sq": "event_id", "zd": "id", "ic": "id"}


def sources() -> Sources:
    return parse_sources(SOURCES, Path("hookd.toml"), {})


async def stored(url: str, source: str) -> list[tuple[str, str | None, str]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(EVENTS.c.dedupe_key, EVENTS.c.type, EVENTS.c.verified_with).where(
                    EVENTS.c.source == source
                )
            )
            return [tuple(row) for row in rows]  # type: ignore[misc]
    finally:
        await engine.dispose()


@pytest.mark.parametrize("name", ["pd", "sq", "zd", "ic"])
async def test_signed_then_duplicate_then_tampered(name: str, sqlite_url: str) -> None:
    srcs = sources()
    source = srcs.get(name)
    assert source is not None
    headers, body = source.adapter.sample_event(SECRETS[name], 1, NOW)
    async with running_app(srcs, sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post(f"/hooks/{name}", content=body, headers=headers)
        again = await client.post(f"/hooks/{name}", content=body, headers=headers)
        flipped = bytearray(body)
        flipped[len(flipped) // 2] ^= 0x01
        tampered = await client.post(f"/hooks/{name}", content=bytes(flipped), headers=headers)
        unsigned = {k: v for k, v in headers.items() if "signature" not in k.lower()}
        missing = await client.post(f"/hooks/{name}", content=body, headers=unsigned)
    assert first.status_code == 202, first.text
    assert again.status_code == 200, again.text
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert tampered.status_code == 401
    assert tampered.json() == {"error": "bad_signature"}
    assert missing.status_code == 401
    assert missing.json()["error"] == "missing_header"
    rows = await stored(sqlite_url, name)
    assert len(rows) == 1
    assert rows[0][0] == json.loads(body)[KEY_FIELD[name]]


async def test_paddle_library_vector_is_accepted_once(sqlite_url: str) -> None:
    """A notification Paddle signed (from its Python library's tests)."""
    body = (
        b'{"data":{"id":"ctm_01hs0tqf76sxmp7ba5e4mw1sc8","name":"John Doe","email":'
        b'"blackhole+verification2@paddle.com","locale":"en","status":"active","created_at":'
        b'"2024-03-15T10:32:37.862Z","updated_at":"2024-03-15T10:32:37.862Z","custom_data":'
        b'null,"import_meta":null,"marketing_consent":false},"event_id":'
        b'"evt_01hs0tqfme2xwb2hvwv87p8y3w","event_type":"customer.created","occurred_at":'
        b'"2024-03-15T10:32:38.286848Z","notification_id":"ntf_01hs0tqfrhgkyp39x4wyvy7h6n"}'
    )
    signature = "ts=1710498758;h1=558bf93944dbeb4790c7a8af6cb2ea435c8ca9c8396aafc1a4e37424ac132744"
    headers = {"Paddle-Signature": signature, "Content-Type": "application/json"}
    async with running_app(sources(), sqlite_url, clock=lambda: 1710498759.0) as (_, client):
        first = await client.post("/hooks/pd", content=body, headers=headers)
        again = await client.post("/hooks/pd", content=body, headers=headers)
    async with running_app(sources(), sqlite_url, clock=lambda: 1710498758.0 + 301) as (
        _,
        client,
    ):
        late = await client.post("/hooks/pd", content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert late.status_code == 401
    assert late.json() == {"error": "timestamp_too_old"}
    assert await stored(sqlite_url, "pd") == [
        ("evt_01hs0tqfme2xwb2hvwv87p8y3w", "customer.created", "paddle-h1;key=0;t=1710498758")
    ]


async def test_square_library_vector_is_accepted_once(sqlite_url: str) -> None:
    """The notification Square's SDK tests verify, posted to the URL it was signed for."""
    body = (
        b'{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":'
        b'"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z",'
        b'"data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}'
    )
    headers = {
        "x-square-hmacsha256-signature": "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4=",
        "content-type": "application/json",
    }
    elsewhere = parse_sources(
        SOURCES.replace(SQUARE_URL, "https://hookd.example/hooks/sq"), Path("h.toml"), {}
    )
    async with running_app(sources(), sqlite_url) as (_, client):
        first = await client.post("/hooks/sq", content=body, headers=headers)
        again = await client.post("/hooks/sq", content=body, headers=headers)
    async with running_app(elsewhere, sqlite_url) as (_, client):
        other_url = await client.post("/hooks/sq", content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert other_url.status_code == 401
    assert other_url.json() == {"error": "bad_signature"}
    assert await stored(sqlite_url, "sq") == [
        (
            "ac3ac95b-f97d-458c-a6e6-18981597e05f",
            "webhooks.test_notification",
            "square-hmacsha256;key=0",
        )
    ]


async def test_zendesk_stale_and_trigger_deliveries(sqlite_url: str) -> None:
    def request(body: bytes, timestamp: str, invocation: str) -> dict[str, str]:
        mac = hmac.new(ZENDESK_SECRET.encode(), timestamp.encode() + body, hashlib.sha256)
        return {
            "X-Zendesk-Webhook-Id": "01F1KRFQ6BG29CNWFR60NK5FNY",
            "X-Zendesk-Webhook-Invocation-Id": invocation,
            "X-Zendesk-Webhook-Signature": base64.b64encode(mac.digest()).decode(),
            "X-Zendesk-Webhook-Signature-Timestamp": timestamp,
            "Content-Type": "application/xml",
        }

    trigger = b"<ticket><id>35436</id><status>open</status></ticket>"
    now_iso = datetime.fromtimestamp(NOW, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    stale_iso = datetime.fromtimestamp(NOW - 301, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post(
            "/hooks/zd", content=trigger, headers=request(trigger, now_iso, "77")
        )
        retry = await client.post(
            "/hooks/zd", content=trigger, headers=request(trigger, now_iso, "77")
        )
        stale = await client.post(
            "/hooks/zd", content=trigger, headers=request(trigger, stale_iso, "78")
        )
        epoch = await client.post(
            "/hooks/zd", content=trigger, headers=request(trigger, str(NOW), "79")
        )
    assert first.status_code == 202, first.text
    assert retry.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert (stale.status_code, stale.json()) == (401, {"error": "timestamp_too_old"})
    assert (epoch.status_code, epoch.json()) == (401, {"error": "malformed_timestamp"})
    assert await stored(sqlite_url, "zd") == [
        ("invocation:77", None, f"zendesk-sha256;key=0;t={NOW}")
    ]


async def test_intercom_ping_is_answered_without_a_row(sqlite_url: str) -> None:
    body = json.dumps(
        {
            "type": "notification_event",
            "topic": "ping",
            "id": None,
            "data": {"item": {"type": "ping"}},
        }
    ).encode()
    digest = hmac.new(INTERCOM_SECRET.encode(), body, hashlib.sha1).hexdigest()
    headers = {"X-Hub-Signature": f"sha1={digest}", "Content-Type": "application/json"}
    async with running_app(sources(), sqlite_url) as (_, client):
        ping = await client.post("/hooks/ic", content=body, headers=headers)
        forged = await client.post(
            "/hooks/ic", content=body, headers={**headers, "X-Hub-Signature": "sha1=" + "0" * 40}
        )
    assert ping.status_code == 200, ping.text
    assert ping.json() == {"status": "ok"}
    assert (forged.status_code, forged.json()) == (401, {"error": "bad_signature"})
    assert await stored(sqlite_url, "ic") == []


async def test_intercom_head_check_is_200_and_other_methods_405(sqlite_url: str) -> None:
    """Intercom saves a webhook URL only if a HEAD request to it answers 200; that
    stores nothing, and GET is still refused (only the sources that need it take GET)."""
    async with running_app(sources(), sqlite_url) as (_, client):
        head = await client.head("/hooks/ic")
        get = await client.get("/hooks/ic")
        other = await client.head("/hooks/pd")
    assert head.status_code == 200
    assert head.content == b""
    assert (get.status_code, get.headers["allow"]) == (405, "POST")
    assert other.status_code == 405
    assert await stored(sqlite_url, "ic") == []


async def test_send_test_reaches_each_source(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    srcs = sources()
    async with (
        running_app(srcs, sqlite_url, reconcile_schedule=False) as (app, _),
        serve_app(app) as hookd_url,
    ):
        for name in ("pd", "sq", "zd", "ic"):
            args = build_parser().parse_args(
                ["send-test", name, "--count", "2", "--url", f"{hookd_url}/hooks/{name}"]
            )
            settings = Settings(database_url=sqlite_url)
            assert await asyncio.to_thread(cmd_send_test, args, settings, srcs) == 0
    sent = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in sent] == ["202"] * 8
    for name in ("pd", "sq", "zd", "ic"):
        assert len(await stored(sqlite_url, name)) == 2
