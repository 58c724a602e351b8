"""The admin UI in a real browser (Debian's Chromium via Playwright) against a real
``hookd serve``: the login wall, a dead letter, the fix, Replay, and the event processed.

Processing runs in the server process (no Redis) on SQLite; the handler is
``tests.support.handlers:until_fixed``, which fails while the ``broken`` switch is on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa
from playwright.async_api import ConsoleMessage, Page, async_playwright, expect
from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.providers.signing import sample_event
from store.ids import new_id
from store.models import RECONCILE_RUNS, RECONCILE_STATE
from store.reconcile import audit
from store.reconcile import runs as rstate
from tests.support import handlers
from tests.support.constants import SECRETS, STANDARD_SECRET
from tests.support.data import engine_of
from tests.support.handlers import github_source
from tests.support.server import HookdServer, free_port
from tests.support.services import require_tool
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "browser-admin-token"
READ_TOKEN = "browser-read-token"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


async def set_broken(url: str, broken: bool) -> None:
    async with engine_of(url) as engine:
        await handlers.create_tables(engine)
        async with engine.begin() as conn:
            await conn.execute(sa.text("DELETE FROM switches WHERE name = 'broken'"))
            await conn.execute(
                sa.text("INSERT INTO switches (name, value) VALUES ('broken', :v)"),
                {"v": int(broken)},
            )


async def status_of(url: str, event_id: str) -> str:
    async with engine_of(url) as engine:
        async with engine.connect() as conn:
            status = await conn.scalar(
                sa.text("SELECT status FROM events WHERE id = :id"), {"id": event_id}
            )
        return str(status)


async def wait_status(url: str, event_id: str, want: str, timeout_s: float = 10) -> None:
    async def reached() -> bool:
        return await status_of(url, event_id) == want

    async def still() -> str:
        return f"{event_id} is {await status_of(url, event_id)}, not {want}"

    await wait_for(reached, timeout_s=timeout_s, interval_s=0.05, message=still)


def config(tmp_path: Path) -> Path:
    return github_source(
        tmp_path / "admin-browser.toml", "tests.support.handlers:until_fixed", "max_attempts = 1\n"
    )


def path_of(page: Page) -> str:
    return urlsplit(page.url).path


async def test_login_see_a_dead_letter_replay_it_after_the_fix_and_see_it_processed(
    tmp_path: Path, sqlite_url: str
) -> None:
    chromium = require_tool("chromium")
    await set_broken(sqlite_url, True)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path)),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_SWEEP_S": "0.5",
    }
    with HookdServer(env, tmp_path) as server:
        headers, body = sample_event("github", SECRETS["github"], 1)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            accepted = await client.post("/hooks/github", content=body, headers=headers)
        assert accepted.status_code == 202
        event_id = accepted.json()["event_id"]
        await wait_status(sqlite_url, event_id, "dead")

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page()
                page.set_default_timeout(5000)
                problems: list[str] = []

                def on_console(message: ConsoleMessage) -> None:
                    # (the wrong token's 401 is a console error too: not counted)
                    if "Content Security Policy" in message.text or "Refused" in message.text:
                        problems.append(message.text)

                page.on("console", on_console)

                # 1. Not logged in: every page is the login page, showing nothing else.
                for path in ("/admin", "/admin/events", "/admin/dead", f"/admin/events/{event_id}"):
                    await page.goto(server.url + path)
                    assert path_of(page) == "/admin/login", path
                    await expect(page.locator("input[name=token]")).to_be_visible()
                    html = await page.content()
                    # (the page asked for comes back in the login form's "next")
                    assert "issues.opened" not in html and "downstream" not in html
                    assert await page.locator("table, nav").count() == 0

                # 2. A wrong token is refused; the right one lands on the page asked for.
                await page.goto(server.url + "/admin/dead")
                await page.fill("input[name=token]", "not-the-token")
                await page.get_by_role("button", name="Log in").click()
                await expect(page.get_by_role("alert")).to_contain_text("not right")
                assert path_of(page) == "/admin/login"
                await page.fill("input[name=token]", TOKEN)
                await page.get_by_role("button", name="Log in").click()
                await page.wait_for_url("**/admin/dead")

                # 3. The dead event is there, with its error.
                link = page.locator(f'a[href="/admin/events/{event_id}"]')
                row = page.locator("tbody tr").filter(has=link)
                await expect(row).to_contain_text("dead")
                await expect(row).to_contain_text("the downstream is broken")

                # 4. Fix the handler, then Replay.
                await set_broken(sqlite_url, False)
                await row.get_by_role("button", name="Replay").click()
                await page.wait_for_url("**/admin/dead?done=replayed")
                await expect(page.get_by_role("status")).to_contain_text("Replayed")

                # 5. Reload the event's page until it shows processed.
                await page.goto(f"{server.url}/admin/events/{event_id}")
                status = page.locator("dd .status")

                async def shows_processed() -> bool:
                    if await status.inner_text() == "processed":
                        return True
                    await page.reload()
                    return False

                await wait_for(shows_processed, timeout_s=10, interval_s=0.2, message=page.content)
                # The ledger names the handler that finished; the history keeps its old failures.
                finished = page.get_by_text("tests.support.handlers:until_fixed", exact=True)
                await expect(finished).to_be_visible()
                failed = page.get_by_text("tests.support.handlers:until_fixed: RuntimeError")
                await expect(failed.first).to_be_visible()
                # The stylesheet is allowed by the CSP and applied.
                font = await page.evaluate("getComputedStyle(document.body).fontFamily")
                assert "system-ui" in font

                # Log out: the pages are behind the login again.
                await page.get_by_role("button", name="Log out").click()
                await page.wait_for_url("**/admin/login?done=logged_out")
                await page.goto(server.url + "/admin/dead")
                assert path_of(page) == "/admin/login"
                assert problems == [], "the CSP blocked something the pages use"
            finally:
                await browser.close()
    assert await status_of(sqlite_url, event_id) == "processed"


def wide_config(tmp_path: Path) -> Path:
    """Three reconciled sources and two destinations with long URLs: the sources page
    at its widest (admin session: the disable forms shown)."""
    api = f"http://127.0.0.1:{free_port()}"
    path = tmp_path / "admin-wide.toml"
    path.write_text(
        f"""
[[sources]]
name = "github-enterprise-main"
provider = "github"
secrets = ["{SECRETS["github"]}"]
public_url = "https://hookd.example/hooks/github-enterprise-main"

[sources.reconcile]
api_url = "{api}"
allow_insecure = true
token = "t"
hook = "repos/octo-organisation/a-long-repository-name/hooks/123456789"

[[sources.destinations]]
name = "warehouse-ingest"
url = "https://ingest.analytics.internal.example.com/v2/webhooks/github/events?tenant=main"
secret = "{STANDARD_SECRET}"

[[sources]]
name = "stripe-payments-eu"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]
public_url = "https://hookd.example/hooks/stripe-payments-eu"

[sources.reconcile]
api_url = "{api}"
allow_insecure = true
token = "rk_test_wide"

[[sources.destinations]]
name = "billing-service"
url = "https://billing.payments.internal.example.com/api/webhooks/stripe/receive"
secret = "{STANDARD_SECRET}"

[[sources]]
name = "slack"
provider = "slack"
secrets = ["{SECRETS["slack"]}"]
"""
    )
    return path


async def seed_reconcile_states(url: str) -> None:
    """github: drift with long problems; stripe: could not check, and disabled by hand
    with a long reason; both with a failed last run."""
    now = datetime.now(UTC)
    async with engine_of(url) as engine, engine.begin() as conn:
        for source in ("github-enterprise-main", "stripe-payments-eu"):
            await rstate.ensure_state(conn, source, now)
            await insert_run_row(conn, source, now)
        await audit.record_registration(
            conn, "github-enterprise-main", ok=False, now=now, registered={},
            problems=[
                "the hook posts to https://old-host.example.com/hooks/github?…, not to "
                "the source's public_url https://hookd.example/hooks/github-enterprise-main",
                "the hook does not send issues.opened, pull_request.*, release.*, which "
                "the source's handlers or destinations take",
            ],
        )  # fmt: skip
        await audit.record_registration(
            conn, "stripe-payments-eu", ok=False, problems=(), registered={}, now=now,
            unread="provider_unreachable: connect timeout: GET https://api.stripe.com/"
            "v1/webhook_endpoints (gave up after 4 attempts)",
        )  # fmt: skip
        await audit.disable(
            conn, "stripe-payments-eu", by="admin session:admin", now=now,
            reason="the provider's API keys are being rotated by the payments team; "
            "re-enable after the change window closes on Friday",
        )  # fmt: skip


async def insert_run_row(conn: AsyncConnection, source: str, now: datetime) -> None:
    run_id = new_id(int(now.timestamp() * 1000))
    await conn.execute(
        sa.insert(RECONCILE_RUNS).values(
            id=run_id, source=source, status="failed", trigger="schedule", dry_run=False,
            started_at=now, finished_at=now, items_checked=0, items_missing=0,
            items_repaired=0, pages=0, api_calls=1, rate_limited=0,
            error="provider_unreachable: connect timeout",
        )
    )  # fmt: skip
    await conn.execute(
        sa.update(RECONCILE_STATE)
        .where(RECONCILE_STATE.c.source == source)
        .values(last_run_id=run_id)
    )


async def test_the_sources_page_fits_1280_px_and_the_login_names_both_tokens(
    tmp_path: Path, sqlite_url: str
) -> None:
    """At 1280x800 the sources page (three sources, drift with its reasons, a
    registration that could not be checked, a disabled source, long destination URLs)
    needs no horizontal scrolling; "could not check" is not drift; the login page says
    the read token opens it too."""
    chromium = require_tool("chromium")
    env = {
        "HOOKD_CONFIG": str(wide_config(tmp_path)),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_READ_TOKEN": READ_TOKEN,
        "HOOKD_RECONCILE_SCHEDULE": "false",
    }
    with HookdServer(env, tmp_path) as server:
        await seed_reconcile_states(sqlite_url)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(5000)
                await page.goto(server.url + "/admin/login")
                label = page.locator("label[for=token]")
                await expect(label).to_contain_text("HOOKD_ADMIN_TOKEN")
                await expect(label).to_contain_text("HOOKD_READ_TOKEN")
                await expect(label).to_contain_text("read")
                await page.fill("input[name=token]", TOKEN)
                await page.get_by_role("button", name="Log in").click()
                await page.wait_for_url("**/admin")
                await expect(page.get_by_text("could not check", exact=True)).to_be_visible()
                await expect(page.locator(".bad", has_text="drift")).to_have_count(1)
                await expect(page.get_by_role("button", name="Disable")).to_have_count(1)
                await page.screenshot(path=str(tmp_path / "admin-sources-1280.png"), full_page=True)
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= 1280, f"the sources page is {width} px wide at 1280"
            finally:
                await browser.close()
