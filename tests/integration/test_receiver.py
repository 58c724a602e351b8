"""The receiver on SQLite and on real PostgreSQL, both ways a request reaches it:
through the ASGI interface, and over HTTP with ``hookd serve``'s protocol, where
deliveries take the direct path (``ingest.direct``). Each test runs both ways."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from hookd.providers.github import github_headers
from hookd.providers.signing import sample_event
from hookd.providers.slack import slack_headers
from hookd.sources import Sources
from store.crypto import BodyCipher
from store.models import EVENTS
from tests.support import rawhttp
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of

pytestmark = pytest.mark.anyio
PROVIDERS = ["github", "stripe", "slack", "standard"]


@pytest.fixture(params=["asgi", "http"])
def via(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def rows(url: str) -> list[sa.Row]:  # type: ignore[type-arg]
    async with engine_of(url) as engine, engine.connect() as conn:
        return list((await conn.execute(sa.select(EVENTS))).all())


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_new_event_is_202_then_duplicate_is_200(
    via: str, provider: str, sources: Sources, db_url: str
) -> None:
    headers, body = sample_event(provider, SECRETS[provider], 1)
    async with running_app(sources, db_url, via=via) as (_, client):
        first = await client.post(f"/hooks/{provider}", content=body, headers=headers)
        second = await client.post(f"/hooks/{provider}", content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert first.json()["status"] == "accepted"
    assert second.status_code == 200
    assert second.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    stored = await rows(db_url)
    assert len(stored) == 1
    row = stored[0]._mapping
    assert row["id"] == first.json()["event_id"]
    assert row["body"] == body
    assert row["origin"] == "webhook"
    assert row["verified_with"].startswith(provider)
    assert row["received_at"].tzinfo is not None


async def test_event_stores_type_key_and_selected_headers(
    via: str, sources: Sources, sqlite_url: str
) -> None:
    body = json.dumps({"action": "opened", "number": 1}).encode()
    headers = github_headers(SECRETS["github"], body, "pull_request", "delivery-1")
    headers["X-Secret-Ish"] = "not kept"
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/github", content=body, headers=headers)
    assert response.status_code == 202
    row = (await rows(sqlite_url))[0]._mapping
    assert row["dedupe_key"] == "delivery-1"
    assert row["type"] == "pull_request.opened"
    assert row["headers"]["x-github-event"] == "pull_request"
    assert "x-secret-ish" not in row["headers"]
    assert "x-hub-signature-256" not in row["headers"]


async def test_slack_retry_of_same_event_is_a_duplicate(
    via: str, sources: Sources, sqlite_url: str
) -> None:
    headers, body = sample_event("slack", SECRETS["slack"], 1)
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        first = await client.post("/hooks/slack", content=body, headers=headers)
        retry = await client.post(
            "/hooks/slack",
            content=body,
            headers={**headers, "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
        )
    assert (first.status_code, retry.status_code) == (202, 200)
    assert len(await rows(sqlite_url)) == 1


async def test_slack_url_verification_answers_challenge_and_stores_nothing(
    via: str, sources: Sources, sqlite_url: str
) -> None:
    body = json.dumps({"type": "url_verification", "token": "x", "challenge": "c-123"}).encode()
    headers = slack_headers(SECRETS["slack"], body, int(time.time()))
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/slack", content=body, headers=headers)
    assert response.status_code == 200
    assert response.json() == {"challenge": "c-123"}
    assert await rows(sqlite_url) == []


async def test_unsigned_challenge_is_refused(via: str, sources: Sources, sqlite_url: str) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "c-123"}).encode()
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/slack", content=body)
    assert response.status_code == 401


async def test_unknown_source_is_404(via: str, sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/nope", content=b"{}")
    assert response.status_code == 404
    assert response.json() == {"error": "unknown_source"}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_bad_signature_is_401_and_stores_nothing(
    via: str, provider: str, sources: Sources, db_url: str
) -> None:
    headers, body = sample_event(provider, SECRETS[provider], 1)
    tampered = body[:-2] + bytes([body[-2] ^ 1]) + body[-1:]
    async with running_app(sources, db_url, via=via) as (_, client):
        wrong = await client.post(f"/hooks/{provider}", content=tampered, headers=headers)
        missing = await client.post(f"/hooks/{provider}", content=body)
    assert wrong.status_code == 401 and wrong.json() == {"error": "bad_signature"}
    assert missing.status_code == 401 and missing.json()["error"] == "missing_header"
    assert await rows(db_url) == []


async def test_stale_timestamp_is_401(via: str, sources: Sources, sqlite_url: str) -> None:
    headers, body = sample_event("stripe", SECRETS["stripe"], 1, now=int(time.time()) - 301)
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/stripe", content=body, headers=headers)
    assert response.status_code == 401 and response.json() == {"error": "timestamp_too_old"}


async def test_signed_but_unparseable_payload_is_400(
    via: str, sources: Sources, sqlite_url: str
) -> None:
    body = b"\xff\xfe not json"
    headers = github_headers(SECRETS["github"], body, "push", "d-1")
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/github", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_payload"
    assert await rows(sqlite_url) == []


async def test_declared_oversized_body_is_413(via: str, sources: Sources, sqlite_url: str) -> None:
    headers, body = sample_event("standard", SECRETS["standard"], 1)
    big = body + b" " * 5000
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/standard", content=big, headers=headers)
    assert response.status_code == 413 and response.json() == {"error": "body_too_large"}
    assert await rows(sqlite_url) == []


async def test_streamed_oversized_body_is_413(via: str, sources: Sources, sqlite_url: str) -> None:
    headers, _ = sample_event("standard", SECRETS["standard"], 1)

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(100):
            yield b"x" * 1024

    async with running_app(sources, sqlite_url, via=via) as (_, client):
        if via == "asgi":
            response = await client.post("/hooks/standard", content=chunks(), headers=headers)
            assert response.status_code == 413
            return
        # Over HTTP the answer comes while the client still sends, and the connection
        # closes after it: a client writing on (httpx here) may see the reset before
        # the answer. So 8 KiB of chunks go at once, and the answer is read after.
        reader, writer = await rawhttp.connect(str(client.base_url))
        chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
        writer.write(
            rawhttp.request("/hooks/standard", headers={**headers, "Transfer-Encoding": "chunked"})
            + chunk * 8
        )
        status, answer_headers, answer = await asyncio.wait_for(rawhttp.read_response(reader), 10)
        assert (status, json.loads(answer)) == (413, {"error": "body_too_large"})
        assert answer_headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
        writer.close()
    assert await rows(sqlite_url) == []


async def test_database_down_is_503_with_retry_after(via: str, sources: Sources) -> None:
    dead = "postgresql+asyncpg://postgres@127.0.0.1:1/nothing"
    headers, body = sample_event("github", SECRETS["github"], 1)
    async with running_app(sources, dead, via=via) as (_, client):
        response = await client.post("/hooks/github", content=body, headers=headers)
        ready = await client.get("/readyz")
        health = await client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"error": "unavailable"}
    assert response.headers["retry-after"].isdigit()
    assert ready.status_code == 503
    assert health.status_code == 200


async def test_readyz_is_200_when_database_answers(via: str, sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, via=via) as (_, client):
        assert (await client.get("/readyz")).status_code == 200


async def test_metrics_need_the_admin_token(via: str, sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, via=via, admin_token="s3cret") as (_, client):
        headers, body = sample_event("github", SECRETS["github"], 1)
        await client.post("/hooks/github", content=body, headers=headers)
        anonymous = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
        right = await client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert right.status_code == 200
    assert 'hookd_webhooks_received_total{outcome="accepted",source="github"}' in right.text
    assert "hookd_ack_seconds_bucket" in right.text


async def test_metrics_answer_401_without_a_configured_token(
    sources: Sources, sqlite_url: str
) -> None:
    # ASGI only: httpx will not send a header value with trailing space over HTTP.
    async with running_app(sources, sqlite_url) as (_, client):
        response = await client.get("/metrics", headers={"Authorization": "Bearer "})
    assert response.status_code == 401


async def test_bodies_are_encrypted_at_rest_with_keys(
    via: str, sources: Sources, db_url: str
) -> None:
    key = Fernet.generate_key().decode()
    headers, body = sample_event("stripe", SECRETS["stripe"], 1)
    async with running_app(sources, db_url, via=via, encryption_keys=key) as (_, client):
        response = await client.post("/hooks/stripe", content=body, headers=headers)
    assert response.status_code == 202
    row = (await rows(db_url))[0]._mapping
    assert row["body_encrypted"] is True
    assert body not in row["body"]
    assert BodyCipher(f"{Fernet.generate_key().decode()},{key}").open(row["body"], True) == body


async def test_github_form_encoded_body_is_accepted(
    via: str, sources: Sources, sqlite_url: str
) -> None:
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps({"action": "created", "zen": "hi"})}).encode()
    headers = github_headers(SECRETS["github"], body, "issue_comment", "form-1")
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.post("/hooks/github", content=body, headers=headers)
    assert response.status_code == 202
    assert (await rows(sqlite_url))[0]._mapping["type"] == "issue_comment.created"


async def test_get_on_hook_is_405(via: str, sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, via=via) as (_, client):
        response = await client.get("/hooks/github")
    assert response.status_code == 405
