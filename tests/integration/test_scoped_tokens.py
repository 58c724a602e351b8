"""Scoped tokens: ``HOOKD_METRICS_TOKEN`` opens ``/metrics`` only (the receiver's and
the worker's), ``HOOKD_READ_TOKEN`` the API's GETs but the event stream and the admin
UI's pages without their actions, ``HOOKD_LISTEN_TOKEN`` the event stream alone (``GET
/api/events:stream``), ``HOOKD_ADMIN_TOKEN`` everything. Each token is refused everywhere
outside its scope (401 without a token or with a wrong one, 403 for a token of ours
that does not open the route) and accepted inside it.

Every route of the app, as its own router lists them, every method, is checked
against each token in-process; a route that answers without a token and is not in
``PUBLIC`` fails the test. ``hookd serve`` and ``hookd worker`` on PostgreSQL (a
private Redis for the worker) show the same for real processes, the worker's
``/metrics`` included. Wrong tokens are rate limited per client address (5 a
minute, then 429: tests/integration/test_auth_limits.py): each route's wrong token
comes from an address of its own, or the count is started again before the right ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from hookd.errors import ConfigError
from hookd.providers.signing import sample_event
from hookd.settings import Settings
from hookd.sources import parse_sources
from hookd.web.api import ApiFallback
from store.models import ADMIN_LOGIN_FAILURES
from tests.support.admin import CSRF_RE
from tests.support.asgi import running_app
from tests.support.constants import SECRETS
from tests.support.data import engine_of, scalar
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

ADMIN, READ, METRICS = "admin-token-scoped", "read-token-scoped", "metrics-token-scoped"
LISTEN = "listen-token-scoped"
TOKENS = {"admin": ADMIN, "read": READ, "metrics": METRICS, "listen": LISTEN}
# The event stream never ends once let in: a bad cursor gets its 400 past the token.
STREAM = "/api/events:stream"
STREAM_LET_IN = "?after=not-an-id"
# What each token gets from each route; no token and a wrong one get 401 everywhere.
ROUTES: list[tuple[str, str, dict[str, int]]] = [
    ("GET", "/metrics", {"admin": 200, "read": 403, "metrics": 200, "listen": 403}),
    ("GET", "/api/events", {"admin": 200, "read": 200, "metrics": 403, "listen": 403}),
    ("GET", "/api/events/{id}", {"admin": 200, "read": 200, "metrics": 403, "listen": 403}),
    ("GET", "/api/sources", {"admin": 200, "read": 200, "metrics": 403, "listen": 403}),
    ("GET", "/api/reconcile-runs", {"admin": 200, "read": 200, "metrics": 403, "listen": 403}),
    ("GET", "/api/openapi.json", {"admin": 200, "read": 200, "metrics": 403, "listen": 403}),
    ("GET", "/api/no-such-thing", {"admin": 404, "read": 404, "metrics": 403, "listen": 403}),
    (
        "GET",
        STREAM + STREAM_LET_IN,
        {"admin": 400, "read": 403, "metrics": 403, "listen": 400},
    ),
    # The source has no [sources.reconcile]: the admin token is let in and told 409.
    (
        "POST",
        "/api/sources/github/enable",
        {"admin": 409, "read": 403, "metrics": 403, "listen": 403},
    ),
    (
        "POST",
        "/api/sources/github/reconcile",
        {"admin": 409, "read": 403, "metrics": 403, "listen": 403},
    ),
    (
        "POST",
        "/api/events/{id}/replay",
        {"admin": 202, "read": 403, "metrics": 403, "listen": 403},
    ),
]
READ_PAGES = [
    "/admin",
    "/admin/events",
    "/admin/events/{id}",
    "/admin/dead",
    "/admin/stuck",
    "/admin/retried",
    "/admin/runs",
]
ACTIONS = [
    "/admin/events/{id}/replay",
    "/admin/sources/github/replay-dead",
    "/admin/sources/github/reconcile",
    "/admin/sources/github/enable",
]


SOURCES_TOML = f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
"""


def env_for(tmp_path: Path, pg_url: str) -> dict[str, str]:
    config = tmp_path / "hookd.toml"
    config.write_text(SOURCES_TOML)
    return {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_ADMIN_TOKEN": ADMIN,
        "HOOKD_READ_TOKEN": READ,
        "HOOKD_METRICS_TOKEN": METRICS,
        "HOOKD_LISTEN_TOKEN": LISTEN,
        "HOOKD_PRUNE_EVERY_S": "0",
    }


async def dead_event(url: str | httpx.AsyncClient, pg_url: str) -> str:
    """A stored event (no handlers: processed at once), then made dead by hand. ``url``:
    the server's, or a client of the app in-process."""
    headers, body = sample_event("github", SECRETS["github"], 1)
    if isinstance(url, httpx.AsyncClient):
        response = await url.post("/hooks/github", content=body, headers=headers)
    else:
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.post("/hooks/github", content=body, headers=headers)
    assert response.status_code == 202, "a webhook needs no token: its signature is checked"
    event_id: str = response.json()["event_id"]

    async def processed() -> bool:
        sql = f"SELECT count(*) FROM events WHERE id = '{event_id}' AND status = 'processed'"
        return await scalar(pg_url, sql) == 1

    await wait_for(processed, timeout_s=30)

    async with engine_of(pg_url) as engine, engine.begin() as conn:
        await conn.exec_driver_sql(
            "UPDATE events SET status = 'dead', attempts = 8, last_error = 'boom' "
            f"WHERE id = '{event_id}'"
        )
    return event_id


async def status_of(pg_url: str, event_id: str) -> int:
    return await scalar(
        pg_url, f"SELECT count(*) FROM events WHERE id = '{event_id}' AND status = 'dead'"
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_narrower_token_equal_to_another_is_refused() -> None:
    for pair in (
        ("admin_token", "read_token"),
        ("admin_token", "metrics_token"),
        ("read_token", "metrics_token"),
        ("admin_token", "listen_token"),
        ("read_token", "listen_token"),
        ("metrics_token", "listen_token"),
    ):
        with pytest.raises(ConfigError) as refused:
            Settings.from_env(**dict.fromkeys(pair, "same-token"))
        names = [f"HOOKD_{name.upper()}" for name in pair]
        assert all(name in str(refused.value) for name in names), refused.value
        assert "same-token" not in str(refused.value)


async def test_each_token_opens_its_scope_and_nothing_else(tmp_path: Path, pg_url: str) -> None:
    env = env_for(tmp_path, pg_url)
    with RedisServer(tmp_path) as redis:
        with HookdServer(env, tmp_path) as server:
            event_id = await dead_event(server.url, pg_url)
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                for method, path, expected in ROUTES:
                    url = path.format(id=event_id)
                    # The admin token last: its replay changes the event.
                    for name in ("metrics", "read", "listen", "admin"):
                        response = await client.request(method, url, headers=bearer(TOKENS[name]))
                        assert response.status_code == expected[name], (
                            name,
                            method,
                            url,
                            response.text,
                        )
                        if response.status_code == 403:
                            assert response.json()["error"] == "forbidden"
                            assert "insufficient_scope" in response.headers["www-authenticate"]
                        if name != "admin":
                            assert await status_of(pg_url, event_id) == 1, (name, url)
                    for headers in ({}, {"Authorization": f"Basic {ADMIN}"}):
                        response = await client.request(method, url, headers=headers)
                        assert response.status_code == 401, (headers, method, url)
            # The wrong token of each route from an address of its own (the limit's
            # count is per address).
            for n, (method, path, _) in enumerate(ROUTES, start=10):
                url = path.format(id=event_id)
                transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{n}")
                async with httpx.AsyncClient(
                    base_url=server.url, timeout=10, transport=transport
                ) as guesser:
                    response = await guesser.request(method, url, headers=bearer("wrong"))
                    assert response.status_code == 401, (method, url)
        env["HOOKD_REDIS_URL"] = redis.url
        with HookdWorker(env, tmp_path) as worker:

            async def worker_metrics(token: str) -> int | None:
                assert worker.alive(), worker.log()
                try:
                    async with httpx.AsyncClient(timeout=5) as client:
                        return (
                            await client.get(worker.metrics_url, headers=bearer(token))
                        ).status_code
                except httpx.HTTPError:
                    return None

            assert await wait_for(lambda: worker_metrics(METRICS), timeout_s=30) == 200
            assert await worker_metrics(ADMIN) == 200
            assert await worker_metrics(READ) == 403
            assert await worker_metrics(LISTEN) == 403
            assert await worker_metrics("wrong") == 401


async def test_the_read_token_signs_in_to_pages_without_actions(
    tmp_path: Path, pg_url: str
) -> None:
    env = env_for(tmp_path, pg_url)
    with HookdServer(env, tmp_path) as server:
        event_id = await dead_event(server.url, pg_url)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            for narrow in (METRICS, LISTEN):
                refused = await client.post("/admin/login", data={"token": narrow})
                assert refused.status_code == 401
            assert "hookd_admin" not in refused.headers.get("set-cookie", "")
            signed_in = await client.post("/admin/login", data={"token": READ})
            assert signed_in.status_code == 303
            csrf = ""
            for path in READ_PAGES:
                page = await client.get(path.format(id=event_id))
                assert page.status_code == 200, (path, page.text)
                assert "read only" in page.text, path
                # No action is offered: the only form that posts is logging out.
                posts = re.findall(r'<form method="post" action="([^"]+)"', page.text)
                assert posts == ["/admin/logout"], (path, posts)
                csrf = CSRF_RE.findall(page.text)[0]
            dead = await client.get("/admin/dead")
            assert event_id in dead.text  # it is listed, with nothing to replay it
            for path in ACTIONS:
                response = await client.post(path.format(id=event_id), data={"csrf": csrf})
                assert response.status_code == 403, (path, response.text)
                assert "sign in with HOOKD_ADMIN_TOKEN" in response.text
            assert await status_of(pg_url, event_id) == 1
            assert await scalar(pg_url, "SELECT count(*) FROM reconcile_runs") == 0
            out = await client.post("/admin/logout", data={"csrf": csrf})
            assert out.status_code == 303
            assert (await client.get("/admin")).status_code == 303

            # The admin token's session has the actions, and they work.
            assert (await client.post("/admin/login", data={"token": ADMIN})).status_code == 303
            page = await client.get(f"/admin/events/{event_id}")
            assert "read only" not in page.text
            assert f'action="/admin/events/{event_id}/replay"' in page.text
            csrf = CSRF_RE.findall(page.text)[0]
            replayed = await client.post(f"/admin/events/{event_id}/replay", data={"csrf": csrf})
            assert replayed.status_code == 303
            assert await status_of(pg_url, event_id) == 0


# What answers with no token at all, exactly: the probes, and the admin UI's login and
# stylesheet. (``/hooks/*`` is not in the router: the receiver answers it before
# Starlette, and checks each provider's signature instead of a token.)
PUBLIC = {
    ("GET", "/healthz"),
    ("HEAD", "/healthz"),
    ("GET", "/readyz"),
    ("HEAD", "/readyz"),
    ("GET", "/admin/login"),
    ("HEAD", "/admin/login"),
    ("POST", "/admin/login"),
    ("GET", "/admin/static/admin.css"),
    ("HEAD", "/admin/static/admin.css"),
}
READS = {"GET", "HEAD"}
# Every method a client may send: those a route does not list go to the API's fallback.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
PARAM_RE = re.compile(r"\{(\w+)(?::\w+)?\}")
LOGIN = "/admin/login"


def app_routes(app: Starlette) -> list[tuple[str, str]]:
    """(method, path pattern) of every route the app's router holds."""
    found = []
    for route in app.routes:
        if isinstance(route, ApiFallback):  # every other /api path and method: probed below
            continue
        assert isinstance(route, Route), f"a route of a kind this test does not check: {route}"
        found += [(method, route.path) for method in sorted(route.methods or ())]
    return found


def concrete(path: str, event_id: str) -> str:
    """``path`` with its parameters filled in: the event's id, the source, a destination."""
    values = {"id": event_id, "name": "github", "destination": "forward"}

    def fill(match: re.Match[str]) -> str:
        assert match[1] in values, f"{path}: a path parameter this test cannot fill"
        return values[match[1]]

    return PARAM_RE.sub(fill, path)


def to_login(response: httpx.Response) -> bool:
    return response.status_code == 303 and response.headers["location"].startswith(LOGIN)


def unauthorised(response: httpx.Response) -> bool:
    return response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"


def insufficient_scope(response: httpx.Response) -> bool:
    return (
        response.status_code == 403
        and 'error="insufficient_scope"' in response.headers["www-authenticate"]
    )


async def csrf_of(client: httpx.AsyncClient) -> str:
    page = await client.get("/admin/dead")
    assert page.status_code == 200, page.text
    return CSRF_RE.findall(page.text)[0]


async def test_every_route_of_the_app_is_refused_outside_each_tokens_scope(
    tmp_path: Path, pg_url: str
) -> None:
    sources = parse_sources(SOURCES_TOML, tmp_path / "hookd.toml")
    tokens = {
        "admin_token": ADMIN,
        "read_token": READ,
        "metrics_token": METRICS,
        "listen_token": LISTEN,
    }
    async with running_app(sources, pg_url, prune_every_s=0, **tokens) as (app, client):
        routes = app_routes(app)
        assert set(routes) >= PUBLIC, "the public routes are where this test expects them"
        assert not [p for _, p in routes if p.startswith("/hooks")]
        api = sorted({p for _, p in routes if p.startswith("/api/")})
        admin = [(m, p) for m, p in routes if p.startswith("/admin") and (m, p) not in PUBLIC]
        assert len(api) >= 19 and len([m for m, _ in admin if m == "POST"]) >= 11, routes
        event_id = await dead_event(client, pg_url)
        wrong = ({}, bearer("wrong"), {"Authorization": f"Basic {ADMIN}"})
        # (method, concrete path, whether the route lists the method) for /metrics and /api:
        # a method it does not list reaches the fallback (a JSON 404 or 405 past the token).
        bearer_routes = [("GET", "/metrics", True), ("HEAD", "/metrics", True)]
        for pattern in [*api, "/api/no-such-thing"]:
            listed = {m for m, p in routes if p == pattern}
            path = concrete(pattern, event_id) + (STREAM_LET_IN if pattern == STREAM else "")
            bearer_routes += [(m, path, m in listed) for m in METHODS]
        assert any(path.startswith(STREAM) for _, path, _ in bearer_routes), "the stream moved"

        # No token, a wrong one, one sent as another scheme: only PUBLIC answers. Past
        # the limit's 5 a minute, a wrong token gets 429 instead of 401.
        for method, path, _ in bearer_routes:
            for headers in wrong:
                response = await client.request(method, path, headers=headers)
                refused = unauthorised(response) or (
                    headers == bearer("wrong") and response.status_code == 429
                )
                assert refused, (headers, method, path, response.status_code)
        async with app.state.engine.begin() as conn:  # the right tokens are not held back
            await conn.execute(ADMIN_LOGIN_FAILURES.delete())
        for method, pattern in admin:
            path = concrete(pattern, event_id)
            for headers in (*wrong, bearer(ADMIN)):  # the admin UI takes its session only
                response = await client.request(method, path, headers=headers)
                assert to_login(response), (headers, method, path, response.status_code)
        unknown = [
            (m, p)
            for m, p in routes
            if (m, p) not in PUBLIC and not p.startswith(("/api/", "/admin"))
        ]
        assert unknown == [("GET", "/metrics"), ("HEAD", "/metrics")], (
            "a route outside /api and /admin: give it a scope, and check it here"
        )
        for method, path in PUBLIC - {("POST", LOGIN)}:
            assert (await client.request(method, path)).status_code == 200, (method, path)

        # The metrics token: /metrics, and nothing else; it cannot sign in to the UI.
        for method, path, _ in bearer_routes:
            response = await client.request(method, path, headers=bearer(METRICS))
            if path == "/metrics":
                assert response.status_code == 200, (method, path)
            else:
                assert insufficient_scope(response), (method, path, response.status_code)
        refused = await client.post(LOGIN, data={"token": METRICS})
        assert refused.status_code == 401 and "hookd_admin" not in client.cookies

        # The listen token: the event stream, and nothing else; it cannot sign in either.
        for method, path, listed in bearer_routes:
            response = await client.request(method, path, headers=bearer(LISTEN))
            if listed and path.startswith(STREAM):
                assert response.status_code == 400, (method, path, response.status_code)
            else:
                assert insufficient_scope(response), (method, path, response.status_code)
        refused = await client.post(LOGIN, data={"token": LISTEN})
        assert refused.status_code == 401 and "hookd_admin" not in client.cookies

        # The read token: every read but the event stream, no write.
        for method, path, listed in bearer_routes:
            response = await client.request(method, path, headers=bearer(READ))
            if path == "/metrics" or (listed and (method not in READS or path.startswith(STREAM))):
                assert insufficient_scope(response), (method, path, response.status_code)
            elif not listed:  # the fallback: told what is not there, nothing done
                assert response.status_code in (404, 405), (method, path, response.status_code)
            else:
                assert response.status_code not in (401, 403), (method, path, response.text)
        assert (await client.post(LOGIN, data={"token": READ})).status_code == 303
        csrf = await csrf_of(client)
        for method, pattern in admin:
            path = concrete(pattern, event_id)
            if method in READS:
                response = await client.request(method, path)  # 404/409 past the session too
                assert response.status_code not in (401, 403), (method, path, response.text)
                assert not to_login(response), (method, path)
            elif pattern != "/admin/logout":
                response = await client.request(method, path, data={"csrf": csrf})
                assert response.status_code == 403, (method, path, response.status_code)
                assert "sign in with HOOKD_ADMIN_TOKEN" in response.text
        # Nothing changed: the event is still dead, no run or operation was started,
        # nothing paused or disabled.
        assert await status_of(pg_url, event_id) == 1
        for changed in (
            "SELECT count(*) FROM reconcile_runs",
            "SELECT count(*) FROM operations",
            "SELECT count(*) FROM pauses",
            "SELECT count(*) FROM reconcile_state WHERE disabled",
        ):
            assert await scalar(pg_url, changed) == 0, changed
        out = await client.post("/admin/logout", data={"csrf": csrf})
        assert to_login(out) and (await client.get("/admin")).status_code == 303

        # The admin token: every route lets it in (what it does there is another test's).
        for method, path, listed in bearer_routes:
            response = await client.request(method, path, headers=bearer(ADMIN))
            assert response.status_code not in (401, 403), (method, path, response.text)
            if not listed:
                assert response.status_code in (404, 405), (method, path)
        assert (await client.post(LOGIN, data={"token": ADMIN})).status_code == 303
        csrf = await csrf_of(client)
        for method, pattern in sorted(admin, key=lambda r: r[1] == "/admin/logout"):
            path = concrete(pattern, event_id)
            data = None if method in READS else {"csrf": csrf}
            response = await client.request(method, path, data=data)
            assert response.status_code not in (401, 403), (method, path, response.text)
            assert not to_login(response) or pattern == "/admin/logout", (method, path)
