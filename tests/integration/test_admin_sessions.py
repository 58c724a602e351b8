"""Admin sessions kept server-side and the login rate limit, across processes: a real
``hookd serve --workers 2`` on PostgreSQL, where consecutive requests may land on
either process; the limit's arithmetic on both databases with a fixed clock
(tests/integration/test_auth_limits.py races it)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from hookd.sources import Sources
from hookd.web.admin_session import COOKIE, LOGIN_FAILURES_ALLOWED, LOGIN_WINDOW_S
from hookd.web.auth_limit import AuthLimit
from store.models import ADMIN_LOGIN_FAILURES, ADMIN_SESSIONS
from tests.support import services
from tests.support.asgi import running_app
from tests.support.constants import SOURCES_TOML
from tests.support.data import engine_of
from tests.support.server import HookdServer

pytestmark = pytest.mark.anyio
TOKEN = "sessions-admin-token"
READ_TOKEN = "sessions-read-token"
T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


def server_env(tmp_path: Path, url: str) -> dict[str, str]:
    config = tmp_path / "hookd.toml"
    config.write_text(SOURCES_TOML)
    return {
        "HOOKD_CONFIG": str(config),
        "HOOKD_DATABASE_URL": url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_READ_TOKEN": READ_TOKEN,
    }


def login(client: httpx.Client, token: str) -> httpx.Response:
    return client.post("/admin/login", data={"token": token})


def csrf_of(client: httpx.Client) -> str:
    page = client.get("/admin")
    assert page.status_code == 200
    return page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]


@pytest.fixture(scope="module")
def server(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HookdServer]:
    """One ``hookd serve --workers 2`` on PostgreSQL for this module's HTTP tests."""
    tmp = tmp_path_factory.mktemp("sessions")
    database = services.create_database(template=pg_template)
    try:
        env = server_env(tmp, services.sqlalchemy_url(database))
        with HookdServer(env, tmp, workers=2) as running:
            yield running
    finally:
        services.drop_database(database)


def client_from(server: HookdServer, address: str, **kwargs: Any) -> httpx.Client:
    """A client whose requests come from ``address`` (any of 127.0.0.0/8 is loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.url, timeout=10, transport=transport, **kwargs)


@pytest.mark.postgres
def test_a_copied_session_cookie_stops_working_after_logout_in_every_process(
    server: HookdServer,
) -> None:
    with client_from(server, "127.0.0.1") as browser:
        # An admin session and a read-only one, each copied to another client.
        for token in (TOKEN, READ_TOKEN):
            browser.cookies.clear()
            assert login(browser, token).status_code == 303
            cookie = browser.cookies[COOKIE]
            csrf = csrf_of(browser)
            with client_from(server, "127.0.0.1", cookies={COOKIE: cookie}) as copy:
                # The copy works, whichever process answers, until the logout.
                assert [copy.get("/admin").status_code for _ in range(6)] == [200] * 6
                assert browser.post("/admin/logout", data={"csrf": csrf}).status_code == 303
                assert [copy.get("/admin").status_code for _ in range(6)] == [303] * 6
                # Nor may the copy act (or log out again).
                refused = copy.post("/admin/logout", data={"csrf": csrf})
                assert refused.status_code == 303
                assert refused.headers["location"].startswith("/admin/login")


@pytest.mark.postgres
def test_refused_logins_from_one_address_get_429_with_retry_after_in_every_process(
    server: HookdServer,
) -> None:
    with client_from(server, "127.0.0.2") as client, client_from(server, "127.0.0.3") as other:
        for _ in range(LOGIN_FAILURES_ALLOWED):
            assert login(client, "wrong-token").status_code == 401
        # Now even the right token is not looked at, in whichever process answers.
        for _ in range(4):
            limited = login(client, TOKEN)
            assert limited.status_code == 429
            assert 1 <= int(limited.headers["retry-after"]) <= LOGIN_WINDOW_S
            assert "try again in" in limited.text
            assert COOKIE not in limited.headers.get("set-cookie", "")
        assert client.get("/admin").status_code == 303
        # Another address is not held back.
        assert login(other, TOKEN).status_code == 303


async def test_the_login_limit_counts_a_sliding_window_per_address(db_url: str) -> None:
    async with engine_of(db_url) as engine:
        limit = AuthLimit(engine, per_client=5, overall=50, window_s=60)
        for i in range(5):
            at = T0 + timedelta(seconds=i)
            assert await limit.wait_s("10.0.0.1", at) is None
            assert (await limit.reserve("10.0.0.1", at)).attempt
        # Five in the window: wait until the first is a window old.
        assert await limit.wait_s("10.0.0.1", T0 + timedelta(seconds=10)) == 50
        assert (await limit.reserve("10.0.0.1", T0 + timedelta(seconds=10))).wait_s == 50
        assert await limit.wait_s("10.0.0.1", T0 + timedelta(seconds=59.5)) == 1
        # Another address is not affected.
        assert await limit.wait_s("10.0.0.2", T0 + timedelta(seconds=10)) is None
        # One falls out of the window: one more try, and a refusal waits for the next.
        later = T0 + timedelta(seconds=60.5)
        assert await limit.wait_s("10.0.0.1", later) is None
        assert (await limit.reserve("10.0.0.1", later)).attempt
        assert await limit.wait_s("10.0.0.1", later) == 1  # until T0 + 1 s + 60 s
        # A reservation forgets every one older than the window (the first one here).
        async with engine.connect() as conn:
            kept = await conn.scalar(sa.select(sa.func.count()).select_from(ADMIN_LOGIN_FAILURES))
        assert kept == 5
        # A right token gives its reservation back: it is not counted (nor are the
        # address's refusals forgotten, as a login from the same address once did).
        then = T0 + timedelta(seconds=61.5)
        reserved = await limit.reserve("10.0.0.1", then)
        assert await limit.wait_s("10.0.0.1", then) == 1
        await limit.release(reserved.attempt)
        assert await limit.wait_s("10.0.0.1", then) is None


async def test_a_session_past_its_expiry_in_the_database_is_refused(
    sources: Sources, sqlite_url: str
) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (app, client):
        assert (await client.post("/admin/login", data={"token": TOKEN})).status_code == 303
        assert (await client.get("/admin")).status_code == 200
        async with app.state.engine.begin() as conn:
            past = datetime.now(UTC) - timedelta(seconds=1)
            await conn.execute(ADMIN_SESSIONS.update().values(expires_at=past))
        assert (await client.get("/admin")).status_code == 303
