"""Reconciliation stopped by hand: ``hookd sources disable NAME [--reason TEXT]``,
``POST /api/sources/{name}/disable`` and the admin sources page's form. Each records
why, when and who (the command line and its OS user, the API and the admin token, the
admin UI and its session) in ``reconcile_state``, where the coverage ledger reads the
window a disabled source went unchecked; no run starts until it is enabled again."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from hookd.sources import Sources, parse_sources
from store.models import RECONCILE_STATE
from tests.support.admin import CSRF_RE
from tests.support.asgi import running_app
from tests.support.cli import hookd_async
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.emulators import StripeEmulator
from tests.support.http import serve_app
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "disable-admin-token"
READ_TOKEN = "disable-read-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STRIPE_KEY = "sk_test_disable"


def sources_text(api_url: str, extra: str = "") -> str:
    return f"""
[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "{api_url}"
allow_insecure = true
token = "{STRIPE_KEY}"
{extra}

[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
"""


@pytest.fixture
async def emulated() -> AsyncIterator[tuple[StripeEmulator, str]]:
    stripe = StripeEmulator(STRIPE_KEY)
    async with serve_app(stripe.app) as api_url:
        yield stripe, api_url


def sources_for(api_url: str, extra: str = "") -> Sources:
    return parse_sources(sources_text(api_url, extra), Path("disable.toml"), env={})


async def state_row(url: str) -> dict[str, Any]:
    """The stripe source's ``reconcile_state`` row; empty before anything wrote one."""
    async with engine_of(url) as engine, engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(RECONCILE_STATE).where(RECONCILE_STATE.c.source == "stripe")
            )
        ).first()
    return {} if row is None else dict(row._mapping)


async def run_of(client: httpx.AsyncClient) -> dict[str, Any]:
    started = await client.post("/api/sources/stripe/reconcile", headers=AUTH)
    assert started.status_code == 202, started.text
    path = f"/api/reconcile-runs/{started.json()['id']}"

    async def done() -> dict[str, Any]:
        run: dict[str, Any] = (await client.get(path, headers=AUTH)).json()
        return run if run["done"] else {}

    run: dict[str, Any] = await wait_for(done, timeout_s=30, interval_s=0.05)
    return run


async def test_disable_through_the_api_records_the_admin_token_why_and_when(
    pg_url: str, emulated: tuple[StripeEmulator, str]
) -> None:
    stripe, api_url = emulated
    async with running_app(
        sources_for(api_url),
        pg_url,
        admin_token=TOKEN,
        read_token=READ_TOKEN,
        reconcile_schedule=False,
    ) as (_, client):
        before = datetime.now(UTC)
        refused = await client.post(
            "/api/sources/stripe/disable", headers={"Authorization": f"Bearer {READ_TOKEN}"}
        )
        off = await client.post(
            "/api/sources/stripe/disable", params={"reason": "rotating the key"}, headers=AUTH
        )
        again = await client.post(
            "/api/sources/stripe/disable", params={"reason": "something else"}, headers=AUTH
        )
        run = await run_of(client)
        row = await state_row(pg_url)
        on = await client.post("/api/sources/stripe/enable", headers=AUTH)
        cleared = await state_row(pg_url)
    assert refused.status_code == 403
    assert off.status_code == 200, off.text
    reconcile = off.json()["reconcile"]
    assert (reconcile["state"], reconcile["reason"], reconcile["disabled_by"]) == (
        "disabled",
        "rotating the key",
        "api token:admin",
    )
    assert again.json()["reconcile"] == reconcile, "already off: its first record stays"
    assert (run["status"], run["error"]) == ("failed", "disabled: rotating the key")
    assert stripe.api_calls == 0, "a disabled source calls no API"
    # What the coverage ledger reads: the window began when it was switched off.
    assert before <= row["disabled_at"] <= before + timedelta(seconds=30)
    assert (row["disabled"], row["disabled_by"]) == (True, "api token:admin")
    assert on.json()["reconcile"]["state"] == "active"
    assert (on.json()["reconcile"]["disabled_at"], on.json()["reconcile"]["disabled_by"]) == (
        None,
        None,
    )
    assert (cleared["disabled"], cleared["disabled_at"], cleared["disabled_by"]) == (
        False,
        None,
        None,
    )


async def test_disable_refuses_a_bad_reason_an_unknown_and_an_unreconciled_source(
    sqlite_url: str, emulated: tuple[StripeEmulator, str]
) -> None:
    _, api_url = emulated
    async with running_app(
        sources_for(api_url), sqlite_url, admin_token=TOKEN, reconcile_schedule=False
    ) as (_, client):
        answers = [
            await client.post("/api/sources/stripe/disable", params=params, headers=AUTH)
            for params in ({"reason": "a\x00b"}, {"reason": "x" * 501}, {"reason": "a\nb"})
        ]
        unknown = await client.post("/api/sources/nope/disable", headers=AUTH)
        plain = await client.post("/api/sources/github/disable", headers=AUTH)
        listed = (await client.get("/api/sources", headers=AUTH)).json()["sources"]
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert all(a.json()["error"] == "bad_request" for a in answers)
    assert (unknown.status_code, plain.status_code) == (404, 409)
    assert listed[0]["reconcile"]["state"] == "active", "nothing was switched off"


async def test_disable_from_the_admin_page_records_the_session_and_needs_csrf(
    sqlite_url: str, emulated: tuple[StripeEmulator, str]
) -> None:
    _, api_url = emulated
    async with running_app(
        sources_for(api_url), sqlite_url, admin_token=TOKEN, reconcile_schedule=False
    ) as (_, client):
        assert (await client.post("/admin/login", data={"token": TOKEN})).status_code == 303
        page = (await client.get("/admin")).text
        match = CSRF_RE.search(page)
        assert match
        assert 'action="/admin/sources/stripe/disable"' in page
        forged = await client.post(
            "/admin/sources/stripe/disable", data={"csrf": "wrong", "reason": "x"}
        )
        still = await state_row(sqlite_url)
        done = await client.post(
            "/admin/sources/stripe/disable",
            data={"csrf": match.group(1), "reason": "provider incident", "back": "/admin"},
        )
        row = await state_row(sqlite_url)
        after = (await client.get("/admin")).text
    assert forged.status_code == 403
    assert not still.get("disabled")
    assert (done.status_code, done.headers["location"]) == (303, "/admin?done=disabled")
    assert (row["disabled"], row["disabled_reason"], row["disabled_by"]) == (
        True,
        "provider incident",
        "admin session:admin",
    )
    assert "provider incident" in after and "by admin session:admin" in after


async def test_the_automatic_stop_after_auth_failures_records_when_and_by_what(
    sqlite_url: str, emulated: tuple[StripeEmulator, str]
) -> None:
    stripe, api_url = emulated
    stripe.fail_next(401)
    sources = sources_for(api_url, "disable_after_auth_failures = 1")
    async with running_app(sources, sqlite_url, admin_token=TOKEN, reconcile_schedule=False) as (
        _,
        client,
    ):
        run = await run_of(client)
        listed = (await client.get("/api/sources", headers=AUTH)).json()["sources"]
    assert run["status"] == "failed"
    reconcile = listed[0]["reconcile"]
    assert (reconcile["state"], reconcile["disabled_by"]) == ("disabled", "hookd auth-failures")
    assert reconcile["disabled_at"] is not None


async def hookd_cli(url: str, config: Path, *args: str) -> tuple[int, str]:
    env = {"HOOKD_DATABASE_URL": url, "HOOKD_CONFIG": str(config)}
    code, out, err = await hookd_async(env, *args)
    assert "Traceback" not in err, err
    return code, out


async def test_disable_from_the_command_line_records_the_os_user_and_stops_runs(
    tmp_path: Path, sqlite_url: str, emulated: tuple[StripeEmulator, str]
) -> None:
    stripe, api_url = emulated
    config = tmp_path / "hookd.toml"
    config.write_text(sources_text(api_url))
    code, out = await hookd_cli(
        sqlite_url, config, "sources", "disable", "stripe", "--reason", "key rotation"
    )
    assert code == 0, out
    assert re.fullmatch(
        r"stripe: reconciliation disabled by cli( user:\S+)? at \S+Z: key rotation\n", out
    ), out
    row = await state_row(sqlite_url)
    assert (row["disabled"], row["disabled_reason"]) == (True, "key rotation")
    assert row["disabled_by"].startswith("cli") and row["disabled_at"] is not None
    code, out = await hookd_cli(sqlite_url, config, "reconcile", "stripe")
    assert (code, out.strip()) == (1, "stripe: disabled: key rotation")
    assert stripe.api_calls == 0
