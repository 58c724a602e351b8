"""Pausing and resuming through the operations API and the admin UI (the ASGI app, on
SQLite and PostgreSQL): what they answer, what they record, and that a paused source's
webhooks are acknowledged and stored but not processed until it resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa
from jsonschema import Draft202012Validator
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.providers.signing import sample_event
from hookd.sources import Sources, parse_sources
from hookd.web import openapi
from store.models import EVENTS, PAUSES
from tests.support.admin import CSRF_RE
from tests.support.asgi import running_app
from tests.support.constants import SECRETS, SOURCES_TOML
from tests.support.data import engine_of
from tests.support.destinations import whsec
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "destinations-api-token"
READ = "destinations-read-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Nothing listens there: a delivery would fail, so none is made in these tests.
NOWHERE = "http://127.0.0.1:9"


def conforms(model: str, body: object) -> None:
    """``body`` is what the OpenAPI document's schema ``model`` says."""
    schema = {"$ref": f"#/components/schemas/{model}", **openapi.document()}
    Draft202012Validator(schema).validate(body)


@pytest.fixture
def routed(tmp_path: Path) -> Sources:
    """The shared sources, github with ``[sources.forward]`` and a named destination."""
    text = SOURCES_TOML.replace(
        'name = "github"\nprovider = "github"\nsecrets = ["gh-test-secret"]\n',
        'name = "github"\nprovider = "github"\nsecrets = ["gh-test-secret"]\n'
        f'[sources.forward]\nurl = "{NOWHERE}/forward"\nallow_insecure = true\n'
        f'secret = "{whsec("forward")}"\n'
        f'[[sources.destinations]]\nname = "billing"\nurl = "http://u:p@127.0.0.1:9/in?k=v"\n'
        "allow_insecure = true\n"
        f'secret = "{whsec("billing")}"\nrate_per_s = 5\n',
    )
    assert "billing" in text
    return parse_sources(text, tmp_path / "hookd.toml", env={})


async def test_the_api_pauses_and_resumes_a_destination_and_says_who_and_when(
    routed: Sources, sqlite_url: str
) -> None:
    async with running_app(routed, sqlite_url, admin_token=TOKEN, read_token=READ) as (
        _,
        client,
    ):
        answer = (await client.get("/api/destinations", headers=AUTH)).json()
        conforms("DestinationList", answer)
        listed = answer["destinations"]
        assert [(d["source"], d["name"]) for d in listed] == [
            ("github", "forward"),
            ("github", "billing"),
        ]
        billing = listed[1]
        # No user info, no query: they may hold credentials.
        assert billing["url"] == "http://127.0.0.1:9/in"
        assert billing["breaker"] == {
            "state": "closed",
            "failures": 0,
            "opened_at": None,
            "retry_at": None,
            "reason": None,
        }
        assert (billing["paused"], billing["pause"], billing["rate_per_s"]) == (False, None, 5)
        path = "/api/sources/github/destinations/billing"
        refused = await client.post(path + "/pause", headers={"Authorization": f"Bearer {READ}"})
        assert refused.status_code == 403
        paused = await client.post(path + "/pause?reason=downstream+upgrade", headers=AUTH)
        assert paused.status_code == 200, paused.text
        body = paused.json()
        conforms("Destination", body)
        assert body["paused"] is True
        assert body["pause"]["by"] == "api token:admin"
        assert body["pause"]["reason"] == "downstream upgrade"
        assert body["pause"]["at"].endswith("Z")
        sources = (await client.get("/api/sources", headers=AUTH)).json()["sources"]
        conforms("SourceList", {"sources": sources})
        [github] = [s for s in sources if s["name"] == "github"]
        assert github["paused"] is False
        assert [d["paused"] for d in github["destinations"]] == [False, True]
        resumed = await client.post(path + "/resume", headers=AUTH)
        assert resumed.status_code == 200 and resumed.json()["paused"] is False
        assert resumed.json()["pause"]["paused"] is False
        missing = await client.post("/api/sources/github/destinations/nope/pause", headers=AUTH)
        assert missing.status_code == 404
        only = await client.get("/api/destinations?source=stripe", headers=AUTH)
        assert only.json() == {"destinations": []}
        unknown = await client.get("/api/destinations?source=nope", headers=AUTH)
        assert unknown.status_code == 404
        bad = await client.post(path + "/pause?reason=a%00b", headers=AUTH)
        assert bad.status_code == 400


async def test_a_paused_source_acknowledges_and_stores_but_processes_only_after_resume(
    routed: Sources, db_url: str, engine: AsyncEngine
) -> None:
    async with running_app(routed, db_url, admin_token=TOKEN, sweep_s=0.1) as (_, client):
        paused = await client.post("/api/sources/stripe/pause", headers=AUTH)
        assert paused.status_code == 200 and paused.json()["paused"] is True
        conforms("Source", paused.json())
        ids = []
        for n in range(5):
            headers, body = sample_event("stripe", SECRETS["stripe"], n)
            answer = await client.post("/hooks/stripe", content=body, headers=headers)
            assert answer.status_code == 202
            ids.append(answer.json()["event_id"])
        await asyncio.sleep(0.5)  # five sweeps
        assert await statuses(engine, ids) == {"pending"}
        resumed = await client.post("/api/sources/stripe/resume", headers=AUTH)
        assert resumed.status_code == 200 and resumed.json()["paused"] is False

        async def processed() -> bool:
            return await statuses(engine, ids) == {"processed"}

        await wait_for(processed, timeout_s=10)


async def statuses(engine: AsyncEngine, ids: list[str]) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.select(EVENTS.c.status).where(EVENTS.c.id.in_(ids)))
        return {r[0] for r in rows}


async def test_the_admin_sources_page_shows_breakers_and_pauses_with_csrf(
    routed: Sources, sqlite_url: str
) -> None:
    async with (
        engine_of(sqlite_url) as engine,
        running_app(routed, sqlite_url, admin_token=TOKEN) as (_, client),
    ):
        assert (await client.post("/admin/login", data={"token": TOKEN})).status_code == 303
        page = await client.get("/admin")
        assert page.status_code == 200
        assert "<h2>Destinations</h2>" in page.text
        assert "github/billing" in page.text and "status-closed" in page.text
        assert 'action="/admin/sources/github/destinations/billing/pause"' in page.text
        match = CSRF_RE.search(page.text)
        assert match
        action = "/admin/sources/github/destinations/billing/pause"
        forged = await client.post(action, data={"csrf": "wrong", "reason": "x"})
        assert forged.status_code == 403
        assert await pauses(engine) == []
        done = await client.post(
            action, data={"csrf": match.group(1), "reason": "nightly", "back": "/admin"}
        )
        assert done.status_code == 303 and "done=paused" in done.headers["location"]
        assert await pauses(engine) == [("github", "billing", True, "admin session:admin")]
        page = await client.get("/admin")
        assert "status-paused" in page.text and "nightly" in page.text
        assert 'action="/admin/sources/github/destinations/billing/resume"' in page.text


async def pauses(engine: AsyncEngine) -> list[tuple[str, str, bool, str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(PAUSES.c.source, PAUSES.c.destination, PAUSES.c.paused, PAUSES.c.changed_by)
        )
        return [(r[0], r[1], bool(r[2]), r[3]) for r in rows]
