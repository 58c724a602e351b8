"""The admin UI in a real browser (Debian's Chromium via Playwright) against a real
``hookd serve``: the login wall, a dead letter, the fix, Replay, and the event processed.

Processing runs in the server process (no Redis) on SQLite; the handler is
``tests.support.handlers:until_fixed``, which fails while the ``broken`` switch is on.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa
from playwright.async_api import ConsoleMessage, Page, async_playwright, expect

from hookd.providers.signing import sample_event
from store import db
from tests.support import handlers
from tests.support.constants import SECRETS
from tests.support.server import HookdServer
from tests.support.services import require_tool
from tests.support.waiting import wait_for

pytestmark = pytest.mark.anyio
TOKEN = "browser-admin-token"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


async def set_broken(url: str, broken: bool) -> None:
    engine = db.create_engine(url)
    try:
        await handlers.create_tables(engine)
        async with engine.begin() as conn:
            await conn.execute(sa.text("DELETE FROM switches WHERE name = 'broken'"))
            await conn.execute(
                sa.text("INSERT INTO switches (name, value) VALUES ('broken', :v)"),
                {"v": int(broken)},
            )
    finally:
        await engine.dispose()


async def status_of(url: str, event_id: str) -> str:
    engine = db.create_engine(url)
    try:
        async with engine.connect() as conn:
            status = await conn.scalar(
                sa.text("SELECT status FROM events WHERE id = :id"), {"id": event_id}
            )
        return str(status)
    finally:
        await engine.dispose()


async def wait_status(url: str, event_id: str, want: str, timeout_s: float = 10) -> None:
    async def reached() -> bool:
        return await status_of(url, event_id) == want

    async def still() -> str:
        return f"{event_id} is {await status_of(url, event_id)}, not {want}"

    await wait_for(reached, timeout_s=timeout_s, interval_s=0.05, message=still)


def config(tmp_path: Path) -> Path:
    path = tmp_path / "admin-browser.toml"
    path.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]
handlers = ["tests.support.handlers:until_fixed"]
max_attempts = 1
"""
    )
    return path


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
