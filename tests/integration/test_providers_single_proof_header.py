"""Providers whose proof is one header and no signed timestamp header (Shopify, GitLab,
Bitbucket Cloud and Linear) through the real app: a delivery signed
as the provider signs it is accepted once (202), its repeat is the same event (200
duplicate), a tampered one is refused (401 and its reason) and stores nothing, and each
provider's own sample event (what ``hookd send-test`` sends) is accepted.

Requests are signed here from the providers' documented schemes, not with
``hookd.providers``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
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

SECRETS = {
    "shopify": "shpss_integration_client_secret",
    "gitlab": "gitlab-integration-token",
    "bitbucket": "bitbucket-integration-secret",
    "linear": "lin_wh_integration_signing_secret",
}
SOURCES = "".join(
    f'[[sources]]\nname = "{name}-in"\nprovider = "{name}"\nsecrets = ["{secret}"]\n'
    for name, secret in SECRETS.items()
)
NAMES = list(SECRETS)
PROOF = {
    "shopify": "X-Shopify-Hmac-Sha256",
    "gitlab": "X-Gitlab-Token",
    "bitbucket": "X-Hub-Signature",
    "linear": "Linear-Signature",
}


def hmac_sha256(secret: str, body: bytes) -> bytes:
    return hmac.new(secret.encode(), body, hashlib.sha256).digest()


def delivery(provider: str, now: int, secret: str | None = None) -> tuple[dict[str, str], bytes]:
    """One delivery as ``provider`` sends it at ``now``."""
    secret = secret or SECRETS[provider]
    if provider == "shopify":
        body = json.dumps({"id": 450789469, "name": "#1001", "total_price": "598.94"}).encode()
        return {
            "X-Shopify-Topic": "orders/create",
            "X-Shopify-Hmac-Sha256": base64.b64encode(hmac_sha256(secret, body)).decode(),
            "X-Shopify-Shop-Domain": "example.myshopify.com",
            "X-Shopify-API-Version": "2025-07",
            "X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            "X-Shopify-Event-Id": "98880550-7158-44d4-b7cd-2c97c8a091b5",
            "X-Shopify-Triggered-At": "2023-03-29T18:00:27.877041743Z",
            "Content-Type": "application/json",
        }, body
    if provider == "gitlab":
        body = json.dumps(
            {"object_kind": "issue", "object_attributes": {"id": 301, "action": "open"}}
        ).encode()
        return {
            "X-Gitlab-Event": "Issue Hook",
            "X-Gitlab-Token": secret,
            "Idempotency-Key": "f5e5f430-f57b-4e6e-9fac-d9128cd7232f",
            "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
            "Content-Type": "application/json",
        }, body
    if provider == "bitbucket":
        body = json.dumps({"repository": {"full_name": "team/repo"}, "push": {}}).encode()
        return {
            "X-Event-Key": "repo:push",
            "X-Hook-UUID": "{cb7d8f3e-0a7a-4c3b-9e3c-6f0a6b2a1d9e}",
            "X-Request-UUID": "5f9a7c53-5f57-4a1e-9a40-2b4f8c1e0d77",
            "X-Attempt-Number": "1",
            "X-Hub-Signature": "sha256=" + hmac_sha256(secret, body).hex(),
            "Content-Type": "application/json",
        }, body
    assert provider == "linear", provider
    body = json.dumps(
        {"action": "create", "type": "Issue", "data": {"id": "i1"}, "webhookTimestamp": now * 1000}
    ).encode()
    return {
        "Linear-Delivery": "234d1a4e-b617-4388-90fe-adc3633d6b72",
        "Linear-Event": "Issue",
        "Linear-Signature": hmac_sha256(secret, body).hex(),
        "Content-Type": "application/json; charset=utf-8",
    }, body


EXPECTED = {
    "shopify": ("orders/create:98880550-7158-44d4-b7cd-2c97c8a091b5", "orders/create"),
    "gitlab": ("f5e5f430-f57b-4e6e-9fac-d9128cd7232f", "issue.open"),
    "bitbucket": ("5f9a7c53-5f57-4a1e-9a40-2b4f8c1e0d77", "repo:push"),
    "linear": ("234d1a4e-b617-4388-90fe-adc3633d6b72", "Issue.create"),
}


def sources() -> Sources:
    return parse_sources(SOURCES, Path("hookd.toml"), {})


async def stored(url: str, source: str) -> list[tuple[str, str | None, str]]:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            query = sa.select(EVENTS.c.dedupe_key, EVENTS.c.type, EVENTS.c.verified_with).where(
                EVENTS.c.source == source
            )
            return [tuple(row) for row in (await conn.execute(query)).all()]
    finally:
        await engine.dispose()


@pytest.mark.parametrize("provider", NAMES)
async def test_signed_delivery_is_202_then_duplicate_200_and_one_row(
    provider: str, sqlite_url: str
) -> None:
    now = 1_700_000_000
    headers, body = delivery(provider, now)
    path = f"/hooks/{provider}-in"
    async with running_app(
        sources(), sqlite_url, reconcile_schedule=False, clock=lambda: now + 0.5
    ) as (_, client):
        first = await client.post(path, content=body, headers=headers)
        again = await client.post(path, content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert first.json()["status"] == "accepted"
    assert again.status_code == 200, again.text
    assert again.json() == {"event_id": first.json()["event_id"], "status": "duplicate"}
    rows = await stored(sqlite_url, f"{provider}-in")
    assert len(rows) == 1
    key, kind, verified_with = rows[0]
    assert (key, kind) == EXPECTED[provider]
    assert verified_with.startswith(f"{provider}-")


def tampered(provider: str, now: int) -> tuple[dict[str, str], bytes, str]:
    """A delivery changed in transit, and the reason it must be refused with."""
    headers, body = delivery(provider, now)
    if provider == "gitlab":
        # The token covers no body: only a wrong token can be caught.
        return delivery(provider, now, secret="gitlab-guessed-token")[0], body, "bad_signature"
    return headers, body.replace(b"}", b', "x": 1}', 1), "bad_signature"


@pytest.mark.parametrize("provider", NAMES)
async def test_tampered_delivery_is_401_with_its_reason_and_stores_nothing(
    provider: str, sqlite_url: str
) -> None:
    now = 1_700_000_000
    headers, body, reason = tampered(provider, now)
    genuine, _ = delivery(provider, now)
    unproven = {name: value for name, value in genuine.items() if name != PROOF[provider]}
    path = f"/hooks/{provider}-in"
    async with running_app(
        sources(), sqlite_url, reconcile_schedule=False, clock=lambda: now + 0.5
    ) as (_, client):
        forged = await client.post(path, content=body, headers=headers)
        bare = await client.post(path, content=body, headers=unproven)
    assert forged.status_code == 401, forged.text
    assert forged.json() == {"error": reason}
    assert bare.status_code == 401, bare.text
    assert bare.json() == {"error": "missing_header"}
    assert await stored(sqlite_url, f"{provider}-in") == []


async def test_stale_linear_delivery_is_401_timestamp_too_old(sqlite_url: str) -> None:
    now = 1_700_000_000
    headers, body = delivery("linear", now - 301)
    async with running_app(
        sources(), sqlite_url, reconcile_schedule=False, clock=lambda: now + 0.5
    ) as (_, client):
        response = await client.post("/hooks/linear-in", content=body, headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "timestamp_too_old"}
    assert await stored(sqlite_url, "linear-in") == []


@pytest.mark.parametrize("provider", NAMES)
async def test_the_providers_own_sample_event_is_accepted_by_send_test(
    provider: str, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hookd send-test`` signs with the source's first secret and the clock of now."""
    all_sources = sources()
    name = f"{provider}-in"
    source = all_sources.get(name)
    assert source is not None
    headers, body = source.adapter.sample_event(SECRETS[provider], 1, int(time.time()))
    async with running_app(all_sources, sqlite_url, reconcile_schedule=False) as (app, client):
        direct = await client.post(f"/hooks/{name}", content=body, headers=headers)
        assert direct.status_code == 202, direct.text
        async with serve_app(app) as hookd_url:
            args = build_parser().parse_args(
                ["send-test", name, "--count", "2", "--url", f"{hookd_url}/hooks/{name}"]
            )
            settings = Settings(database_url=sqlite_url)
            assert await asyncio.to_thread(cmd_send_test, args, settings, all_sources) == 0
    sent = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in sent] == ["202", "202"]
    assert len(await stored(sqlite_url, name)) == 3
