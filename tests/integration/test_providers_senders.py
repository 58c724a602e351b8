"""Meta, Twitch, Asana, Okta and HTTP Basic through hookd served by uvicorn on
loopback: each handshake answered as the sender documents it and storing nothing, a
forged one refused, a valid delivery accepted and stored once (its repeat the same
event), and tampered, wrong-secret, stale or unauthenticated ones refused.

Requests are made here from the senders' documented schemes, not with
``hookd.providers``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from hookd.cli.parser import build_parser
from hookd.cli.send_test import cmd_send_test
from hookd.settings import Settings
from hookd.sources import Sources, parse_sources
from ingest.learned import RETRY_S, LearnedKeys
from store.crypto import BodyCipher
from store.keys import rotate_bodies
from store.models import EVENTS
from store.models_learned import LEARNED_SECRETS
from tests.support.asgi import running_app
from tests.support.data import engine_of
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio

META_SECRET = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
VERIFY_TOKEN = "meatyhamhock"
TWITCH_SECRET = "twitch-eventsub-secret-1"
ASANA_TOKENS = ("asana-handshake-token-one", "asana-handshake-token-two")
OKTA_SECRET = "Bearer okta-event-hook-secret"
BASIC = ("sender:first-password", "backup:second-password")
HOOK_SECRET = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81"
FORGED_SECRET = "f" * 64

SOURCES = f"""
[[sources]]
name = "wa"
provider = "meta"
secrets = ["{META_SECRET}"]
[sources.verify]
verify_token = "{VERIFY_TOKEN}"

[[sources]]
name = "twitch"
provider = "twitch"
secrets = ["{TWITCH_SECRET}"]

[[sources]]
name = "asana"
provider = "asana"
secrets = ["{ASANA_TOKENS[0]}", "{ASANA_TOKENS[1]}"]

[[sources]]
name = "okta"
provider = "okta"
secrets = ["{OKTA_SECRET}"]

[[sources]]
name = "basic"
provider = "basic"
secrets = ["{BASIC[0]}", "{BASIC[1]}"]
[sources.verify]
dedupe = "json:id"
type_json = "type"
"""


def sources() -> Sources:
    return parse_sources(SOURCES, Path("hookd.toml"), {})


async def stored(url: str, source: str) -> list[tuple[str, str | None]]:
    """(dedupe key, type) of every event stored for ``source``."""
    query = sa.select(EVENTS.c.dedupe_key, EVENTS.c.type).where(EVENTS.c.source == source)
    async with engine_of(url) as engine, engine.connect() as conn:
        return [(r.dedupe_key, r.type) for r in await conn.execute(query)]


def hmac_hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


# --- Meta ---------------------------------------------------------------------------


def meta_body(n: int) -> bytes:
    change = {"field": "messages", "value": {"messaging_product": "whatsapp", "n": n}}
    entry = {"id": "102290129340398", "time": int(time.time()), "changes": [change]}
    return json.dumps({"object": "whatsapp_business_account", "entry": [entry]}).encode()


async def test_meta(sqlite_url: str) -> None:
    query = {"hub.mode": "subscribe", "hub.challenge": "1158201444"}
    body = meta_body(1)
    sig = {"X-Hub-Signature-256": "sha256=" + hmac_hex(META_SECRET, body)}
    async with running_app(sources(), sqlite_url, via="http", reconcile_schedule=False) as (
        _,
        client,
    ):
        answered = await client.get("/hooks/wa", params={**query, "hub.verify_token": VERIFY_TOKEN})
        forged = await client.get("/hooks/wa", params={**query, "hub.verify_token": "guess"})
        bare = await client.get("/hooks/wa")
        first = await client.post("/hooks/wa", content=body, headers=sig)
        again = await client.post("/hooks/wa", content=body, headers=sig)
        tampered = await client.post("/hooks/wa", content=body + b" ", headers=sig)
        wrong = await client.post(
            "/hooks/wa",
            content=body,
            headers={"X-Hub-Signature-256": "sha256=" + hmac_hex("f" * 32, body)},
        )
    assert (answered.status_code, answered.text) == (200, "1158201444")
    assert answered.headers["content-type"].startswith("text/plain")
    assert (forged.status_code, forged.json()["error"]) == (403, "handshake_refused")
    assert "verify_token" in forged.json()["detail"] and "guess" not in forged.text
    assert bare.status_code == 405
    assert (first.status_code, first.json()["status"]) == (200, "accepted")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert (tampered.status_code, wrong.status_code) == (401, 401)
    key = "sha256:" + hashlib.sha256(body).hexdigest()
    assert await stored(sqlite_url, "wa") == [(key, "whatsapp_business_account/messages")]


# --- Twitch -------------------------------------------------------------------------


def twitch_headers(
    body: bytes, kind: str, *, at: float | None = None, message_id: str | None = None
) -> dict[str, str]:
    stamp = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
    message_id = message_id or str(uuid.uuid4())
    return {
        "Twitch-Eventsub-Message-Id": message_id,
        "Twitch-Eventsub-Message-Retry": "0",
        "Twitch-Eventsub-Message-Type": kind,
        "Twitch-Eventsub-Message-Signature": "sha256="
        + hmac_hex(TWITCH_SECRET, (message_id + text).encode() + body),
        "Twitch-Eventsub-Message-Timestamp": text,
        "Twitch-Eventsub-Subscription-Type": "channel.follow",
        "Twitch-Eventsub-Subscription-Version": "2",
        "Content-Type": "application/json",
    }


SUBSCRIPTION = {
    "id": "f1c2a387-161a-49f9-a165-0f21d7a4e1c4",
    "type": "channel.follow",
    "version": "2",
    "condition": {"broadcaster_user_id": "1337"},
    "transport": {"method": "webhook", "callback": "https://example.com/hooks/twitch"},
}


async def test_twitch(sqlite_url: str) -> None:
    challenge = json.dumps(
        {
            "challenge": "pogchamp-kappa-360noscope-vohiyo",
            "subscription": {**SUBSCRIPTION, "status": "webhook_callback_verification_pending"},
        }
    ).encode()
    notification = json.dumps(
        {"subscription": {**SUBSCRIPTION, "status": "enabled"}, "event": {"user_id": "1234"}}
    ).encode()
    revocation = json.dumps(
        {"subscription": {**SUBSCRIPTION, "status": "authorization_revoked"}}
    ).encode()
    verify_headers = twitch_headers(challenge, "webhook_callback_verification")
    forged_verify = {**verify_headers, "Twitch-Eventsub-Message-Id": "forged"}
    note = twitch_headers(notification, "notification", message_id="msg-1")
    async with running_app(sources(), sqlite_url, via="http", reconcile_schedule=False) as (
        _,
        client,
    ):
        verified = await client.post("/hooks/twitch", content=challenge, headers=verify_headers)
        forged = await client.post("/hooks/twitch", content=challenge, headers=forged_verify)
        first = await client.post("/hooks/twitch", content=notification, headers=note)
        again = await client.post("/hooks/twitch", content=notification, headers=note)
        tampered = await client.post("/hooks/twitch", content=notification + b" ", headers=note)
        stale = await client.post(
            "/hooks/twitch",
            content=notification,
            headers=twitch_headers(notification, "notification", at=time.time() - 660),
        )
        revoked = await client.post(
            "/hooks/twitch",
            content=revocation,
            headers=twitch_headers(revocation, "revocation", message_id="msg-2"),
        )
    assert (verified.status_code, verified.text) == (200, "pogchamp-kappa-360noscope-vohiyo")
    assert verified.headers["content-type"].startswith("text/plain")
    assert (forged.status_code, forged.json()["error"]) == (401, "bad_signature")
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["status"] == "duplicate"
    assert (tampered.status_code, tampered.json()["error"]) == (401, "bad_signature")
    assert (stale.status_code, stale.json()["error"]) == (401, "timestamp_too_old")
    assert revoked.status_code == 202
    assert sorted(await stored(sqlite_url, "twitch")) == [
        ("msg-1", "channel.follow"),
        ("msg-2", "revocation.authorization_revoked"),
    ]


# --- Asana --------------------------------------------------------------------------


def asana_body(gid: str) -> bytes:
    event = {
        "user": {"gid": "1516", "resource_type": "user"},
        "created_at": "2026-12-05T02:06:58.147Z",
        "action": "changed",
        "resource": {"gid": gid, "resource_type": "task"},
        "parent": None,
    }
    return json.dumps({"events": [event]}).encode()


async def learned_rows(url: str) -> list[tuple[str, bytes]]:
    query = sa.select(LEARNED_SECRETS.c.source, LEARNED_SECRETS.c.secret)
    async with engine_of(url) as engine, engine.connect() as conn:
        return [(r.source, bytes(r.secret)) for r in await conn.execute(query)]


async def test_asana_handshake_is_learned_once_and_verifies_every_process(db_url: str) -> None:
    body = asana_body("1337")
    signed = {"X-Hook-Signature": hmac_hex(HOOK_SECRET, body)}
    keys = Fernet.generate_key().decode()
    token = f"/hooks/asana?token={ASANA_TOKENS[0]}"
    settings = {"reconcile_schedule": False, "encryption_keys": keys}
    async with running_app(sources(), db_url, via="http", **settings) as (_, client):
        early = await client.post("/hooks/asana", content=body, headers=signed)
        no_token = await client.post("/hooks/asana", headers={"X-Hook-Secret": FORGED_SECRET})
        bad_token = await client.post(
            "/hooks/asana?token=asana-handshake-token-guess",
            headers={"X-Hook-Secret": FORGED_SECRET},
        )
        handshake = await client.post(token, headers={"X-Hook-Secret": HOOK_SECRET})
        replaced = await client.post(token, headers={"X-Hook-Secret": FORGED_SECRET})
    assert (early.status_code, early.json()["error"]) == (401, "bad_signature")
    for refused in (no_token, bad_token):
        assert (refused.status_code, refused.json()["error"]) == (403, "handshake_refused")
        assert "?token=" in refused.json()["detail"]
    assert handshake.status_code == 200
    assert handshake.headers["x-hook-secret"] == HOOK_SECRET
    assert (replaced.status_code, replaced.json()["error"]) == (403, "handshake_refused")
    assert "opened a handshake before" in replaced.json()["detail"]
    rows = await learned_rows(db_url)
    assert [source for source, _ in rows] == ["asana"]
    assert HOOK_SECRET.encode() not in rows[0][1]  # sealed with HOOKD_ENCRYPTION_KEYS
    # Another receiver process (a new app on the same database) verifies with it.
    async with running_app(sources(), db_url, via="http", **settings) as (_, client):
        first = await client.post("/hooks/asana", content=body, headers=signed)
        again = await client.post("/hooks/asana", content=body, headers=signed)
        forged = await client.post(
            "/hooks/asana",
            content=body,
            headers={"X-Hook-Signature": hmac_hex(FORGED_SECRET, body)},
        )
        tampered = await client.post("/hooks/asana", content=body + b" ", headers=signed)
        heartbeat = await client.post(
            "/hooks/asana",
            content=b'{"events":[]}',
            headers={"X-Hook-Signature": hmac_hex(HOOK_SECRET, b'{"events":[]}')},
        )
    assert (first.status_code, again.status_code) == (202, 200)
    assert (forged.status_code, tampered.status_code) == (401, 401)
    assert heartbeat.status_code == 200
    key = "sha256:" + hashlib.sha256(body).hexdigest()
    assert await stored(db_url, "asana") == [(key, "task.changed")]


async def test_a_secret_learned_by_one_process_reaches_another(sqlite_url: str) -> None:
    """A process that read the source's secrets before another learned one reads them
    again once a delivery comes for a token without its secret (at most once per
    ``retry_s`` of its clock, moved by hand here)."""
    body = asana_body("7")
    signed = {"X-Hook-Signature": hmac_hex(HOOK_SECRET, body)}
    settings = {"reconcile_schedule": False}
    now = [1000.0]
    async with (
        running_app(sources(), sqlite_url, via="http", **settings) as (reader_app, reader),
        running_app(sources(), sqlite_url, via="http", **settings) as (_, learner),
    ):
        reader_app.receiver.learned = LearnedKeys(
            reader_app.state.engine, BodyCipher(""), clock=lambda: now[0]
        )
        before = await reader.post("/hooks/asana", content=body, headers=signed)
        handshake = await learner.post(
            f"/hooks/asana?token={ASANA_TOKENS[1]}", headers={"X-Hook-Secret": HOOK_SECRET}
        )
        soon = await reader.post("/hooks/asana", content=body, headers=signed)
        now[0] += RETRY_S
        after = await reader.post("/hooks/asana", content=body, headers=signed)
    assert before.status_code == 401
    assert handshake.status_code == 200
    assert soon.status_code == 401  # read a moment ago: not read again yet
    assert after.status_code == 202, after.text


# --- Okta ---------------------------------------------------------------------------


def okta_body(event_id: str) -> bytes:
    return json.dumps(
        {
            "eventType": "com.okta.event_hook",
            "eventTypeVersion": "1.0",
            "cloudEventsVersion": "0.1",
            "source": "https://example.okta.com/api/v1/eventHooks/whoql0HfiLGPWc8Jx0g3",
            "eventId": event_id,
            "data": {"events": [{"uuid": "u1", "eventType": "user.session.start"}]},
            "eventTime": "2026-12-05T16:50:58.184Z",
            "contentType": "application/json",
        }
    ).encode()


async def test_okta(sqlite_url: str) -> None:
    challenge = {"X-Okta-Verification-Challenge": "X1KxbT-X8n2lB6jZ8Q_FpWvSi0s1AZ0hs3wMlD-V"}
    body = okta_body("b5a188b9-5ece-4636-b041-482ffda96311")
    auth = {"Authorization": OKTA_SECRET, "Content-Type": "application/json"}
    async with running_app(sources(), sqlite_url, via="http", reconcile_schedule=False) as (
        _,
        client,
    ):
        verified = await client.get("/hooks/okta", headers={**challenge, **auth})
        forged = await client.get("/hooks/okta", headers=challenge)
        wrong = await client.get(
            "/hooks/okta", headers={**challenge, "Authorization": "Bearer guess"}
        )
        first = await client.post("/hooks/okta", content=body, headers=auth)
        again = await client.post("/hooks/okta", content=body, headers=auth)
        unauthorized = await client.post(
            "/hooks/okta", content=body, headers={"Authorization": OKTA_SECRET + "x"}
        )
    assert verified.status_code == 200
    assert verified.json() == {"verification": "X1KxbT-X8n2lB6jZ8Q_FpWvSi0s1AZ0hs3wMlD-V"}
    assert (forged.status_code, forged.json()["error"]) == (401, "missing_header")
    assert (wrong.status_code, wrong.json()["error"]) == (401, "bad_signature")
    assert (first.status_code, first.json()["status"]) == (200, "accepted")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert unauthorized.status_code == 401
    assert await stored(sqlite_url, "okta") == [
        ("b5a188b9-5ece-4636-b041-482ffda96311", "user.session.start")
    ]


# --- HTTP Basic ---------------------------------------------------------------------


def basic(credential: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credential.encode()).decode()}


async def test_basic(sqlite_url: str) -> None:
    body = json.dumps({"id": "evt_1", "type": "order.paid"}).encode()
    async with running_app(sources(), sqlite_url, via="http", reconcile_schedule=False) as (
        _,
        client,
    ):
        first = await client.post("/hooks/basic", content=body, headers=basic(BASIC[0]))
        again = await client.post("/hooks/basic", content=body, headers=basic(BASIC[1]))
        missing = await client.post("/hooks/basic", content=body)
        crossed = await client.post(
            "/hooks/basic", content=body, headers=basic("sender:second-password")
        )
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["status"] == "duplicate"
    for refused in (missing, crossed):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Basic realm="hookd"'
    assert (missing.json()["error"], crossed.json()["error"]) == (
        "missing_header",
        "bad_signature",
    )
    assert await stored(sqlite_url, "basic") == [("evt_1", "order.paid")]


# --- hookd send-test ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "status"), [("wa", "200"), ("twitch", "202"), ("okta", "200"), ("basic", "202")]
)
async def test_send_test_sends_what_the_source_accepts(
    name: str, status: str, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hookd send-test`` signs (or authenticates) with the source's first secret:
    each sample is a new event, accepted with the status the sender expects."""
    all_sources = sources()
    async with running_app(all_sources, sqlite_url, reconcile_schedule=False) as (app, _):
        args = build_parser().parse_args(["send-test", name, "--count", "2"])
        async with serve_app(app) as hookd_url:
            args.url = f"{hookd_url}/hooks/{name}"
            settings = Settings(database_url=sqlite_url)
            assert await asyncio.to_thread(cmd_send_test, args, settings, all_sources) == 0
    sent = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in sent] == [status, status]
    assert len(await stored(sqlite_url, name)) == 2


async def test_keys_rotate_reseals_learned_secrets(sqlite_url: str) -> None:
    """After ``hookd keys rotate`` the old key can go: the learned secret opens with the
    new one alone."""
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    body = asana_body("42")
    signed = {"X-Hook-Signature": hmac_hex(HOOK_SECRET, body)}
    handshake_url = f"/hooks/asana?token={ASANA_TOKENS[0]}"
    async with running_app(
        sources(), sqlite_url, reconcile_schedule=False, encryption_keys=old
    ) as (_, client):
        learned = await client.post(handshake_url, headers={"X-Hook-Secret": HOOK_SECRET})
    assert learned.status_code == 200
    async with engine_of(sqlite_url) as engine:
        rotated = await rotate_bodies(engine, BodyCipher(f"{new},{old}"))
    assert rotated.learned == 1
    async with running_app(
        sources(), sqlite_url, reconcile_schedule=False, encryption_keys=new
    ) as (_, client):
        delivered = await client.post("/hooks/asana", content=body, headers=signed)
    assert delivered.status_code == 202, delivered.text
