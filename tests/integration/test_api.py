"""Operations API: events list (keyset paged), one event, replay; bearer token only."""

from __future__ import annotations

import asyncio

import pytest

from hookd.providers.signing import sample_event
from hookd.sources import Sources
from tests.support.asgi import running_app
from tests.support.constants import SECRETS

pytestmark = pytest.mark.anyio
TOKEN = "ops-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_api_refuses_without_the_token(sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        for method, path in [
            ("GET", "/api/events"),
            ("GET", "/api/events/01J0000000000000000000000A"),
            ("POST", "/api/events/01J0000000000000000000000A/replay"),
        ]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                response = await client.request(method, path, headers=headers)
                assert response.status_code == 401, (method, path, headers)


async def test_events_are_listed_newest_first_in_pages(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=TOKEN) as (_, client):
        ids = []
        for i in range(5):
            headers, body = sample_event("stripe", SECRETS["stripe"], i)
            ids.append(
                (await client.post("/hooks/stripe", content=body, headers=headers)).json()[
                    "event_id"
                ]
            )
            await asyncio.sleep(0.002)
        first = (await client.get("/api/events?limit=2", headers=AUTH)).json()
        second = (
            await client.get(f"/api/events?limit=2&cursor={first['next_cursor']}", headers=AUTH)
        ).json()
        third = (
            await client.get(f"/api/events?limit=2&cursor={second['next_cursor']}", headers=AUTH)
        ).json()
        filtered = (await client.get("/api/events?source=github", headers=AUTH)).json()
    listed = [e["id"] for page in (first, second, third) for e in page["events"]]
    assert listed == ids[::-1]
    assert third["next_cursor"] is None
    assert filtered == {"events": [], "next_cursor": None}
    resource = first["events"][0]
    assert resource["name"] == f"events/{resource['id']}"
    assert resource["origin"] == "webhook"
    assert resource["type"] == "payment_intent.succeeded"


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=x", "limit=501", "status=done", "origin=mail", "cursor=abc"]
)
async def test_bad_query_is_400(sources: Sources, sqlite_url: str, query: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        response = await client.get(f"/api/events?{query}", headers=AUTH)
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


async def test_event_resource_and_replay(sources: Sources, db_url: str) -> None:
    headers, body = sample_event("github", SECRETS["github"], 1)
    async with running_app(sources, db_url, admin_token=TOKEN, sweep_s=0.05) as (_, client):
        event_id = (await client.post("/hooks/github", content=body, headers=headers)).json()[
            "event_id"
        ]
        for _ in range(100):
            resource = (await client.get(f"/api/events/{event_id}", headers=AUTH)).json()
            if resource["done"]:
                break
            await asyncio.sleep(0.05)
        assert resource["status"] == "processed"
        assert resource["attempts"] == 1
        assert resource["error"] is None
        assert resource["poll_after_seconds"] is None
        replay = await client.post(f"/api/events/{event_id}/replay", headers=AUTH)
        assert replay.status_code == 202
        assert replay.json()["status"] == "pending"
        assert replay.json()["attempts"] == 0
        assert replay.json()["origin"] == "webhook"
        for _ in range(100):
            again = (await client.get(f"/api/events/{event_id}", headers=AUTH)).json()
            if again["done"]:
                break
            await asyncio.sleep(0.05)
        assert again["status"] == "processed"
        listed = (await client.get("/api/events", headers=AUTH)).json()["events"]
        assert [e["id"] for e in listed] == [event_id]
        missing = await client.get("/api/events/01J0000000000000000000000A", headers=AUTH)
        missing_replay = await client.post(
            "/api/events/01J0000000000000000000000A/replay", headers=AUTH
        )
    assert missing.status_code == 404
    assert missing_replay.status_code == 404
