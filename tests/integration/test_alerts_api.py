"""Alerts through the operations API and on ``/metrics``, on both databases: listed
and filtered, one, acknowledged and resolved with who did it, the refusals (unknown id,
wrong state, bad query), the tokens (none: 401; the read token reads and cannot act),
and ``hookd_alerts_open`` per kind as the alerts change. The alerts are made by the
real lifecycle (``store.admin.alerts.apply``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.notify.message import ALERT_KINDS
from hookd.sources import Sources
from tests.support.alerts import alert_row, apply, breaker, dead, failing
from tests.support.asgi import running_app

pytestmark = pytest.mark.anyio
ADMIN, READ = "alerts-admin-token", "alerts-read-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
READING = {"Authorization": f"Bearer {READ}"}
UNKNOWN = "01J0000000000000000000000A"


async def seed(engine: AsyncEngine) -> dict[str, str]:
    """Three alerts, one resolved since: {kind: id}."""
    now = datetime.now(UTC)
    opened = await apply(engine, [dead(), breaker(), failing()], now - timedelta(minutes=10))
    ids = dict(zip(("dead", "breaker_open", "reconcile_failing"), opened.opened, strict=True))
    # The runs succeed again: that alert resolves by itself; the others are found again.
    await apply(engine, [dead(), breaker()], now - timedelta(minutes=5))
    return ids


async def test_alerts_are_listed_filtered_and_shown(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN) as (app, client):
        ids = await seed(app.state.engine)
        live = (await client.get("/api/alerts", headers=AUTH)).json()["alerts"]
        resolved = (await client.get("/api/alerts?status=resolved", headers=AUTH)).json()
        dead_only = (await client.get("/api/alerts?status=open&kind=dead", headers=AUTH)).json()
        stripe = (await client.get("/api/alerts?source=stripe", headers=AUTH)).json()
        one = (await client.get("/api/alerts?limit=1", headers=AUTH)).json()
        shown = await client.get(f"/api/alerts/{ids['dead']}", headers=AUTH)
        missing = [
            await client.get(f"/api/alerts/{alert_id}", headers=AUTH)
            for alert_id in (UNKNOWN, "nope", "%00")
        ]
    assert {a["id"] for a in live} == {ids["dead"], ids["breaker_open"]}
    assert [a["id"] for a in resolved["alerts"]] == [ids["reconcile_failing"]]
    assert resolved["alerts"][0]["resolved_by"] == "hookd: the condition cleared"
    assert [a["kind"] for a in dead_only["alerts"]] == ["dead"]
    assert [a["key"] for a in stripe["alerts"]] == ["stripe/billing"]
    assert len(one["alerts"]) == 1
    assert shown.status_code == 200
    alert = shown.json()
    assert alert["kind"] == "dead" and alert["key"] == "github" and alert["source"] == "github"
    assert (alert["status"], alert["severity"], alert["count"]) == ("open", "critical", 2)
    assert alert["link"] == "/admin/dead?source=github"
    assert alert["acknowledged_at"] is None and alert["resolved_at"] is None
    assert [(r.status_code, r.json()) for r in missing] == [(404, {"error": "not_found"})] * 3


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=501", "limit=x", "status=closed", "status=all", "kind=a%00b", "source=%00"],
)
async def test_a_bad_query_is_400(sources: Sources, sqlite_url: str, query: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=ADMIN) as (_, client):
        response = await client.get(f"/api/alerts?{query}", headers=AUTH)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "bad_request"


async def test_acknowledge_then_resolve_and_the_wrong_states(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN) as (app, client):
        ids = await seed(app.state.engine)
        alert_id = ids["dead"]
        acked = await client.post(f"/api/alerts/{alert_id}:ack", headers=AUTH)
        acked_again = await client.post(f"/api/alerts/{alert_id}:ack", headers=AUTH)
        resolved = await client.post(f"/api/alerts/{alert_id}:resolve", headers=AUTH)
        resolved_again = await client.post(f"/api/alerts/{alert_id}:resolve", headers=AUTH)
        ack_resolved = await client.post(f"/api/alerts/{alert_id}:ack", headers=AUTH)
        # An open alert may be resolved without being acknowledged first.
        direct = await client.post(f"/api/alerts/{ids['breaker_open']}:resolve", headers=AUTH)
        unknown = [
            await client.post(f"/api/alerts/{UNKNOWN}:{verb}", headers=AUTH)
            for verb in ("ack", "resolve")
        ]
        wrong_method = await client.get(f"/api/alerts/{alert_id}:ack", headers=AUTH)
        live = (await client.get("/api/alerts", headers=AUTH)).json()["alerts"]
        row = await alert_row(app.state.engine, alert_id)
    assert acked.status_code == 200, acked.text
    assert acked.json()["status"] == "acknowledged"
    assert acked.json()["acknowledged_by"] == "api token:admin"
    assert acked.json()["acknowledged_at"] is not None
    assert (acked_again.status_code, acked_again.json()["error"]) == (409, "not_open")
    assert "acknowledged" in acked_again.json()["detail"]
    assert resolved.status_code == 200 and resolved.json()["status"] == "resolved"
    assert resolved.json()["resolved_by"] == "api token:admin"
    assert (resolved_again.status_code, resolved_again.json()["error"]) == (409, "resolved")
    assert (ack_resolved.status_code, ack_resolved.json()["error"]) == (409, "not_open")
    assert direct.status_code == 200 and direct.json()["status"] == "resolved"
    assert [r.status_code for r in unknown] == [404, 404]
    # GET on an action's path is the alert lookup of an id that is none: 404.
    assert wrong_method.status_code == 404
    assert live == []
    assert (row.status, row.acknowledged_by, row.resolved_by) == (
        "resolved",
        "api token:admin",
        "api token:admin",
    )


async def test_no_token_is_401_and_the_read_token_cannot_act(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN, read_token=READ) as (app, client):
        ids = await seed(app.state.engine)
        alert_id = ids["dead"]
        routes = [
            ("GET", "/api/alerts"),
            ("GET", f"/api/alerts/{alert_id}"),
            ("POST", f"/api/alerts/{alert_id}:ack"),
            ("POST", f"/api/alerts/{alert_id}:resolve"),
        ]
        for method, path in routes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": ADMIN}):
                refused = await client.request(method, path, headers=headers)
                assert refused.status_code == 401, (method, path, headers)
                assert refused.json() == {"error": "unauthorized"}
        reads = [await client.get(path, headers=READING) for _, path in routes[:2]]
        writes = [await client.post(path, headers=READING) for _, path in routes[2:]]
        row = await alert_row(app.state.engine, alert_id)
    assert [r.status_code for r in reads] == [200, 200]
    assert [r.status_code for r in writes] == [403, 403]
    assert all(r.json()["error"] == "forbidden" for r in writes)
    assert (row.status, row.acknowledged_at, row.resolved_at) == ("open", None, None)


def alerts_open(text: str) -> dict[str, float]:
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "hookd_alerts_open"]
    assert family.type == "gauge"
    return {sample.labels["kind"]: sample.value for sample in family.samples}


async def test_the_open_alerts_gauge_per_kind(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN) as (app, client):
        before = alerts_open((await client.get("/metrics", headers=AUTH)).text)
        ids = await seed(app.state.engine)
        await apply(
            app.state.engine, [dead(), dead("stripe"), breaker()], datetime.now(UTC), evaluated=()
        )
        seeded = alerts_open((await client.get("/metrics", headers=AUTH)).text)
        await client.post(f"/api/alerts/{ids['dead']}:ack", headers=AUTH)
        acknowledged = alerts_open((await client.get("/metrics", headers=AUTH)).text)
        await client.post(f"/api/alerts/{ids['dead']}:resolve", headers=AUTH)
        resolved = alerts_open((await client.get("/metrics", headers=AUTH)).text)
    assert before == dict.fromkeys(ALERT_KINDS, 0.0), "every kind from the first scrape, at 0"
    assert list(before) == list(ALERT_KINDS)
    # dead: github's and stripe's; the runs' alert resolved by itself.
    assert seeded == {**before, "dead": 2.0, "breaker_open": 1.0}
    assert acknowledged == seeded, "an acknowledged alert is still live"
    assert resolved == {**seeded, "dead": 1.0}
