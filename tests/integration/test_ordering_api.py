"""Source objects as operators see them ([sources.order]): events posted to the receiver
(which stamps them), processed in-process, then listed by object through the API, the
admin UI and ``hookd events list --object``, and one object's latest known state at
``GET /api/sources/{name}/objects/{id}``; the answers are the documented schemas."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from hookd.ops import models
from hookd.sources import Sources, parse_sources
from tests.support.asgi import running_app
from tests.support.cli import hookd
from tests.support.constants import GITHUB_SECRET, STRIPE_SECRET
from tests.support.signing import signature_value
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio

TOKEN = "ordering-api-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
SOURCES = f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]

[sources.order]
key = "data.object.id"
version = "created"

[[sources]]
name = "github"
provider = "github"
secrets = ["{GITHUB_SECRET}"]
"""


@pytest.fixture
def ordered(tmp_path: Path) -> Sources:
    return parse_sources(SOURCES, tmp_path / "hookd.toml", env={})


async def post(client: httpx.AsyncClient, n: int, obj: str, version: int) -> str:
    body = json.dumps(
        {
            "id": f"evt_{n}",
            "type": "customer.updated",
            "created": version,
            "data": {"object": {"id": obj}},
        }
    ).encode()
    ts = str(int(time.time()))
    headers = {
        "stripe-signature": signature_value("stripe", STRIPE_SECRET, body, ts),
        "content-type": "application/json",
    }
    response = await client.post("/hooks/stripe", content=body, headers=headers)
    assert response.status_code == 202, response.text
    event_id: str = response.json()["event_id"]
    return event_id


async def all_done(client: httpx.AsyncClient, ids: list[str]) -> bool:
    for event_id in ids:
        response = await client.get(f"/api/events/{event_id}", headers=BEARER)
        if not response.json()["done"]:
            return False
    return True


async def test_events_are_listed_by_object_and_an_object_shows_its_latest_state(
    ordered: Sources, sqlite_url: str
) -> None:
    async with running_app(ordered, sqlite_url, admin_token=TOKEN) as (_, client):
        ids = [await post(client, n, "cus_a", 1_700_000_000 + n) for n in range(3)]
        other = await post(client, 9, "octo/hello:42", 1_700_000_000)
        await wait_for(lambda: all_done(client, [*ids, other]), timeout_s=20, interval_s=0.05)

        page = (await client.get("/api/events?source=stripe&object=cus_a", headers=BEARER)).json()
        assert [e["id"] for e in page["events"]] == ids[::-1]
        for event in page["events"]:
            models.Event.model_validate(event)
            assert event["object_key"] == "cus_a" and len(event["payload_hash"]) == 64
        assert [e["object_version"] for e in page["events"]] == [
            1_700_000_002.0,
            1_700_000_001.0,
            1_700_000_000.0,
        ]

        state = (await client.get("/api/sources/stripe/objects/cus_a", headers=BEARER)).json()
        models.SourceObject.model_validate(state)
        assert state["name"] == "sources/stripe/objects/cus_a"
        assert (state["latest_type"], state["version"], state["last_event_id"]) == (
            "customer.updated",
            1_700_000_002.0,
            ids[-1],
        )
        assert state["events"]["processed"] == 3
        # A key with a "/" in it is one path, as it is.
        slashed = await client.get("/api/sources/stripe/objects/octo/hello:42", headers=BEARER)
        assert slashed.status_code == 200 and slashed.json()["last_event_id"] == other

        for path, status, code in [
            ("/api/sources/stripe/objects/cus_nobody", 404, "not_found"),
            ("/api/sources/nope/objects/cus_a", 404, "not_found"),
            ("/api/sources/github/objects/cus_a", 409, "not_configured"),
        ]:
            refused = await client.get(path, headers=BEARER)
            assert (refused.status_code, refused.json()["error"]) == (status, code), path
        assert (await client.get("/api/sources/stripe/objects/cus_a")).status_code == 401


async def test_the_admin_ui_filters_events_by_object_and_shows_the_object(
    ordered: Sources, sqlite_url: str
) -> None:
    async with running_app(ordered, sqlite_url, admin_token=TOKEN) as (_, client):
        ids = [await post(client, n, "cus_a", 1_700_000_000 + n) for n in range(2)]
        await wait_for(lambda: all_done(client, ids), timeout_s=20, interval_s=0.05)
        assert (await client.post("/admin/login", data={"token": TOKEN})).status_code == 303

        listed = await client.get("/admin/events?source=stripe&object=cus_a")
        assert listed.status_code == 200
        assert all(event_id in listed.text for event_id in ids)
        assert 'href="/admin/sources/stripe/objects/cus_a"' in listed.text

        page = await client.get("/admin/sources/stripe/objects/cus_a")
        assert page.status_code == 200
        assert "customer.updated" in page.text and ids[-1] in page.text

        event = await client.get(f"/admin/events/{ids[0]}")
        assert 'href="/admin/sources/stripe/objects/cus_a"' in event.text
        missing = await client.get("/admin/sources/stripe/objects/cus_nobody")
        assert missing.status_code == 404


async def test_events_list_object_prints_one_objects_events_with_versions(
    ordered: Sources, sqlite_url: str
) -> None:
    async with running_app(ordered, sqlite_url, admin_token=TOKEN) as (_, client):
        ids = [await post(client, n, "cus_a", 1_700_000_000 + n) for n in range(2)]
        await post(client, 5, "cus_b", 1_700_000_000)
    listed = hookd(sqlite_url, "events", "list", "--object", "cus_a", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ids[::-1]
    table = hookd(sqlite_url, "events", "list", "--object", "cus_a")
    assert table.stdout.splitlines()[0].split()[-1] == "OBJECT_VERSION"
    assert "1700000001.0" in table.stdout
