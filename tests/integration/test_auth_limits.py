"""The rate limit on token checks (``hookd.web.auth_limit``): the admin login and the
bearer tokens of ``/api`` and ``/metrics``, per client address and overall.

The races are run for real: ``hookd serve --workers 2`` on SQLite and on PostgreSQL,
60 wrong tokens sent at once over loopback HTTP from one address (or spread over
twelve), and what the server did counted twice: in its answers (401: the token was
checked and refused; 429: it was not looked at) and in its log (one "refused" line per
check). The rest runs the app in-process: no write for a right token, a login that
gives its reservation back, 429 for a right token once the limit is reached, and the
headers every answer under /api, /metrics and /admin carries (errors included).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.ops import EventOps
from hookd.sources import Sources
from hookd.web.admin_session import SECURITY_HEADERS
from hookd.web.auth_limit import OVERALL, PER_CLIENT, WINDOW_S
from store import migrate
from store.models import ADMIN_LOGIN_FAILURES
from tests.support import services
from tests.support.asgi import running_app
from tests.support.constants import SOURCES_TOML
from tests.support.data import engine_of
from tests.support.server import HookdServer

pytestmark = pytest.mark.anyio
ADMIN, READ, METRICS = "limits-admin-token", "limits-read-token", "limits-metrics-token"
TOKENS = {"admin_token": ADMIN, "read_token": READ, "metrics_token": METRICS}
BURST = 60


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- real servers, real races ------------------------------------------------------


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[HookdServer, str]]:
    """``hookd serve --workers 2`` on each database (and that database's URL)."""
    tmp = tmp_path_factory.mktemp(f"limits-{request.param}")
    database = None
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp / 'hookd.db'}"
        migrate.upgrade(url)
    else:
        database = services.create_database(template=request.getfixturevalue("pg_template"))
        url = services.sqlalchemy_url(database)
    config = tmp / "hookd.toml"
    config.write_text(SOURCES_TOML)
    env = {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": url,
        **{f"HOOKD_{name.upper()}": value for name, value in TOKENS.items()},
    }
    try:
        with HookdServer(env, tmp, workers=2) as server:
            yield server, url
    finally:
        if database is not None:
            services.drop_database(database)


@pytest.fixture
async def server(served: tuple[HookdServer, str]) -> HookdServer:
    """The module's server with no token check counted yet (the limit's rows deleted)."""
    running, url = served
    async with engine_of(url) as engine, engine.begin() as conn:
        await conn.execute(ADMIN_LOGIN_FAILURES.delete())
    return running


def client_from(server: HookdServer, address: str) -> httpx.AsyncClient:
    """Requests from ``address`` (any of 127.0.0.0/8 is loopback), each on a
    connection of its own when sent together."""
    transport = httpx.AsyncHTTPTransport(
        local_address=address, limits=httpx.Limits(max_connections=BURST)
    )
    return httpx.AsyncClient(base_url=server.url, timeout=30, transport=transport)


def logged(server: HookdServer, what: str) -> int:
    """How many lines of the server's log (both processes) say ``what``."""
    return server.log_path.read_text(errors="replace").count(what)


def statuses(responses: list[httpx.Response]) -> Counter[int]:
    return Counter(r.status_code for r in responses)


def assert_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= WINDOW_S


async def test_concurrent_wrong_logins_are_checked_at_most_five_times(
    server: HookdServer,
) -> None:
    """60 wrong tokens at once from one address: 5 are compared (401), 55 never are
    (429 with Retry-After), whichever of the two processes answers each."""
    checked = logged(server, "admin login refused")
    async with client_from(server, "127.0.0.2") as client:
        answers = await asyncio.gather(
            *(client.post("/admin/login", data={"token": f"wrong-{i}"}) for i in range(BURST))
        )
        assert statuses(answers) == {401: PER_CLIENT, 429: BURST - PER_CLIENT}
        for answer in answers:
            if answer.status_code == 429:
                assert_limited(answer)
                assert (
                    answer.headers["content-security-policy"]
                    == (SECURITY_HEADERS["Content-Security-Policy"])
                )
        assert logged(server, "admin login refused") - checked == PER_CLIENT
        # The right token is not looked at either, now.
        refused = await client.post("/admin/login", data={"token": ADMIN})
        assert_limited(refused)
        assert "hookd_admin" not in refused.headers.get("set-cookie", "")
    async with client_from(server, "127.0.0.3") as other:
        assert (await other.post("/admin/login", data={"token": ADMIN})).status_code == 303


async def test_concurrent_wrong_bearer_tokens_are_checked_at_most_five_times(
    server: HookdServer,
) -> None:
    """The same for the API's bearer tokens, which share the count with /metrics and
    the login: then the address's right tokens get 429 everywhere, another's do not."""
    checked = logged(server, "bearer token refused")
    async with client_from(server, "127.0.0.4") as client:
        answers = await asyncio.gather(
            *(client.get("/api/events", headers=bearer(f"wrong-{i}")) for i in range(BURST))
        )
        assert statuses(answers) == {401: PER_CLIENT, 429: BURST - PER_CLIENT}
        for answer in answers:
            assert answer.headers["cache-control"] == "no-store"
            if answer.status_code == 429:
                assert_limited(answer)
                assert answer.json()["error"] == "too_many_requests"
        assert logged(server, "bearer token refused") - checked == PER_CLIENT
        for path, token in (("/api/events", ADMIN), ("/api/sources", READ), ("/metrics", METRICS)):
            assert_limited(await client.get(path, headers=bearer(token)))
        assert_limited(await client.post("/admin/login", data={"token": ADMIN}))
    async with client_from(server, "127.0.0.5") as other:
        assert (await other.get("/api/events", headers=bearer(ADMIN))).status_code == 200
        assert (await other.get("/metrics", headers=bearer(METRICS))).status_code == 200


async def test_wrong_tokens_spread_over_addresses_are_bounded_overall(
    server: HookdServer,
) -> None:
    """Two more addresses than OVERALL needs, five wrong tokens each, 64 at a time, half
    at the login and half at the API: none reaches its own limit, but only OVERALL are
    checked; then every address waits, a new one with the right token too. (All 510 at
    once would test the database's connection pool, not the count: the race itself is
    the two tests above.)"""
    checked = logged(server, "admin login refused") + logged(server, "bearer token refused")
    count = OVERALL // PER_CLIENT + 2
    clients = [client_from(server, f"127.0.{1 + i // 250}.{1 + i % 250}") for i in range(count)]
    try:
        gate = asyncio.Semaphore(64)

        async def guess(n: int, i: int) -> httpx.Response:
            client = clients[n]
            async with gate:
                if (n + i) % 2:
                    return await client.post("/admin/login", data={"token": f"wrong-{n}-{i}"})
                return await client.get("/api/sources", headers=bearer(f"wrong-{n}-{i}"))

        answers = await asyncio.gather(
            *(guess(n, i) for n in range(count) for i in range(PER_CLIENT))
        )
    finally:
        for client in clients:
            await client.aclose()
    assert len(answers) == count * PER_CLIENT
    assert statuses(answers) == {401: OVERALL, 429: len(answers) - OVERALL}
    refused = logged(server, "admin login refused") + logged(server, "bearer token refused")
    assert refused - checked == OVERALL
    async with client_from(server, "127.0.9.1") as fresh:
        assert_limited(await fresh.get("/api/events", headers=bearer(ADMIN)))
        assert_limited(await fresh.post("/admin/login", data={"token": ADMIN}))


# --- in-process: what a right token costs, what a success gives back ----------------


def from_address(app: object, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 123))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://hookd")


async def reservations(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        count = await conn.scalar(sa.select(sa.func.count()).select_from(ADMIN_LOGIN_FAILURES))
    return int(count or 0)


async def test_right_bearer_tokens_write_nothing_and_wait_once_limited(
    sources: Sources, db_url: str
) -> None:
    async with running_app(sources, db_url, **TOKENS) as (app, client):
        engine = app.state.engine
        for _ in range(3):
            assert (await client.get("/api/events", headers=bearer(ADMIN))).status_code == 200
            assert (await client.get("/api/sources", headers=bearer(READ))).status_code == 200
            assert (await client.get("/metrics", headers=bearer(METRICS))).status_code == 200
            # A token of ours without the right: 403, and no count either.
            refused = await client.post(
                "/api/events/01J0000000000000000000000A/replay", headers=bearer(READ)
            )
            assert refused.status_code == 403
            # No token at all: nothing guessed, nothing counted.
            assert (await client.get("/api/events")).status_code == 401
        assert await reservations(engine) == 0
        for i in range(PER_CLIENT):
            wrong = await client.get("/metrics", headers=bearer(f"wrong-{i}"))
            assert wrong.status_code == 401
        assert await reservations(engine) == PER_CLIENT
        for path, token in (
            ("/api/events", "wrong"),
            ("/api/events", ADMIN),
            ("/metrics", METRICS),
        ):
            limited = await client.get(path, headers=bearer(token))
            assert_limited(limited)
            assert limited.headers["cache-control"] == "no-store"
        assert await reservations(engine) == PER_CLIENT  # a refusal adds nothing
        async with from_address(app, "127.0.0.9") as other:
            assert (await other.get("/api/events", headers=bearer(ADMIN))).status_code == 200


async def test_a_right_login_gives_its_reservation_back(sources: Sources, db_url: str) -> None:
    async with running_app(sources, db_url, **TOKENS) as (app, client):
        for i in range(PER_CLIENT - 1):
            wrong = await client.post("/admin/login", data={"token": f"wrong-{i}"})
            assert wrong.status_code == 401
        assert (await client.post("/admin/login", data={"token": READ})).status_code == 303
        assert await reservations(app.state.engine) == PER_CLIENT - 1
        # The fifth refusal is still allowed: the success did not use a slot.
        assert (await client.post("/admin/login", data={"token": "wrong"})).status_code == 401
        assert_limited(await client.post("/admin/login", data={"token": ADMIN}))


# --- headers on every answer -------------------------------------------------------


async def test_every_api_and_metrics_answer_is_no_store(
    sources: Sources, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(EventOps, "page", broken)
    async with running_app(sources, sqlite_url, **TOKENS) as (app, _):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://hookd") as client:
            answers = {
                "200": await client.get("/api/sources", headers=bearer(ADMIN)),
                "401": await client.get("/api/sources"),
                "403": await client.post("/api/sources/github/enable", headers=bearer(READ)),
                "404": await client.get("/api/no-such-thing", headers=bearer(ADMIN)),
                "405": await client.delete("/api/sources", headers=bearer(ADMIN)),
                "500": await client.get("/api/events", headers=bearer(ADMIN)),
                "metrics 200": await client.get("/metrics", headers=bearer(METRICS)),
                "metrics 401": await client.get("/metrics"),
                "metrics 403": await client.get("/metrics", headers=bearer(READ)),
            }
            for i in range(PER_CLIENT):
                await client.get("/api/sources", headers=bearer(f"wrong-{i}"))
            answers["429"] = await client.get("/api/sources", headers=bearer(ADMIN))
    for name, answer in answers.items():
        assert str(answer.status_code) == name.removeprefix("metrics "), (name, answer.text)
        assert answer.headers["cache-control"] == "no-store", name


async def test_every_admin_answer_carries_the_security_headers(
    sources: Sources, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(EventOps, "page", broken)
    async with running_app(sources, sqlite_url, **TOKENS) as (app, _):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://hookd") as client:
            answers = {
                404: await client.get("/admin/no-such-page"),
                405: await client.get("/admin/logout"),
                401: await client.post("/admin/login", data={"token": "wrong"}),
            }
            assert (await client.post("/admin/login", data={"token": ADMIN})).status_code == 303
            answers[500] = await client.get("/admin/events")
            answers[0] = await client.get("/admin/sources/no-such-source/nothing-here")
    for code, answer in answers.items():
        assert answer.status_code == (code or 404), (code, answer.text)
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (code, name)
