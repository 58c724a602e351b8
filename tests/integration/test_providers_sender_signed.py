"""Requests signed by the sender's side, not by hookd, through the real receiver
(Twilio, HubSpot, PagerDuty and Mailgun).

Each request is signed by the other side: Twilio's and HubSpot's own libraries, and for
PagerDuty and Mailgun a signer written from their documented steps (their published
vectors are checked in the unit tests). A signed request is 202 (Mailgun: 200) and one row; the same
again is 200 ``duplicate`` with the same event id; a tampered one is 401 with its reason
and stores nothing; the provider's ``sample_event`` (what ``hookd send-test`` sends) is
accepted too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa
from hubspot.utils.signature import Signature
from twilio.request_validator import RequestValidator

from hookd.sources import Sources, parse_sources
from store import db
from store.models import EVENTS
from tests.support.asgi import running_app

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000
SECRETS = {
    "twilio": "twilio-integration-auth-token",
    "hubspot": "hubspot-integration-client-secret",
    "pagerduty": "pagerduty-integration-subscription-secret",
    "mailgun": "mailgun-integration-signing-key",
}
TWILIO_URL = "https://hooks.example.com/twilio/status?account=main"
HUBSPOT_URL = "https://hooks.example.com/hubspot?portal=62515&tag=a%3Ab"
HUBSPOT_URI = "https://hooks.example.com/hubspot?portal=62515&tag=a:b"

SOURCES = f"""
[[sources]]
name = "tw"
provider = "twilio"
secrets = ["{SECRETS["twilio"]}"]
public_url = "{TWILIO_URL}"

[[sources]]
name = "hs"
provider = "hubspot"
secrets = ["{SECRETS["hubspot"]}"]
public_url = "{HUBSPOT_URL}"

[[sources]]
name = "pd"
provider = "pagerduty"
secrets = ["{SECRETS["pagerduty"]}"]

[[sources]]
name = "mg"
provider = "mailgun"
secrets = ["{SECRETS["mailgun"]}"]
"""
SOURCE_OF = {"twilio": "tw", "hubspot": "hs", "pagerduty": "pd", "mailgun": "mg"}


@dataclass(frozen=True)
class Case:
    headers: dict[str, str]
    body: bytes
    tampered_headers: dict[str, str]
    tampered_body: bytes
    reason: str


def twilio_case() -> Case:
    def request(params: list[tuple[str, str]]) -> tuple[dict[str, str], bytes]:
        validator = RequestValidator(SECRETS["twilio"])
        signature = validator.compute_signature(TWILIO_URL, dict(params))
        headers = {
            "X-Twilio-Signature": signature,
            "I-Twilio-Idempotency-Token": "9a1e7e55-0000-4000-8000-000000000001",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        return headers, urlencode(params).encode()

    params = [
        ("MessageSid", "SM11112222333344445555666677778888"),
        ("SmsSid", "SM11112222333344445555666677778888"),
        ("MessageStatus", "delivered"),
        ("SmsStatus", "delivered"),
        ("AccountSid", "AC11112222333344445555666677778888"),
        ("To", "+15558675310"),
        ("From", "+15017122661"),
        ("ApiVersion", "2010-04-01"),
    ]
    headers, body = request(params)
    changed = urlencode([(n, "failed" if n == "MessageStatus" else v) for n, v in params])
    return Case(headers, body, headers, changed.encode(), "bad_signature")


def hubspot_case() -> Case:
    millis = NOW * 1000
    events = [
        {
            "eventId": 4242,
            "subscriptionId": 2417091,
            "portalId": 62515,
            "appId": 54321,
            "occurredAt": millis - 500,
            "subscriptionType": "deal.creation",
            "attemptNumber": 0,
            "objectId": 9001,
            "changeSource": "CRM",
        }
    ]
    body = json.dumps(events).encode()

    def headers_at(ts: int) -> dict[str, str]:
        signature = Signature.get_signature(
            SECRETS["hubspot"], body.decode(), "v3", HUBSPOT_URI, "POST", str(ts)
        )
        return {
            "X-HubSpot-Signature-v3": signature,
            "X-HubSpot-Request-Timestamp": str(ts),
            "Content-Type": "application/json",
        }

    stale = headers_at(millis - 301_000)
    return Case(headers_at(millis), body, stale, body, "timestamp_too_old")


def pagerduty_case() -> Case:
    def headers_for(body: bytes) -> dict[str, str]:
        digest = hmac.new(SECRETS["pagerduty"].encode(), body, hashlib.sha256).hexdigest()
        return {
            "X-PagerDuty-Signature": f"v1={digest}",
            "X-Webhook-Id": "5ac64822-4adc-4fda-ade0-410becf0de4f",
            "X-Webhook-Subscription": "PX2ZL7A",
            "Content-Type": "application/json",
        }

    payload = {
        "event": {
            "id": "01BWDWL3NYY7LUFPZCC28QUCMK",
            "event_type": "incident.acknowledged",
            "resource_type": "incident",
            "occurred_at": "2023-11-14T22:13:19.500Z",
            "agent": None,
            "client": None,
            "data": {"id": "PGR0VU2", "type": "incident", "status": "acknowledged"},
        }
    }
    body = json.dumps(payload).encode()
    return Case(headers_for(body), body, headers_for(body), body + b" ", "bad_signature")


def mailgun_case() -> Case:
    token = "e0b5477167110d68991efc6b9f89f0a11066af27834600e123"

    def body_for(token_sent: str) -> bytes:
        digest = hmac.new(
            SECRETS["mailgun"].encode(), f"{NOW}{token}".encode(), hashlib.sha256
        ).hexdigest()
        block = {"timestamp": str(NOW), "token": token_sent, "signature": digest}
        data = {"id": "CPgfbmQMTCKtHW6uIWtuVe", "timestamp": NOW - 0.25, "event": "opened"}
        return json.dumps({"signature": block, "event-data": data}).encode()

    headers = {"Content-Type": "application/json"}
    return Case(headers, body_for(token), headers, body_for(token[::-1]), "bad_signature")


CASES: dict[str, Callable[[], Case]] = {
    "twilio": twilio_case,
    "hubspot": hubspot_case,
    "pagerduty": pagerduty_case,
    "mailgun": mailgun_case,
}


async def stored_keys(url: str, source: str) -> list[str]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            query = sa.select(EVENTS.c.dedupe_key).where(EVENTS.c.source == source)
            return list((await conn.execute(query)).scalars().all())
    finally:
        await engine.dispose()


def sources() -> Sources:
    return parse_sources(SOURCES, Path("hookd.toml"), {})


@pytest.mark.parametrize("provider", list(CASES))
async def test_signed_then_duplicate_then_tampered(provider: str, sqlite_url: str) -> None:
    case = CASES[provider]()
    name = SOURCE_OF[provider]
    path = f"/hooks/{name}"
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post(path, content=case.body, headers=case.headers)
        again = await client.post(path, content=case.body, headers=case.headers)
        tampered = await client.post(
            path, content=case.tampered_body, headers=case.tampered_headers
        )
    # Mailgun counts only a 200 as delivered: a new event gets 200 there, 202 elsewhere.
    assert first.status_code == (200 if provider == "mailgun" else 202), first.text
    assert first.json()["status"] == "accepted"
    assert again.status_code == 200, again.text
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert tampered.status_code == 401, tampered.text
    assert tampered.json() == {"error": case.reason}
    assert len(await stored_keys(sqlite_url, name)) == 1


@pytest.mark.parametrize("provider", list(CASES))
async def test_sample_event_is_accepted(provider: str, sqlite_url: str) -> None:
    """What ``hookd send-test`` sends to the source: signed for its public URL where the
    provider signs one, accepted once, a duplicate the second time."""
    source = sources().get(SOURCE_OF[provider])
    assert source is not None
    headers, body = source.adapter.sample_event(SECRETS[provider], 1, NOW)
    path = f"/hooks/{source.name}"
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post(path, content=body, headers=headers)
        again = await client.post(path, content=body, headers=headers)
    assert first.status_code == (200 if provider == "mailgun" else 202), first.text
    assert first.json()["status"] == "accepted"
    assert again.status_code == 200, again.text
    assert again.json()["event_id"] == first.json()["event_id"]
    assert len(await stored_keys(sqlite_url, source.name)) == 1


async def test_tampered_requests_store_nothing(sqlite_url: str) -> None:
    """Only tampered requests, for every provider: all 401, no row at all."""
    async with running_app(sources(), sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        for provider, make in CASES.items():
            case = make()
            answer = await client.post(
                f"/hooks/{SOURCE_OF[provider]}",
                content=case.tampered_body,
                headers=case.tampered_headers,
            )
            assert answer.status_code == 401, (provider, answer.text)
            assert answer.json() == {"error": case.reason}
    for name in SOURCE_OF.values():
        assert await stored_keys(sqlite_url, name) == []
