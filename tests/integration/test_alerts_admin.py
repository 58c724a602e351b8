"""The admin UI's Alerts section through the app, on both databases: the list and its
filters, one alert, Acknowledge and Resolve with the session's CSRF token (and without
it: nothing changes), a read-only session shown no button and refused, and everything
an alert holds escaped. The alerts are made by the real lifecycle."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.sources import Sources
from store.admin.alerts import Finding
from tests.support.admin import csrf_of, login
from tests.support.alerts import alert_row, apply, breaker, dead, failing
from tests.support.asgi import running_app

pytestmark = pytest.mark.anyio
ADMIN, READ = "alerts-admin-ui-token", "alerts-admin-ui-read"
HOSTILE = "<script>alert(1)</script>"
UNKNOWN = "01J0000000000000000000000A"


async def seed(engine: AsyncEngine) -> dict[str, str]:
    """{kind: id}: dead and breaker_open open, reconcile_failing resolved."""
    now = datetime.now(UTC)
    opened = await apply(engine, [dead(), breaker(), failing()], now - timedelta(minutes=10))
    ids = dict(zip(("dead", "breaker_open", "reconcile_failing"), opened.opened, strict=True))
    await apply(engine, [dead(), breaker()], now - timedelta(minutes=5))
    return ids


def ack_button(alert_id: str) -> str:
    return f'action="/admin/alerts/{alert_id}/ack"'


def resolve_button(alert_id: str) -> str:
    return f'action="/admin/alerts/{alert_id}/resolve"'


async def test_the_alerts_page_lists_filters_and_shows_one(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN) as (app, client):
        ids = await seed(app.state.engine)
        await login(client, ADMIN)
        page = await client.get("/admin/alerts")
        resolved = await client.get("/admin/alerts?status=resolved")
        every = await client.get("/admin/alerts?status=all&source=stripe")
        by_kind = await client.get("/admin/alerts?kind=breaker_open")
        nothing = await client.get("/admin/alerts?kind=prune_behind")
        bad = await client.get("/admin/alerts?status=closed")
        one = await client.get(f"/admin/alerts/{ids['dead']}")
        missing = await client.get(f"/admin/alerts/{UNKNOWN}")
        home = await client.get("/admin")
    assert page.status_code == 200
    text = page.text
    assert '<a href="/admin/alerts" aria-current="page">Alerts</a>' in text
    assert '<a href="/admin/alerts">Alerts</a>' in home.text, "in the navigation of every page"
    for alert_id in (ids["dead"], ids["breaker_open"]):
        assert f'href="/admin/alerts/{alert_id}"' in text
        assert ack_button(alert_id) in text and resolve_button(alert_id) in text
    assert ids["reconcile_failing"] not in text, "live alerts only, by default"
    assert "12 events of github are dead" in text and "critical" in text and "warning" in text
    assert 'href="/admin/dead?source=github"' in text, "the evidence, linked"
    assert '<option value="live" selected>live</option>' in text
    assert ids["reconcile_failing"] in resolved.text and ids["dead"] not in resolved.text
    assert ack_button(ids["reconcile_failing"]) not in resolved.text
    assert resolve_button(ids["reconcile_failing"]) not in resolved.text
    assert ids["breaker_open"] in every.text and ids["reconcile_failing"] in every.text
    assert ids["dead"] not in every.text
    assert ids["breaker_open"] in by_kind.text and ids["dead"] not in by_kind.text
    assert "No live alerts." in nothing.text
    assert bad.status_code == 400
    assert "Status must be one of live, open, acknowledged, resolved, all." in bad.text
    assert one.status_code == 200
    assert "12 events of github are dead" in one.text and ids["dead"] in one.text
    assert ack_button(ids["dead"]) in one.text and resolve_button(ids["dead"]) in one.text
    assert missing.status_code == 404 and "No such alert." in missing.text


async def test_acknowledge_and_resolve_need_the_csrf_token(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN) as (app, client):
        engine = app.state.engine
        ids = await seed(engine)
        csrf = await login(client, ADMIN)
        alert_id = ids["dead"]
        for data in ({}, {"csrf": ""}, {"csrf": "wrong"}):
            for verb in ("ack", "resolve"):
                refused = await client.post(f"/admin/alerts/{alert_id}/{verb}", data=data)
                assert refused.status_code == 403, (verb, data)
        untouched = await alert_row(engine, alert_id)
        back = "/admin/alerts?kind=dead"
        acked = await client.post(
            f"/admin/alerts/{alert_id}/ack", data={"csrf": csrf, "back": back}
        )
        acked_page = await client.get(acked.headers["location"])
        after_ack = await alert_row(engine, alert_id)
        again = await client.post(f"/admin/alerts/{alert_id}/ack", data={"csrf": csrf})
        again_page = await client.get(again.headers["location"])
        resolved = await client.post(f"/admin/alerts/{alert_id}/resolve", data={"csrf": csrf})
        resolved_page = await client.get(resolved.headers["location"])
        after_resolve = await alert_row(engine, alert_id)
        twice = await client.post(f"/admin/alerts/{alert_id}/resolve", data={"csrf": csrf})
        twice_page = await client.get(twice.headers["location"])
        unknown = await client.post(f"/admin/alerts/{UNKNOWN}/ack", data={"csrf": csrf})
    assert (untouched.status, untouched.acknowledged_at) == ("open", None)
    assert acked.status_code == 303 and acked.headers["location"].startswith(back)
    assert "Acknowledged: no more reminders" in acked_page.text
    assert (after_ack.status, after_ack.acknowledged_by) == ("acknowledged", "admin session:admin")
    assert ack_button(alert_id) not in acked_page.text, "acknowledged: only Resolve is left"
    assert resolve_button(alert_id) in acked_page.text
    assert again.headers["location"].startswith(f"/admin/alerts/{alert_id}")
    assert "Not acknowledged: the alert is no longer open." in again_page.text
    assert "Resolved: the channels that heard of it are told." in resolved_page.text
    assert (after_resolve.status, after_resolve.resolved_by) == ("resolved", "admin session:admin")
    assert "Not resolved: the alert is resolved already." in twice_page.text
    assert unknown.status_code == 404 and "No such alert." in unknown.text


async def test_a_read_only_session_sees_no_button_and_is_refused(
    sources: Sources, db_url: str
) -> None:
    async with running_app(sources, db_url, admin_token=ADMIN, read_token=READ) as (app, client):
        ids = await seed(app.state.engine)
        csrf = await login(client, READ)
        page = await client.get("/admin/alerts")
        one = await client.get(f"/admin/alerts/{ids['dead']}")
        refused = [
            await client.post(f"/admin/alerts/{ids['dead']}/{verb}", data={"csrf": csrf})
            for verb in ("ack", "resolve")
        ]
        row = await alert_row(app.state.engine, ids["dead"])
    assert page.status_code == 200 and ids["dead"] in page.text
    for shown in (page.text, one.text):
        assert "/ack" not in shown and "/resolve" not in shown
    assert [r.status_code for r in refused] == [403, 403]
    assert all("sign in with HOOKD_ADMIN_TOKEN" in r.text for r in refused)
    assert (row.status, row.acknowledged_at, row.resolved_at) == ("open", None, None)


async def test_everything_an_alert_holds_is_escaped(sources: Sources, sqlite_url: str) -> None:
    hostile = Finding(
        "dead", HOSTILE, HOSTILE, "critical", 1.0, f"summary {HOSTILE}", "javascript:alert(1)"
    )
    async with running_app(sources, sqlite_url, admin_token=ADMIN) as (app, client):
        [alert_id] = (await apply(app.state.engine, [hostile], datetime.now(UTC))).opened
        await login(client, ADMIN)
        pages = [
            await client.get("/admin/alerts"),
            await client.get(f"/admin/alerts/{alert_id}"),
            await client.get("/admin/alerts", params={"kind": HOSTILE, "source": HOSTILE}),
        ]
    for page in pages:
        assert page.status_code == 200
        assert HOSTILE not in page.text
        assert 'href="javascript:' not in page.text, "a link that is not the UI's is text"
    assert html.escape(HOSTILE, quote=False) in pages[0].text
    assert html.escape(HOSTILE, quote=False) in pages[1].text
    assert "javascript:alert(1)" in pages[1].text, "shown, not linked"


async def test_the_csrf_token_of_the_alerts_page_is_the_sessions(
    sources: Sources, sqlite_url: str
) -> None:
    """The forms of the alerts page carry the session's token, which the actions take."""
    async with running_app(sources, sqlite_url, admin_token=ADMIN) as (app, client):
        ids = await seed(app.state.engine)
        csrf = await login(client, ADMIN)
        page = await client.get("/admin/alerts")
        assert csrf_of(page.text) == csrf
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://hookd"
        ) as other:
            other_csrf = await login(other, ADMIN)
            crossed = await client.post(
                f"/admin/alerts/{ids['dead']}/ack", data={"csrf": other_csrf}
            )
        row = await alert_row(app.state.engine, ids["dead"])
    assert crossed.status_code == 403, "another session's token is no token"
    assert row.status == "open"
