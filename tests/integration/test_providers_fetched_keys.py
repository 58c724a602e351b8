"""SNS and Pub/Sub through hookd served by uvicorn on loopback, their keys fetched from
the https URLs a real sender names: the certificate at an SNS message's
``SigningCertURL``, Google's JWKS. ``KeyServer`` answers for those hosts (an
``HTTPS_PROXY`` with a test CA; see ``tests.support.key_servers``), counting each fetch.

A valid request is 202 and stored once (a second delivery is a duplicate); a tampered,
wrong-key, stale or foreign one is refused and stores nothing; a certificate URL off
SNS's hosts is refused without a fetch; the keys are fetched once for many requests,
concurrent ones included; a key that cannot be fetched is 503 (the sender retries),
never 2xx. The SNS subscription handshake stores the confirmation, or with
``subscription = "confirm"`` visits ``SubscribeURL`` and stores nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import sqlalchemy as sa

from hookd.providers import PROVIDERS, sns
from hookd.providers.pubsub import SAMPLE_EMAIL, SAMPLE_KID
from hookd.sources import Sources, parse_sources
from ingest.keyfetch import KeyFetcher
from store import db
from store.models import EVENTS
from tests.support.asgi import running_app
from tests.support.key_servers import KeyServer
from tests.support.published_keys import certificate_pem, jwks, private_pem
from tests.support.server import HookdServer

pytestmark = pytest.mark.anyio

TOPIC = "arn:aws:sns:us-east-1:123456789012:orders"
CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem"
SUBSCRIBE_URL = (
    "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription"
    f"&TopicArn={TOPIC}&Token=2336412f37fb687f5d51e6e2425dacbba"
)
PUBLISHED = datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC).timestamp()
JWKS_URL = "https://www.googleapis.com/oauth2/v3/certs"
AUDIENCE = "https://hooks.example.com/hooks/ps"
EMAIL = "push@orders-project.iam.gserviceaccount.com"
KID = "1e52a0b8b6b1d6b3c8f0f6e0"

SOURCES = f"""
[[sources]]
name = "aws"
provider = "sns"
secrets = ["{TOPIC}"]

[[sources]]
name = "aws-confirm"
provider = "sns"
secrets = ["{TOPIC}"]
[sources.verify]
subscription = "confirm"

[[sources]]
name = "ps"
provider = "pubsub"
secrets = ["{EMAIL}"]
[sources.verify]
audience = "{AUDIENCE}"
type_attribute = "kind"
"""


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyServer]:
    """The key hosts, with hookd's outbound HTTPS pointed at them (proxy and CA)."""
    with KeyServer(tmp_path) as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        server.serve(CERT_URL, certificate_pem("sns"))
        server.serve(JWKS_URL, jwks(("pubsub", KID)), headers={"cache-control": "max-age=19845"})
        server.serve(SUBSCRIBE_URL, b"<ConfirmSubscriptionResponse/>")
        yield server


def sources() -> Sources:
    return parse_sources(SOURCES, Path("hookd.toml"), {})


async def stored(url: str, source: str) -> list[tuple[str, str | None]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            query = sa.select(EVENTS.c.dedupe_key, EVENTS.c.type).where(EVENTS.c.source == source)
            return [tuple(row) for row in (await conn.execute(query)).all()]  # type: ignore[misc]
    finally:
        await engine.dispose()


# --- SNS ----------------------------------------------------------------------------------


def sns_message(n: int = 1, kind: str = "Notification", **changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "Type": kind,
        "MessageId": f"22b80b92-fdea-4c2c-8f9d-{n:012d}",
        "TopicArn": TOPIC,
        "Message": json.dumps({"order": n}),
        "Timestamp": "2023-11-14T22:13:20.000Z",
        "SigningCertURL": CERT_URL,
    }
    if kind == "Notification":
        message["Subject"] = "order"
        message["UnsubscribeURL"] = "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe"
    else:
        message["Token"] = "2336412f37fb687f5d51e6e2425dacbba"
        message["SubscribeURL"] = SUBSCRIBE_URL
    message.update(changes)
    return message


def sns_request(message: dict[str, Any], key: str = "sns") -> tuple[dict[str, str], bytes]:
    signed = sns.sign_message(private_pem(key), message, "2")
    return sns.message_headers(signed), json.dumps(signed, indent=2).encode()


def at(offset_s: float = 5.0) -> Any:
    return lambda: PUBLISHED + offset_s


async def test_sns_notification_stored_once_and_the_certificate_fetched_once(
    keys: KeyServer, sqlite_url: str
) -> None:
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        headers, body = sns_request(sns_message(1))
        first = await client.post("/hooks/aws", content=body, headers=headers)
        again = await client.post("/hooks/aws", content=body, headers=headers)
        others = [
            await client.post("/hooks/aws", content=b, headers=h)
            for h, b in (sns_request(sns_message(n)) for n in range(2, 6))
        ]
    assert first.status_code == 202, first.text
    assert again.status_code == 200
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    assert [r.status_code for r in others] == [202] * 4
    rows = await stored(sqlite_url, "aws")
    assert len(rows) == 5
    assert ("22b80b92-fdea-4c2c-8f9d-000000000001", "orders.Notification") in rows
    assert keys.count(CERT_URL) == 1


async def test_sns_refusals_store_nothing(keys: KeyServer, sqlite_url: str) -> None:
    headers, body = sns_request(sns_message(1))
    tampered = body.replace(b'\\"order\\": 1', b'\\"order\\": 2')
    assert tampered != body
    _, wrong_key = sns_request(sns_message(2), key="sns-other")
    foreign = sns_request(sns_message(3, TopicArn="arn:aws:sns:us-east-1:123456789012:payments"))
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        answers = {
            "tampered": await client.post("/hooks/aws", content=tampered, headers=headers),
            "wrong_key": await client.post("/hooks/aws", content=wrong_key, headers=headers),
            "foreign": await client.post("/hooks/aws", content=foreign[1], headers=foreign[0]),
        }
    async with running_app(sources(), sqlite_url, via="http", clock=at(3901)) as (_, client):
        answers["stale"] = await client.post("/hooks/aws", content=body, headers=headers)
    assert {k: (r.status_code, r.json()["error"]) for k, r in answers.items()} == {
        "tampered": (401, "bad_signature"),
        "wrong_key": (401, "bad_signature"),
        "foreign": (401, "bad_signature"),
        "stale": (401, "timestamp_too_old"),
    }
    assert await stored(sqlite_url, "aws") == []


async def test_a_certificate_url_off_sns_is_refused_without_a_fetch(
    keys: KeyServer, sqlite_url: str
) -> None:
    evil = f"https://sns.us-east-1.amazonaws.com.evil.example/{CERT_URL.rsplit('/', 1)[1]}"
    keys.serve(evil, certificate_pem("sns-other"))
    headers, body = sns_request(sns_message(1, SigningCertURL=evil), key="sns-other")
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        answer = await client.post("/hooks/aws", content=body, headers=headers)
    assert answer.status_code == 401
    assert answer.json() == {"error": "malformed_signature"}
    assert keys.count(evil) == 0
    assert keys.tunnels == []
    assert await stored(sqlite_url, "aws") == []


@pytest.mark.parametrize(
    "path",
    [
        "/SimpleNotificationService-abc.pem",
        "/cert.pem",
        "/x/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem",
        "/SimpleNotificationService-7506A1E35B36EF5A444DD1A8E7CC3ED8.pem",
    ],
)
async def test_a_certificate_url_on_sns_at_another_path_is_refused_without_a_fetch(
    keys: KeyServer, sqlite_url: str, path: str
) -> None:
    """A sender that knows a topic the source takes cannot have hookd fetch (and keep)
    whatever an SNS host serves: only where SNS serves its certificates."""
    other = f"https://sns.us-east-1.amazonaws.com{path}"
    keys.serve(other, certificate_pem("sns-other"))
    headers, body = sns_request(sns_message(1, SigningCertURL=other), key="sns-other")
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        answer = await client.post("/hooks/aws", content=body, headers=headers)
    assert answer.status_code == 401
    assert answer.json() == {"error": "malformed_signature"}
    assert keys.tunnels == []
    assert await stored(sqlite_url, "aws") == []


async def test_certificates_that_cannot_be_fetched_never_evict_the_one_in_use(
    keys: KeyServer, sqlite_url: str
) -> None:
    """Messages naming certificates SNS does not have (each a 503) leave the real one
    kept, however few the fetcher may keep."""
    fetcher = KeyFetcher(max_entries=2)
    absent = [
        f"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-{n:032x}.pem"
        for n in range(1, 9)
    ]
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (app, client):
        app.receiver.key_fetcher = fetcher
        try:
            first = sns_request(sns_message(1))
            accepted = [await client.post("/hooks/aws", content=first[1], headers=first[0])]
            refused = []
            for n, url in enumerate(absent, start=10):
                h, b = sns_request(sns_message(n, SigningCertURL=url))
                refused.append(await client.post("/hooks/aws", content=b, headers=h))
            for n in (2, 3):
                h, b = sns_request(sns_message(n))
                accepted.append(await client.post("/hooks/aws", content=b, headers=h))
        finally:
            await fetcher.close()
    assert [r.status_code for r in refused] == [503] * len(absent)
    assert [a.status_code for a in accepted] == [202] * 3
    assert keys.count(CERT_URL) == 1
    assert all(keys.count(url) == 1 for url in absent)
    assert len(await stored(sqlite_url, "aws")) == 3


async def test_a_certificate_that_cannot_be_fetched_is_503_then_accepted(
    keys: KeyServer, sqlite_url: str
) -> None:
    missing = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0e7a7ed0e7a7ed0e7a7ed0e7a7ed0000.pem"
    headers, body = sns_request(sns_message(1, SigningCertURL=missing))
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (app, client):
        # A failure is remembered for a few seconds, so that a dead host is not asked
        # by every request; the sender's retry comes later than that.
        app.receiver.key_fetcher.failure_ttl_s = 0
        refused = await client.post("/hooks/aws", content=body, headers=headers)
        assert await stored(sqlite_url, "aws") == []
        keys.serve(missing, certificate_pem("sns"))
        accepted = await client.post("/hooks/aws", content=body, headers=headers)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    assert refused.json() == {"error": "unavailable"}
    assert accepted.status_code == 202, accepted.text
    assert keys.count(missing) == 2


async def test_concurrent_requests_share_one_fetch(keys: KeyServer, sqlite_url: str) -> None:
    slow = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-5105e5105e5105e5105e5105e5105e51.pem"
    keys.serve(slow, certificate_pem("sns"), delay_s=0.5)
    requests = [sns_request(sns_message(n, SigningCertURL=slow)) for n in range(1, 13)]
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        answers = await asyncio.gather(
            *(client.post("/hooks/aws", content=b, headers=h) for h, b in requests)
        )
    assert [a.status_code for a in answers] == [202] * 12
    assert keys.count(slow) == 1
    assert len(await stored(sqlite_url, "aws")) == 12


async def test_subscription_confirmation_is_stored_for_the_user_by_default(
    keys: KeyServer, sqlite_url: str
) -> None:
    headers, body = sns_request(sns_message(1, "SubscriptionConfirmation"))
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        answer = await client.post("/hooks/aws", content=body, headers=headers)
    assert answer.status_code == 202, answer.text
    assert [t for _, t in await stored(sqlite_url, "aws")] == ["orders.SubscriptionConfirmation"]
    assert keys.count(SUBSCRIBE_URL) == 0


async def test_confirm_visits_subscribe_url_once_and_stores_nothing(
    keys: KeyServer, sqlite_url: str
) -> None:
    headers, body = sns_request(sns_message(1, "SubscriptionConfirmation"))
    _, forged = sns_request(sns_message(2, "SubscriptionConfirmation"), key="sns-other")
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        refused = await client.post("/hooks/aws-confirm", content=forged, headers=headers)
        assert keys.count(SUBSCRIBE_URL) == 0
        confirmed = await client.post("/hooks/aws-confirm", content=body, headers=headers)
        notified = sns_request(sns_message(3))
        event = await client.post("/hooks/aws-confirm", content=notified[1], headers=notified[0])
    assert refused.status_code == 401
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json() == {"subscription": "confirmed"}
    assert keys.count(SUBSCRIBE_URL) == 1
    assert event.status_code == 202
    assert [t for _, t in await stored(sqlite_url, "aws-confirm")] == ["orders.Notification"]


async def test_confirm_that_cannot_reach_subscribe_url_is_503(
    keys: KeyServer, sqlite_url: str
) -> None:
    keys.serve(SUBSCRIBE_URL, b"busy", status=500)
    headers, body = sns_request(sns_message(1, "SubscriptionConfirmation"))
    async with running_app(sources(), sqlite_url, via="http", clock=at()) as (_, client):
        answer = await client.post("/hooks/aws-confirm", content=body, headers=headers)
    assert answer.status_code == 503
    assert keys.count(SUBSCRIBE_URL) == 1
    assert await stored(sqlite_url, "aws-confirm") == []


# --- Pub/Sub ------------------------------------------------------------------------------

NOW = 1_700_000_000


def push(
    n: int, key: str = "pubsub", kid: str = KID, **claims: Any
) -> tuple[dict[str, str], bytes]:
    token_claims: dict[str, Any] = {
        "aud": AUDIENCE,
        "email": EMAIL,
        "email_verified": True,
        "iat": NOW,
        "exp": NOW + 3600,
        "iss": "https://accounts.google.com",
        "sub": "106023937129283497361",
        **claims,
    }
    token = jwt.encode(token_claims, private_pem(key), algorithm="RS256", headers={"kid": kid})
    message = {
        "attributes": {"kind": "order.created"},
        "data": "eyJvcmRlciI6IDF9",
        "messageId": f"94701533124115{n:02d}",
        "publishTime": "2023-11-14T22:13:19.874Z",
    }
    body = json.dumps({"message": message, "subscription": "projects/p/subscriptions/orders"})
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}, body.encode()


async def test_pubsub_push_stored_once_and_the_jwks_fetched_once(
    keys: KeyServer, sqlite_url: str
) -> None:
    async with running_app(sources(), sqlite_url, via="http", clock=lambda: NOW + 1) as (
        _,
        client,
    ):
        headers, body = push(1)
        first = await client.post("/hooks/ps", content=body, headers=headers)
        # Pub/Sub retries with a new token: the same message is a duplicate.
        again = await client.post("/hooks/ps", content=body, headers=push(1, iat=NOW + 1)[0])
        others = [
            await client.post("/hooks/ps", content=b, headers=h)
            for h, b in (push(n) for n in range(2, 6))
        ]
    assert first.status_code == 202, first.text
    assert again.status_code == 200
    assert again.json()["status"] == "duplicate"
    assert [r.status_code for r in others] == [202] * 4
    rows = await stored(sqlite_url, "ps")
    assert len(rows) == 5
    assert {t for _, t in rows} == {"order.created"}
    assert keys.count(JWKS_URL) == 1


async def test_pubsub_refusals_store_nothing(keys: KeyServer, sqlite_url: str) -> None:
    cases = {
        "wrong_key": push(1, key="pubsub-other"),
        "unknown_kid": push(2, kid="rotated-away"),
        "audience": push(3, aud="https://hooks.example.com/hooks/other"),
        "account": push(4, email="intruder@evil.iam.gserviceaccount.com"),
        "expired": push(5, exp=NOW - 400),
    }
    async with running_app(sources(), sqlite_url, via="http", clock=lambda: NOW + 1) as (
        _,
        client,
    ):
        answers = {
            name: await client.post("/hooks/ps", content=body, headers=headers)
            for name, (headers, body) in cases.items()
        }
        unsigned = await client.post("/hooks/ps", content=cases["wrong_key"][1])
    assert {k: (r.status_code, r.json()["error"]) for k, r in answers.items()} == {
        "wrong_key": (401, "bad_signature"),
        "unknown_kid": (401, "bad_signature"),
        "audience": (401, "bad_signature"),
        "account": (401, "bad_signature"),
        "expired": (401, "timestamp_too_old"),
    }
    assert unsigned.status_code == 401
    assert unsigned.json() == {"error": "missing_header"}
    assert await stored(sqlite_url, "ps") == []
    # The expired token was refused on its header, before its keys were needed.
    assert keys.count(JWKS_URL) == 1


class Clock:
    """The fetcher's clock (monotonic seconds), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NEW_KID = "9a2b7c1d0e4f5a6b7c8d9e0f1a2b3c4d"


async def test_pubsub_a_rotated_key_is_fetched_once_forged_kids_at_most_once_a_minute(
    keys: KeyServer, sqlite_url: str
) -> None:
    """A kid the kept JWKS lacks has hookd fetch it again, though its max-age runs for
    hours: a key Google added since is accepted. Requests naming kids that do not exist
    make at most one fetch a minute, however many and however concurrent."""
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    rotated = jwks(("pubsub", KID), ("pubsub-new", NEW_KID))
    async with running_app(sources(), sqlite_url, via="http", clock=lambda: NOW + 1) as (
        app,
        client,
    ):
        app.receiver.key_fetcher = fetcher

        async def post(request: tuple[dict[str, str], bytes]) -> httpx.Response:
            return await client.post("/hooks/ps", content=request[1], headers=request[0])

        try:
            assert (await post(push(1))).status_code == 202
            assert keys.count(JWKS_URL) == 1
            keys.serve(JWKS_URL, rotated, headers={"cache-control": "max-age=19845"})
            # Within a minute of the fetch: the kept keys are as fresh as they may be.
            early = await post(push(2, key="pubsub-new", kid=NEW_KID))
            assert (early.status_code, early.json()["error"]) == (401, "bad_signature")
            assert keys.count(JWKS_URL) == 1
            clock.now += 61
            assert (await post(push(2, key="pubsub-new", kid=NEW_KID))).status_code == 202
            assert keys.count(JWKS_URL) == 2
            # Kept from that fetch: both kids verify with no fetch at all.
            assert (await post(push(3, key="pubsub-new", kid=NEW_KID))).status_code == 202
            assert (await post(push(4))).status_code == 202
            forged = [push(n, key="pubsub-other", kid=f"forged-{n}") for n in range(10, 30)]
            answers = [await post(f) for f in forged[:10]]
            assert keys.count(JWKS_URL) == 2
            clock.now += 61
            answers += await asyncio.gather(*(post(f) for f in forged[10:]))
            assert keys.count(JWKS_URL) == 3
        finally:
            await fetcher.close()
    assert [(a.status_code, a.json()["error"]) for a in answers] == [(401, "bad_signature")] * 20
    rows = await stored(sqlite_url, "ps")
    assert sorted(k for k, _ in rows) == [f"94701533124115{n:02d}" for n in (1, 2, 3, 4)]


async def test_pubsub_a_failed_refetch_is_503_and_the_kept_keys_stay(
    keys: KeyServer, sqlite_url: str
) -> None:
    clock = Clock()
    fetcher = KeyFetcher(clock=clock)
    async with running_app(sources(), sqlite_url, via="http", clock=lambda: NOW + 1) as (
        app,
        client,
    ):
        app.receiver.key_fetcher = fetcher
        try:
            first = await client.post("/hooks/ps", content=push(1)[1], headers=push(1)[0])
            keys.serve(JWKS_URL, b"down", status=500)
            clock.now += 61
            h, b = push(2, key="pubsub-new", kid=NEW_KID)
            unavailable = await client.post("/hooks/ps", content=b, headers=h)
            h, b = push(3)
            kept = await client.post("/hooks/ps", content=b, headers=h)
        finally:
            await fetcher.close()
    assert first.status_code == 202
    assert unavailable.status_code == 503
    assert unavailable.json() == {"error": "unavailable"}
    assert kept.status_code == 202
    assert keys.count(JWKS_URL) == 2
    assert len(await stored(sqlite_url, "ps")) == 2


async def test_pubsub_jwks_unavailable_is_503(keys: KeyServer, sqlite_url: str) -> None:
    keys.serve(JWKS_URL, b"oops", status=500)
    headers, body = push(1)
    async with running_app(sources(), sqlite_url, via="http", clock=lambda: NOW + 1) as (
        _,
        client,
    ):
        answer = await client.post("/hooks/ps", content=body, headers=headers)
    assert answer.status_code == 503
    assert await stored(sqlite_url, "ps") == []


# --- a hookd serve process ----------------------------------------------------------------


async def test_hookd_serve_fetches_through_the_environments_proxy(
    keys: KeyServer, sqlite_url: str, tmp_path: Path
) -> None:
    """``hookd serve`` as deployed, its outbound HTTPS pointed at the key hosts by
    ``HTTPS_PROXY`` and ``SSL_CERT_FILE`` alone; its samples (what ``hookd send-test``
    sends) are accepted, each stored once, each key fetched once."""
    keys.serve(sns.SAMPLE_CERT_URL, certificate_pem("sns"))
    keys.serve(JWKS_URL, jwks(("pubsub", SAMPLE_KID)))
    config = tmp_path / "hookd.toml"
    config.write_text(
        f'[[sources]]\nname = "aws"\nprovider = "sns"\nsecrets = ["{sns.SAMPLE_TOPIC}"]\n\n'
        f'[[sources]]\nname = "ps"\nprovider = "pubsub"\nsecrets = ["{SAMPLE_EMAIL}"]\n'
        f'[sources.verify]\naudience = "{AUDIENCE}"\n'
    )
    env = {"HOOKD_CONFIG": str(config), "HOOKD_DATABASE_URL": sqlite_url, **keys.env()}
    now = int(time.time())
    pubsub_adapter = parse_sources(config.read_text(), config, {}).get("ps")
    assert pubsub_adapter is not None
    with HookdServer(env, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            answers = []
            for seq in (1, 2, 3):
                headers, body = PROVIDERS["sns"].sample_event(private_pem("sns"), seq, now)
                answers.append(await client.post("/hooks/aws", content=body, headers=headers))
                if seq == 1:
                    again = await client.post("/hooks/aws", content=body, headers=headers)
                headers, body = pubsub_adapter.adapter.sample_event(private_pem("pubsub"), seq, now)
                answers.append(await client.post("/hooks/ps", content=body, headers=headers))
    assert [a.status_code for a in answers] == [202] * 6, [a.text for a in answers]
    assert again.status_code == 200
    assert len(await stored(sqlite_url, "aws")) == 3
    assert len(await stored(sqlite_url, "ps")) == 3
    assert keys.count(sns.SAMPLE_CERT_URL) == 1
    assert keys.count(JWKS_URL) == 1
