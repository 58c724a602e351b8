"""Scoped tokens against real processes: ``HOOKD_METRICS_TOKEN`` opens ``/metrics`` only
(the receiver's and the worker's), ``HOOKD_READ_TOKEN`` the API's GETs and the admin
UI's pages without their actions, ``HOOKD_ADMIN_TOKEN`` everything. Each token is
refused everywhere outside its scope (401 without a token or with a wrong one, 403 for
a token of ours that does not open the route) and accepted inside it.

``hookd serve`` and ``hookd worker`` on PostgreSQL, a private Redis for the worker.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from hookd.errors import ConfigError
from hookd.providers.signing import sample_event
from hookd.settings import Settings
from tests.support.constants import SECRETS
from tests.support.data import scalar
from tests.support.server import HookdServer, HookdWorker, RedisServer
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

ADMIN, READ, METRICS = "admin-token-scoped", "read-token-scoped", "metrics-token-scoped"
TOKENS = {"admin": ADMIN, "read": READ, "metrics": METRICS}
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
# What each token gets from each route; no token and a wrong one get 401 everywhere.
ROUTES: list[tuple[str, str, dict[str, int]]] = [
    ("GET", "/metrics", {"admin": 200, "read": 403, "metrics": 200}),
    ("GET", "/api/events", {"admin": 200, "read": 200, "metrics": 403}),
    ("GET", "/api/events/{id}", {"admin": 200, "read": 200, "metrics": 403}),
    ("GET", "/api/sources", {"admin": 200, "read": 200, "metrics": 403}),
    ("GET", "/api/reconcile-runs", {"admin": 200, "read": 200, "metrics": 403}),
    ("GET", "/api/openapi.json", {"admin": 200, "read": 200, "metrics": 403}),
    ("GET", "/api/no-such-thing", {"admin": 404, "read": 404, "metrics": 403}),
    # The source has no [sources.reconcile]: the admin token is let in and told 409.
    ("POST", "/api/sources/github/enable", {"admin": 409, "read": 403, "metrics": 403}),
    ("POST", "/api/sources/github/reconcile", {"admin": 409, "read": 403, "metrics": 403}),
    ("POST", "/api/events/{id}/replay", {"admin": 202, "read": 403, "metrics": 403}),
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


def env_for(tmp_path: Path, pg_url: str) -> dict[str, str]:
    config = tmp_path / "hookd.toml"
    config.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
"""
    )
    return {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": pg_url,
        "HOOKD_ADMIN_TOKEN": ADMIN,
        "HOOKD_READ_TOKEN": READ,
        "HOOKD_METRICS_TOKEN": METRICS,
        "HOOKD_PRUNE_EVERY_S": "0",
    }


async def dead_event(url: str, pg_url: str) -> str:
    """A stored event (no handlers: processed at once), then made dead by hand."""
    headers, body = sample_event("github", SECRETS["github"], 1)
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/hooks/github", content=body, headers=headers)
    event_id: str = response.json()["event_id"]

    async def processed() -> bool:
        sql = f"SELECT count(*) FROM events WHERE id = '{event_id}' AND status = 'processed'"
        return await scalar(pg_url, sql) == 1

    await wait_for(processed, timeout_s=30)
    from store import db

    engine = db.create_engine(pg_url)
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                "UPDATE events SET status = 'dead', attempts = 8, last_error = 'boom' "
                f"WHERE id = '{event_id}'"
            )
    finally:
        await engine.dispose()
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
                    for name in ("metrics", "read", "admin"):
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
                    for headers in ({}, bearer("wrong"), {"Authorization": f"Basic {ADMIN}"}):
                        response = await client.request(method, url, headers=headers)
                        assert response.status_code == 401, (headers, method, url)
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
            assert await worker_metrics("wrong") == 401


async def test_the_read_token_signs_in_to_pages_without_actions(
    tmp_path: Path, pg_url: str
) -> None:
    env = env_for(tmp_path, pg_url)
    with HookdServer(env, tmp_path) as server:
        event_id = await dead_event(server.url, pg_url)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            refused = await client.post("/admin/login", data={"token": METRICS})
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
