"""The /admin UI through the ASGI app: login, sessions, CSRF, replay, reconcile, escaping.

Every state-changing form is checked twice: that it works with the session's
CSRF token, and that without it (or with a wrong one) nothing changed in the
database.
"""

from __future__ import annotations

import asyncio
import html as html_text
import json
import re
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from itsdangerous import TimestampSigner
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request

from hookd.providers.signing import sample_event
from hookd.providers.standard import standard_headers
from hookd.sources import Sources, parse_sources
from hookd.web import admin_pages, admin_session
from store.models import EVENTS
from store.reconcile import runs as rstate
from tests.support import admin as admin_ui
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app

pytestmark = pytest.mark.anyio
TOKEN = "admin-ui-token"
STRIPE_KEY = "sk_test_hookd_admin"
HOSTILE = "<script>alert(1)</script>"

GET_PAGES = [
    "/admin",
    "/admin/events",
    "/admin/events/{id}",
    "/admin/dead",
    "/admin/runs",
    "/admin/runs/01J0000000000000000000000A",
]
POST_ACTIONS = [
    "/admin/events/{id}/replay",
    "/admin/sources/github/replay-dead",
    "/admin/sources/github/reconcile",
    "/admin/sources/github/enable",
    "/admin/logout",
]


async def status_of(engine: AsyncEngine, event_id: str) -> str:
    async with engine.connect() as conn:
        status = await conn.scalar(sa.select(EVENTS.c.status).where(EVENTS.c.id == event_id))
    return str(status)


async def wait_status(engine: AsyncEngine, event_id: str, want: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while (status := await status_of(engine, event_id)) != want:
        assert time.monotonic() < deadline, f"{event_id} is {status}, not {want}"
        await asyncio.sleep(0.02)


async def dead_event(client: httpx.AsyncClient, engine: AsyncEngine, source: str = "github") -> str:
    """A stored event (the source has no handlers, so it is processed), then made dead
    as a handler that gave up would leave it."""
    headers, body = sample_event(source, SECRETS[source], 1)
    response = await client.post(f"/hooks/{source}", content=body, headers=headers)
    event_id: str = response.json()["event_id"]
    await wait_status(engine, event_id, "processed")
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(EVENTS)
            .where(EVENTS.c.id == event_id)
            .values(status="dead", attempts=8, last_error="RuntimeError: the downstream is broken")
        )
    return event_id


async def login(client: httpx.AsyncClient, token: str = TOKEN) -> str:
    """Log in (with this module's admin token unless told); the session's CSRF token."""
    return await admin_ui.login(client, token)


async def test_without_a_session_every_page_redirects_to_login_and_shows_nothing(
    sources: Sources, db_url: str, engine: AsyncEngine
) -> None:
    async with running_app(sources, db_url, admin_token=TOKEN) as (_, client):
        event_id = await dead_event(client, engine)
        bearer = {"Authorization": f"Bearer {TOKEN}"}  # the API's way in is not the UI's
        for path in GET_PAGES:
            for headers in ({}, bearer):
                response = await client.get(path.format(id=event_id), headers=headers)
                assert response.status_code == 303, path
                assert response.headers["location"].startswith("/admin/login"), path
                assert event_id not in response.text
                assert response.headers["cache-control"] == "no-store"
        for path in POST_ACTIONS:
            response = await client.post(path.format(id=event_id), data={"csrf": "x"})
            assert response.status_code == 303, path
            assert response.headers["location"] == "/admin/login"
        # A page asked for comes back after the login, a foreign one does not.
        asked = await client.get("/admin/dead?source=github")
        assert asked.headers["location"] == "/admin/login?next=%2Fadmin%2Fdead%3Fsource%3Dgithub"
        assert await status_of(engine, event_id) == "dead"
        async with engine.connect() as conn:
            assert await rstate.list_runs(conn) == []


async def test_login_wrong_token_401_right_token_sets_a_strict_cookie(
    sources: Sources, sqlite_url: str
) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        form = await client.get("/admin/login")
        assert form.status_code == 200
        assert 'name="token"' in form.text
        for wrong in ("", "nope", TOKEN + "x", TOKEN.upper()):
            refused = await client.post("/admin/login", data={"token": wrong})
            assert refused.status_code == 401
            assert "That token is not right." in refused.text
            assert "set-cookie" not in refused.headers
        assert (await client.get("/admin")).status_code == 303

        ok = await client.post("/admin/login", data={"token": TOKEN, "next": "/admin/dead"})
        assert ok.status_code == 303
        assert ok.headers["location"] == "/admin/dead"
        cookie = ok.headers["set-cookie"]
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path", "max-age", "samesite"} <= attributes
        assert "Path=/admin" in cookie
        assert "SameSite=strict" in cookie
        assert f"Max-Age={12 * 3600}" in cookie
        assert "secure" not in attributes  # plain http here
        assert TOKEN not in cookie
        assert (await client.get("/admin")).status_code == 200

        for target in (
            "https://evil.example/",
            "//evil.example/admin",
            "/adminx",
            "/api/events",
            "/admin/../api/events",
            "/admin\\@evil.example",
        ):
            moved = await client.post("/admin/login", data={"token": TOKEN, "next": target})
            assert moved.headers["location"] == "/admin", target


async def test_cookie_is_secure_over_https(sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (app, _):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://hookd") as client:
            ok = await client.post("/admin/login", data={"token": TOKEN})
            assert "; secure" in ok.headers["set-cookie"].lower()
            assert (await client.get("/admin")).status_code == 200


async def test_without_an_admin_token_the_ui_is_off(sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url) as (_, client):
        page = await client.get("/admin/login")
        assert page.status_code == 200
        assert "The admin UI is off" in page.text
        assert 'name="token"' not in page.text
        for token in ("", "anything"):
            refused = await client.post("/admin/login", data={"token": token})
            assert refused.status_code == 401
            assert "set-cookie" not in refused.headers
        assert (await client.get("/admin")).status_code == 303


async def test_security_headers_on_admin_responses(sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        responses = [await client.get("/admin/login"), await client.get("/admin")]
        await login(client)
        responses += [
            await client.get("/admin"),
            await client.get("/admin/events/01J0000000000000000000000A"),
        ]
        for response in responses:
            csp = response.headers["content-security-policy"]
            assert "default-src 'none'" in csp
            assert "style-src 'self'" in csp
            assert "form-action 'self'" in csp
            assert "frame-ancestors 'none'" in csp
            assert "script-src" not in csp
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "no-referrer"
            assert response.headers["cache-control"] == "no-store"
        css = await client.get("/admin/static/admin.css")
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")
        page = responses[2].text
        assert "<script" not in page
        assert "http://" not in page and "https://" not in page  # no external assets


async def test_forms_refuse_a_missing_or_wrong_csrf_token_and_change_nothing(
    sources: Sources, db_url: str, engine: AsyncEngine
) -> None:
    async with running_app(sources, db_url, admin_token=TOKEN) as (app, client):
        event_id = await dead_event(client, engine)
        csrf = await login(client)
        # Another browser's session: its CSRF token is not this session's.
        other = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hookd")
        async with other:
            other_csrf = await login(other)
        assert other_csrf != csrf
        for path in POST_ACTIONS:
            for data in ({}, {"csrf": ""}, {"csrf": "wrong"}, {"csrf": other_csrf}):
                response = await client.post(path.format(id=event_id), data=data)
                assert response.status_code == 403, (path, data)
                assert "CSRF" in response.text
        # A GET with the right token changes nothing either.
        assert (await client.get(f"/admin/events/{event_id}/replay?csrf={csrf}")).status_code == 405
        assert await status_of(engine, event_id) == "dead"
        assert (await client.get("/admin")).status_code == 200, "logout without CSRF must fail"
        async with engine.connect() as conn:
            assert await rstate.list_runs(conn) == []


async def test_replay_with_csrf_makes_the_dead_event_processed_on_the_same_row(
    sources: Sources, db_url: str, engine: AsyncEngine
) -> None:
    # A long sweep: the replay is processed quickly only if the admin woke processing.
    async with running_app(sources, db_url, admin_token=TOKEN, sweep_s=60) as (_, client):
        event_id = await dead_event(client, engine)
        csrf = await login(client)
        dead = await client.get("/admin/dead")
        assert f'href="/admin/events/{event_id}"' in dead.text
        assert "RuntimeError: the downstream is broken" in dead.text
        assert "Replay all 1 dead for github" in dead.text
        detail = await client.get(f"/admin/events/{event_id}")
        assert "the downstream is broken" in detail.text

        started = time.monotonic()
        replayed = await client.post(
            f"/admin/events/{event_id}/replay", data={"csrf": csrf, "back": "/admin/dead"}
        )
        assert replayed.status_code == 303
        assert replayed.headers["location"] == "/admin/dead?done=replayed"
        await wait_status(engine, event_id, "processed", timeout_s=5)
        assert time.monotonic() - started < 5
        flash = await client.get(replayed.headers["location"])
        assert "Replayed: the event is pending again." in flash.text
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.select(EVENTS.c.id, EVENTS.c.attempts))).all()
        assert [(r.id, r.attempts) for r in rows] == [(event_id, 1)]

        missing = await client.post(
            "/admin/events/01J0000000000000000000000A/replay", data={"csrf": csrf}
        )
        assert missing.status_code == 404
        evil_back = await client.post(
            f"/admin/events/{event_id}/replay", data={"csrf": csrf, "back": "https://evil.example"}
        )
        assert evil_back.headers["location"] == f"/admin/events/{event_id}?done=replayed"


async def test_replay_all_dead_for_a_source(sources: Sources, sqlite_url: str) -> None:
    async with (
        engine_of(sqlite_url) as engine,
        running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client),
    ):
        ids = [await dead_event(client, engine) for _ in range(3)]
        other = await dead_event(client, engine, source="stripe")
        csrf = await login(client)
        nothing = await client.post("/admin/sources/slack/replay-dead", data={"csrf": csrf})
        assert nothing.headers["location"] == "/admin/dead?error=nothing_dead"
        done = await client.post(
            "/admin/sources/github/replay-dead",
            data={"csrf": csrf, "back": "/admin/dead?source=github"},
        )
        assert done.status_code == 303
        assert done.headers["location"] == ("/admin/dead?source=github&done=replayed_many&count=3")
        for event_id in ids:
            await wait_status(engine, event_id, "processed")
        assert await status_of(engine, other) == "dead"
        page = await client.get(done.headers["location"])
        assert "Replayed 3 dead event(s)." in page.text
        unknown = await client.post("/admin/sources/nope/replay-dead", data={"csrf": csrf})
        assert unknown.status_code == 404


async def test_events_pages_filter_and_page_older_newest_first(
    sources: Sources, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_pages, "PAGE_SIZE", 2)
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        ids = []
        for i in range(5):
            headers, body = sample_event("stripe", SECRETS["stripe"], i)
            response = await client.post("/hooks/stripe", content=body, headers=headers)
            ids.append(response.json()["event_id"])
            await asyncio.sleep(0.002)
        await login(client)
        seen: list[str] = []
        url: str | None = "/admin/events?source=stripe&origin=webhook"
        while url:
            page = await client.get(url)
            assert page.status_code == 200
            seen += re.findall(r'href="/admin/events/([0-9A-Z]{26})"', page.text)
            older = re.search(r'href="(\?[^"]*cursor=[^"]*)">Older', page.text)
            url = "/admin/events" + older.group(1).replace("&amp;", "&") if older else None
            if url:
                assert "source=stripe" in url and "origin=webhook" in url
        assert seen == ids[::-1]
        none = await client.get("/admin/events?source=github")
        assert "No events" in none.text
        typed = await client.get("/admin/events?type=payment_intent.succeeded&status=pending")
        assert typed.status_code == 200
        for bad in ("status=done", "origin=mail", "cursor=abc", "source=a%00b"):
            assert (await client.get(f"/admin/events?{bad}")).status_code == 400, bad
        assert (await client.get("/admin/events/not-an-id")).status_code == 404
        assert (await client.get("/admin/events/01J0000000000000000000000A")).status_code == 404


async def test_event_detail_never_shows_body_headers_or_secrets(
    sources: Sources, sqlite_url: str
) -> None:
    headers, body = sample_event("github", SECRETS["github"], 7)
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        event_id = (await client.post("/hooks/github", content=body, headers=headers)).json()[
            "event_id"
        ]
        await login(client)
        pages = [await client.get(f"/admin/events/{event_id}"), await client.get("/admin/events")]
        pages.append(await client.get("/admin"))
    for page in pages:
        assert page.status_code == 200
        assert "Keep it logically awesome" not in page.text  # the body
        assert headers["X-Hub-Signature-256"] not in page.text
        assert "hookd-send-test" not in page.text  # a header value
        assert SECRETS["github"] not in page.text
        assert TOKEN not in page.text
    assert "issues.opened" in pages[0].text
    assert headers["X-GitHub-Delivery"] in pages[0].text  # the dedupe key


async def test_a_hostile_event_type_is_escaped_everywhere(
    sources: Sources, sqlite_url: str
) -> None:
    body = json.dumps({"type": HOSTILE, "timestamp": 1, "data": {}}).encode()
    headers = standard_headers(
        SECRETS["standard"], body, f"msg_{uuid.uuid4().hex}", int(time.time())
    )
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        response = await client.post("/hooks/standard", content=body, headers=headers)
        assert response.status_code == 202, response.text
        event_id = response.json()["event_id"]
        await login(client)
        escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
        pages = [
            await client.get(f"/admin/events/{event_id}"),
            await client.get("/admin/events"),
            await client.get("/admin/events", params={"type": HOSTILE}),
            await client.get("/admin/events", params={"type": '"><script>x</script>'}),
            await client.get("/admin/dead", params={"done": HOSTILE, "error": HOSTILE}),
            await client.get("/admin/login", params={"next": HOSTILE}),
        ]
    for page in pages:
        assert "<script" not in page.text.lower(), page.url
    assert escaped in pages[0].text
    assert escaped in pages[1].text
    assert escaped in pages[2].text  # the filter shows the type, escaped, and finds it
    assert f'href="/admin/events/{event_id}"' in pages[2].text


async def test_logout_ends_the_session(sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        csrf = await login(client)
        out = await client.post("/admin/logout", data={"csrf": csrf})
        assert out.status_code == 303
        assert out.headers["location"] == "/admin/login?done=logged_out"
        cleared = out.headers["set-cookie"]
        assert cleared.startswith(f"{admin_session.COOKIE}=")
        assert "Max-Age=0" in cleared and "Path=/admin" in cleared
        assert (await client.get("/admin")).status_code == 303
        page = await client.get(out.headers["location"])
        assert "Logged out." in page.text


async def test_a_session_signed_with_another_token_or_expired_is_refused(
    sources: Sources, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(sources, sqlite_url, admin_token="old-token") as (_, client):
        await login(client, "old-token")
        old_cookie = client.cookies[admin_session.COOKIE]
    # The token rotated: the same browser, the same database, a new process.
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        client.cookies.set(admin_session.COOKIE, old_cookie, path="/admin")
        assert (await client.get("/admin")).status_code == 303
        # Tampered and unsigned values; a well-signed one naming no stored session.
        client.cookies.clear()
        await login(client)
        good = client.cookies[admin_session.COOKIE]
        client.cookies.clear()
        forged = admin_session.Sessions(TOKEN).issue(session_id="not-a-session")
        for value in (good[:-2] + "xx", "eyJjc3JmIjoieCJ9", good.split(".")[0], forged):
            client.cookies.set(admin_session.COOKIE, value, path="/admin")
            assert (await client.get("/admin")).status_code == 303, value
        # The stored session, in a cookie signed more than 12 hours ago.
        cookie_header = [(b"cookie", f"{admin_session.COOKIE}={good}".encode())]
        signed = admin_session.Sessions(TOKEN).verify(
            Request({"type": "http", "method": "GET", "path": "/", "headers": cookie_header})
        )
        assert signed is not None
        now = int(time.time())
        monkeypatch.setattr(TimestampSigner, "get_timestamp", lambda _: now - 12 * 3600 - 5)
        expired = admin_session.Sessions(TOKEN).issue(session_id=signed.session_id)
        monkeypatch.undo()
        client.cookies.set(admin_session.COOKIE, expired, path="/admin")
        assert (await client.get("/admin")).status_code == 303
        client.cookies.set(admin_session.COOKIE, good, path="/admin")
        assert (await client.get("/admin")).status_code == 200


def reconciled_sources(api_url: str) -> Sources:
    text = f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{STRIPE_KEY}"
lookback_s = 86400

[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
"""
    return parse_sources(text, Path("admin.toml"), env={})


async def test_reconcile_now_creates_a_run_and_enable_reenables(sqlite_url: str) -> None:
    emulator = StripeEmulator(STRIPE_KEY)
    emulator.add_events(3, start=time.time() - 600, step_s=1.0)
    async with (
        engine_of(sqlite_url) as engine,
        serve_app(emulator.app) as api_url,
        running_app(
            reconciled_sources(api_url),
            sqlite_url,
            admin_token=TOKEN,
            reconcile_schedule=False,
        ) as (_, client),
    ):
        csrf = await login(client)
        page = await client.get("/admin")
        assert "/admin/sources/stripe/reconcile" in page.text
        assert "/admin/sources/github/reconcile" not in page.text  # not reconciled

        started = await client.post("/admin/sources/stripe/reconcile", data={"csrf": csrf})
        assert started.status_code == 303
        match = re.fullmatch(
            r"/admin/runs/([0-9A-Z]{26})\?done=reconcile_started",
            started.headers["location"],
        )
        assert match, started.headers["location"]
        run_id = match.group(1)
        deadline = time.monotonic() + 15
        while True:
            run_page = await client.get(started.headers["location"])
            assert run_page.status_code == 200
            if "status-succeeded" in run_page.text:
                break
            assert "status-failed" not in run_page.text, run_page.text
            assert 'http-equiv="refresh"' in run_page.text  # refreshes itself while running
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert "Reconciliation run started." in run_page.text
        async with engine.connect() as conn:
            row = await rstate.get_run(conn, run_id)
        assert row is not None
        assert (row.trigger, row.items_missing, row.items_repaired) == ("api", 3, 3)
        runs = await client.get("/admin/runs?source=stripe")
        assert f'href="/admin/runs/{run_id}"' in runs.text

        not_configured = await client.post("/admin/sources/github/reconcile", data={"csrf": csrf})
        assert not_configured.headers["location"] == "/admin?error=not_configured"
        unknown = await client.post("/admin/sources/nope/reconcile", data={"csrf": csrf})
        assert unknown.status_code == 404

        # Disabled after authentication failures: shown with its reason, then enabled.
        async with engine.begin() as conn:
            await rstate.update_state(
                conn,
                "stripe",
                None,
                disabled=True,
                disabled_reason="3 authentication failures in a row",
                auth_failures=3,
            )
        page = await client.get("/admin")
        assert "status-disabled" in page.text
        assert "3 authentication failures in a row" in page.text
        assert "/admin/sources/stripe/enable" in page.text
        assert "/admin/sources/stripe/reconcile" not in page.text
        refused = await client.post("/admin/sources/stripe/enable", data={"csrf": "no"})
        assert refused.status_code == 403
        async with engine.connect() as conn:
            state = await rstate.get_state(conn, "stripe")
        assert state is not None and state.disabled
        enabled = await client.post(
            "/admin/sources/stripe/enable", data={"csrf": csrf, "back": "/admin"}
        )
        assert enabled.headers["location"] == "/admin?done=enabled"
        async with engine.connect() as conn:
            state = await rstate.get_state(conn, "stripe")
        assert state is not None and not state.disabled and state.auth_failures == 0
        page = await client.get(enabled.headers["location"])
        assert "status-active" in page.text
        assert "Reconciliation enabled again." in page.text
        assert "/admin/sources/stripe/enable" not in page.text
        assert "/admin/sources/stripe/reconcile" in page.text


def retention_sources() -> Sources:
    text = f"""
[retention]
keep_body_days = 3

[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "http://127.0.0.1:9"
allow_insecure = true
token = "{STRIPE_KEY}"

[sources.retention]
keep_dead_days = 60
keep_keys_days = 45

[[sources]]
name = "slack"
provider = "slack"
secrets = ["{SECRETS["slack"]}"]
"""
    return parse_sources(text, Path("admin.toml"), env={})


def retention_row(html: str, source: str) -> list[str]:
    """The cells of ``source``'s row in the page's Retention table, as text."""
    table = html[html.index("<h2>Retention</h2>") :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    for row in rows:
        cells = [
            " ".join(html_text.unescape(re.sub(r"<[^>]+>", " ", cell)).split())
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        if cells and cells[0] == source:
            return cells
    raise AssertionError(f"no retention row for {source}: {table}")


async def test_sources_page_shows_retention_and_the_age_of_the_oldest_kept_event(
    sqlite_url: str,
) -> None:
    """Each source's retention as configured (the file's [retention] under its own),
    the provider's redelivery horizon, and how old its oldest kept event is: flagged
    when it is a day past the longer of keep_events_days and keep_dead_days, as the
    alert HookdPruneNotRunning does. Read-only sessions see it too."""
    now = time.time()
    async with engine_of(sqlite_url) as engine:
        async with running_app(
            retention_sources(), sqlite_url, admin_token=TOKEN, reconcile_schedule=False
        ) as (_, client):
            ages_days = {"github": 91.5, "stripe": 40.25}
            for source, age_days in ages_days.items():
                headers, body = sample_event(source, SECRETS[source], 1)
                stored = await client.post(f"/hooks/{source}", content=body, headers=headers)
                assert stored.status_code == 202, stored.text
                event_id = stored.json()["event_id"]
                await wait_status(engine, event_id, "processed")
                received = datetime.fromtimestamp(now - age_days * 86400, UTC)
                async with engine.begin() as conn:
                    await conn.execute(
                        sa.update(EVENTS)
                        .where(EVENTS.c.id == event_id)
                        .values(received_at=received)
                    )
            await login(client)
            page = await client.get("/admin")
            assert page.status_code == 200
            github = retention_row(page.text, "github")
            stripe = retention_row(page.text, "stripe")
            slack = retention_row(page.text, "slack")
            # Source, bodies, processed events, dead events, keys, horizon, oldest.
            assert github[:6] == ["github", "3 days", "30 days", "90 days", "400 days", "3 days"]
            assert stripe[:4] == ["stripe", "3 days", "30 days", "60 days"]
            assert stripe[4] == (
                "45 days at least 30.003 days: stripe's redelivery horizon of 30 days "
                "plus this source's reconcile overlap_s = 300"
            )
            assert stripe[5] == "30 days"
            assert slack[1:6] == ["3 days", "30 days", "90 days", "400 days", "1 day"]
            # 91.5 days is past github's 90 + 1: flagged. 40.25 is within stripe's 60.
            assert github[6].startswith("91d 12h A day past its retention"), github
            assert stripe[6] == "40d 6h", stripe
            assert slack[6] == "none kept"
            assert page.text.count('class="bad"') == 1
            assert "<script" not in page.text

        # A read-only session sees the same, and no action.
        async with running_app(
            retention_sources(),
            sqlite_url,
            admin_token=TOKEN,
            read_token="admin-ui-read-token",
            reconcile_schedule=False,
        ) as (_, client):
            await login(client, "admin-ui-read-token")
            page = await client.get("/admin")
            assert retention_row(page.text, "github")[6].startswith("91d 12h A day past")
            assert retention_row(page.text, "stripe")[4].startswith("45 days at least 30.003")
            assert '<form method="post" action="/admin/sources' not in page.text
