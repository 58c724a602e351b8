"""``/api/operations`` and the admin's operations pages: a bulk replay asked over HTTP
runs in the server's background and is polled to its end; the answers are the
document's; reads take the read token, writes only the admin token."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from hookd.sources import Sources
from store.crypto import BodyCipher
from store.intake.events import insert_events
from store.models import OPERATIONS
from tests.integration.test_openapi_schemas import Answers
from tests.support.admin import CSRF_RE
from tests.support.asgi import running_app
from tests.support.data import new_event
from tests.support.http import serve_app
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
ADMIN = {"Authorization": "Bearer ops-admin"}
READ = {"Authorization": "Bearer ops-read"}
COUNT = 300


def replay_body(**extra: Any) -> dict[str, Any]:
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    return {"action": "replay", "filter": {"source": "github", "since": since}, **extra}


async def done(
    client: httpx.AsyncClient, operation_id: str, headers: dict[str, str] = READ
) -> dict[str, Any]:
    async def look() -> dict[str, Any]:
        operation: dict[str, Any] = (
            await client.get(f"/api/operations/{operation_id}", headers=headers)
        ).json()
        return operation if operation["done"] else {}

    return await wait_for(look, timeout_s=20, interval_s=0.05, message="operation not done")


async def all_processed(client: httpx.AsyncClient, count: int) -> None:
    """Wait for the server to process what was stored (a replay skips events in progress)."""

    async def look() -> bool:
        page = await client.get("/api/events?status=processed&limit=500", headers=READ)
        return len(page.json()["events"]) == count

    await wait_for(look, timeout_s=20, interval_s=0.05, message="events not processed")


async def test_a_bulk_replay_asked_over_the_api_runs_in_the_background_to_its_end(
    sources: Sources, db_url: str
) -> None:
    async with running_app(
        sources, db_url, admin_token="ops-admin", read_token="ops-read", sweep_s=0.2
    ) as (app, client):
        async with app.state.engine.begin() as conn:
            await insert_events(conn, [new_event(f"api-{i}") for i in range(COUNT)], BodyCipher(""))
        await all_processed(client, COUNT)
        body = replay_body(request_id="deploy-42")
        refused = await client.post("/api/operations", json=body, headers=READ)
        started = await client.post("/api/operations", json=body, headers=ADMIN)
        assert refused.status_code == 403
        assert started.status_code == 202, started.text
        operation = started.json()
        assert operation["name"] == f"operations/{operation['id']}"
        assert operation["progress"]["total"] == COUNT and not operation["done"]
        final = await done(client, operation["id"])
        retried = await client.post("/api/operations", json=body, headers=ADMIN)
        listed = (await client.get("/api/operations", headers=READ)).json()
        cancel_done = await client.post(f"/api/operations/{operation['id']}/cancel", headers=ADMIN)
        other = await client.post(
            "/api/operations", json={**body, "action": "cancel"}, headers=ADMIN
        )
    assert final["status"] == "succeeded"
    assert final["progress"] == {"total": COUNT, "done": COUNT, "changed": COUNT, "skipped": 0}
    assert (retried.status_code, retried.json()["id"]) == (200, operation["id"])
    assert [o["id"] for o in listed["operations"]] == [operation["id"]]
    assert (cancel_done.status_code, cancel_done.json()["error"]) == (409, "done")
    assert (other.status_code, other.json()["error"]) == (409, "request_id_reused")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{", 400, "bad_request"),
        (b"[]", 400, "bad_request"),
        (b'{"action": "replay"}', 400, "bad_request"),
        (b'{"action": "delete", "filter": {"source": "github"}}', 400, "bad_request"),
        (b'{"action": "replay", "filter": {"source": "github"}, "extra": 1}', 400, "bad_request"),
        (b'{"action": "replay", "filter": {"source": "github"}, "dry_run": "yes"}', 400, None),
        (b" " * 70_000, 413, "body_too_large"),
    ],
)
async def test_a_bad_request_body_is_refused_and_records_nothing(
    sources: Sources, sqlite_url: str, body: bytes, status: int, code: str | None
) -> None:
    async with running_app(sources, sqlite_url, admin_token="ops-admin") as (_, client):
        refused = await client.post("/api/operations", content=body, headers=ADMIN)
        listed = (await client.get("/api/operations", headers=ADMIN)).json()
    assert refused.status_code == status, refused.text
    assert refused.json()["error"] == (code or "bad_request")
    assert listed == {"operations": [], "next_cursor": None}


async def test_operation_answers_validate_against_the_document(
    sources: Sources, db_url: str
) -> None:
    async with running_app(sources, db_url, admin_token="ops-admin", sweep_s=0.2) as (app, asgi):
        async with app.state.engine.begin() as conn:
            await insert_events(conn, [new_event(f"doc-{i}") for i in range(20)], BodyCipher(""))
        async with (
            serve_app(app) as url,
            httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=10) as client,
        ):
            answers = Answers(client)
            counted = await answers.call(
                "Operation", "POST", "/api/operations", 200, json=replay_body(dry_run=True)
            )
            queued = await answers.call(
                "Operation", "POST", "/api/operations", 202, json=replay_body()
            )
            finished = await done(asgi, queued["id"], ADMIN)
            await answers.call("Operation", "GET", f"/api/operations/{queued['id']}", 200)
            page = await answers.call("OperationList", "GET", "/api/operations?limit=1", 200)
            await answers.call("OperationList", "GET", "/api/operations", 200)
            cancel = {"action": "cancel", "filter": {"type": "nothing.matches"}}
            cancelled_at_once = await answers.call(
                "Operation", "POST", "/api/operations", 202, json=cancel
            )
            for status, method, path in [
                (404, "GET", f"/api/operations/{'0' * 26}"),
                (404, "POST", "/api/operations/nope/cancel"),
                (409, "POST", f"/api/operations/{counted['id']}/cancel"),
                (400, "GET", "/api/operations?cursor=nope"),
                (400, "POST", "/api/operations"),
            ]:
                await answers.call("Error", method, path, status)
    assert counted["done"] and counted["progress"] == {
        "total": 20,
        "done": 0,
        "changed": 0,
        "skipped": 0,
    }
    assert finished["status"] == "succeeded" and finished["error"] is None
    assert page["next_cursor"] is not None
    assert cancelled_at_once["progress"]["total"] == 0
    failures = answers.failures()
    assert not failures, "\n".join(failures)


async def test_admin_lists_operations_with_progress_and_asks_one_to_stop(
    sources: Sources, sqlite_url: str
) -> None:
    async with running_app(sources, sqlite_url, admin_token="ops-admin") as (app, client):
        started = await client.post(
            "/api/operations", json={"action": "replay", "filter": {"source": "x"}}, headers=ADMIN
        )
        operation_id = started.json()["id"]
        finished = await done(client, operation_id, ADMIN)
        # One that another process is running: its lease held, for a minute yet.
        async with app.state.engine.begin() as conn:
            await conn.execute(
                sa.update(OPERATIONS)
                .where(OPERATIONS.c.id == operation_id)
                .values(
                    status="running",
                    finished_at=None,
                    lease_owner="another-process",
                    lease_expires_at=datetime.now(UTC) + timedelta(minutes=1),
                )
            )
        assert (await client.post("/admin/login", data={"token": "ops-admin"})).status_code == 303
        listing = await client.get("/admin/operations")
        page = await client.get(f"/admin/operations/{operation_id}")
        csrf = CSRF_RE.search(page.text)
        assert csrf is not None
        forged = await client.post(f"/admin/operations/{operation_id}/cancel", data={"csrf": "x"})
        untouched = (await client.get(f"/api/operations/{operation_id}", headers=ADMIN)).json()
        asked = await client.post(
            f"/admin/operations/{operation_id}/cancel", data={"csrf": csrf.group(1)}
        )
        after = await client.get(asked.headers["location"])
        shown = (await client.get(f"/api/operations/{operation_id}", headers=ADMIN)).json()
    assert finished["status"] == "succeeded"
    assert listing.status_code == 200 and f"/admin/operations/{operation_id}" in listing.text
    assert "<progress" in listing.text
    assert "Cancel this operation" in page.text
    assert forged.status_code == 403 and untouched["cancel_requested_at"] is None
    assert asked.status_code == 303
    assert "Cancel asked" in after.text and "Cancel asked</dt>" in after.text
    assert shown["cancel_requested_at"] is not None and not shown["done"]


async def test_admin_operations_list_shows_each_operations_filter(
    sources: Sources, sqlite_url: str
) -> None:
    """Which events an operation chose is in the list, not only on its own page."""
    async with running_app(sources, sqlite_url, admin_token="ops-admin") as (_, client):
        for flt in ({"source": "x", "status": "dead"}, {"type": "invoice.*"}):
            started = await client.post(
                "/api/operations", json={"action": "replay", "filter": flt}, headers=ADMIN
            )
            assert started.status_code == 202, started.text
            await done(client, started.json()["id"], ADMIN)
        assert (await client.post("/admin/login", data={"token": "ops-admin"})).status_code == 303
        listing = (await client.get("/admin/operations")).text
    rows = re.findall(r"<tr>.*?</tr>", listing, flags=re.S)[1:]
    assert len(rows) == 2
    assert "<code>type = invoice.*</code>" in rows[0]
    assert "<code>source = x</code>" in rows[1] and "<code>status = dead</code>" in rows[1]
