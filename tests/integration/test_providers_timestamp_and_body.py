"""Providers that sign a timestamp header's text followed by the body (SendGrid, Discord
and Zoom) through the real app: signed deliveries are stored once,
duplicates answered as the first, tampered ones refused with no row, and handshakes
(Discord's PINGs, Zoom's url_validation) answered exactly as documented with no row.

The requests are signed as the providers sign: SendGrid with ``cryptography``'s P-256
private key (checked by SendGrid's own library), Discord with PyNaCl, Zoom with an HMAC
computed here from its documentation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from nacl.signing import SigningKey
from sendgrid.helpers.eventwebhook import EventWebhook

from hookd.sources import Sources, parse_sources
from store import db
from store.models import EVENTS
from tests.support.asgi import running_app

pytestmark = pytest.mark.anyio
NOW = 1_700_000_000

SG_PRIVATE = ec.derive_private_key(0x5EED_0000_AB12, ec.SECP256R1())
SG_PUBLIC = base64.b64encode(
    SG_PRIVATE.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
DC_SIGNER = SigningKey(bytes(range(32)))
DC_FORGER = SigningKey(bytes(range(1, 33)))
DC_PUBLIC = DC_SIGNER.verify_key.encode().hex()
ZM_SECRET = "zoom-integration-secret"

SOURCES = f"""
[[sources]]
name = "sg"
provider = "sendgrid"
secrets = ["{SG_PUBLIC}"]

[[sources]]
name = "dc"
provider = "discord"
secrets = ["{DC_PUBLIC}"]

[[sources]]
name = "zm"
provider = "zoom"
secrets = ["{ZM_SECRET}"]
"""


def sources() -> Sources:
    return parse_sources(SOURCES, Path("hookd.toml"), {})


async def stored(url: str) -> list[tuple[str, str, str | None]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            query = sa.select(EVENTS.c.source, EVENTS.c.dedupe_key, EVENTS.c.type)
            rows = (await conn.execute(query.order_by(EVENTS.c.source))).all()
    finally:
        await engine.dispose()
    return [(row[0], row[1], row[2]) for row in rows]


def sendgrid_request(body: bytes) -> dict[str, str]:
    timestamp = str(NOW)
    der = SG_PRIVATE.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    headers = {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(der).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        "Content-Type": "application/json",
    }
    webhook = EventWebhook(SG_PUBLIC)
    signature = headers["X-Twilio-Email-Event-Webhook-Signature"]
    assert webhook.verify_signature(body.decode(), signature, timestamp)
    return headers


def discord_request(body: bytes, signer: SigningKey = DC_SIGNER) -> dict[str, str]:
    timestamp = str(NOW)
    return {
        "X-Signature-Ed25519": signer.sign(timestamp.encode() + body).signature.hex(),
        "X-Signature-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


def zoom_request(body: bytes, secret: str = ZM_SECRET) -> dict[str, str]:
    message = f"v0:{NOW}:".encode() + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return {
        "x-zm-request-timestamp": str(NOW),
        "x-zm-signature": f"v0={digest}",
        "Content-Type": "application/json; charset=utf-8",
    }


async def test_sendgrid_batch_is_stored_once_and_tampering_is_401(sqlite_url: str) -> None:
    events = [
        {"email": "a@example.com", "timestamp": NOW - 3, "event": "delivered", "sg_event_id": "e1"},
        {"email": "b@example.com", "timestamp": NOW - 2, "event": "delivered", "sg_event_id": "e2"},
    ]
    body = json.dumps(events).encode()
    headers = sendgrid_request(body)
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post("/hooks/sg", content=body, headers=headers)
        again = await client.post("/hooks/sg", content=body, headers=headers)
        tampered = await client.post(
            "/hooks/sg", content=body.replace(b"e2", b"e3"), headers=headers
        )
    assert first.status_code == 202, first.text
    assert again.status_code == 200
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert (tampered.status_code, tampered.json()) == (401, {"error": "bad_signature"})
    key = "events:" + hashlib.sha256(b"e1\ne2").hexdigest()
    assert await stored(sqlite_url) == [("sg", key, "delivered")]


async def test_discord_interactions_pings_and_forgeries(sqlite_url: str) -> None:
    snowflake = str(((NOW * 1000 - 1_420_070_400_000) << 22) | 7)
    command = json.dumps(
        {
            "id": snowflake,
            "application_id": "1",
            "type": 2,
            "token": "t",
            "version": 1,
            "data": {"id": "9", "name": "report", "type": 1},
        }
    ).encode()
    ping = json.dumps({"id": "1", "application_id": "1", "type": 1, "version": 1}).encode()
    events_ping = json.dumps({"version": 1, "application_id": "1", "type": 0}).encode()
    signed = discord_request(command)
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post("/hooks/dc", content=command, headers=signed)
        again = await client.post("/hooks/dc", content=command, headers=signed)
        pong = await client.post("/hooks/dc", content=ping, headers=discord_request(ping))
        forged_ping = await client.post(
            "/hooks/dc", content=ping, headers=discord_request(ping, DC_FORGER)
        )
        tampered = await client.post("/hooks/dc", content=command + b" ", headers=signed)
        events_pong = await client.post(
            "/hooks/dc", content=events_ping, headers=discord_request(events_ping)
        )
    for answer in (first, again):
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert answer.json() == {"type": 5}
    assert (pong.status_code, pong.json()) == (200, {"type": 1})
    assert pong.headers["content-type"] == "application/json"
    assert (forged_ping.status_code, forged_ping.json()) == (401, {"error": "bad_signature"})
    assert (tampered.status_code, tampered.json()) == (401, {"error": "bad_signature"})
    assert (events_pong.status_code, events_pong.content) == (204, b"")
    assert await stored(sqlite_url) == [("dc", snowflake, "interaction.application_command")]


async def test_discord_webhook_event_is_stored_and_answered_204(sqlite_url: str) -> None:
    event = json.dumps(
        {
            "version": 1,
            "application_id": "1",
            "type": 1,
            "event": {
                "type": "ENTITLEMENT_CREATE",
                "timestamp": "2023-11-14T22:13:19Z",
                "data": {},
            },
        }
    ).encode()
    headers = discord_request(event)
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post("/hooks/dc", content=event, headers=headers)
        again = await client.post("/hooks/dc", content=event, headers=headers)
    assert [(r.status_code, r.content) for r in (first, again)] == [(204, b""), (204, b"")]
    key = "event:sha256:" + hashlib.sha256(event).hexdigest()
    assert await stored(sqlite_url) == [("dc", key, "ENTITLEMENT_CREATE")]


async def test_zoom_event_and_url_validation(sqlite_url: str) -> None:
    event = json.dumps(
        {
            "event": "meeting.ended",
            "event_ts": NOW * 1000,
            "payload": {"account_id": "acc", "object": {"id": "85012345678", "uuid": "u=="}},
        }
    ).encode()
    validation = json.dumps(
        {
            "payload": {"plainToken": "qgg8vlvZRS6UYooatFL8Aw"},
            "event_ts": NOW * 1000,
            "event": "endpoint.url_validation",
        }
    ).encode()
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post("/hooks/zm", content=event, headers=zoom_request(event))
        again = await client.post("/hooks/zm", content=event, headers=zoom_request(event))
        tampered = await client.post(
            "/hooks/zm", content=event + b"\n", headers=zoom_request(event)
        )
        answered = await client.post(
            "/hooks/zm", content=validation, headers=zoom_request(validation)
        )
        forged = await client.post(
            "/hooks/zm", content=validation, headers=zoom_request(validation, "attacker")
        )
    # Zoom names only 200 and 204 as success: a new event is 200, still "accepted".
    assert (first.status_code, first.json()["status"]) == (200, "accepted"), first.text
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert (tampered.status_code, tampered.json()) == (401, {"error": "bad_signature"})
    expected = hmac.new(ZM_SECRET.encode(), b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256).hexdigest()
    assert answered.status_code == 200
    assert answered.headers["content-type"] == "application/json"
    assert answered.json() == {"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": expected}
    assert (forged.status_code, forged.json()) == (401, {"error": "bad_signature"})
    rows = await stored(sqlite_url)
    assert [(source, kind) for source, _, kind in rows] == [("zm", "meeting.ended")]
