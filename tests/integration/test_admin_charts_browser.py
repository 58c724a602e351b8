"""The per-source activity charts in a real browser (Debian's Chromium via Playwright)
against a real ``hookd serve``: a day of seeded traffic, runs and a lag spike, plus
events sent just now, drawn as SVG under the unchanged Content-Security-Policy.

Screenshots are kept as test artifacts: in ``$HOOKD_TEST_ARTIFACTS`` when set
(``scripts/test.sh`` sets it to ``test-artifacts/`` in the checkout unless it is set
already), else under the test's temporary directory. Each path is recorded as the
test's ``artifact`` property, and the run lists them at its end (tests/conftest.py),
with pytest-xdist too.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import ConsoleMessage, async_playwright, expect

from hookd.providers.signing import sample_event
from store.reconcile import coverage
from tests.integration.test_admin_browser import CHROMIUM_ARGS
from tests.support.activity_data import event_row, insert_rows, insert_run
from tests.support.constants import SECRETS
from tests.support.data import engine_of
from tests.support.server import HookdServer, free_port
from tests.support.services import require_tool

pytestmark = pytest.mark.anyio
TOKEN = "charts-admin-token"
LIVE_EVENTS = 4


def config(tmp_path: Path) -> Path:
    path = tmp_path / "charts.toml"
    path.write_text(
        f"""
[[sources]]
name = "github"
provider = "github"
secrets = ["{SECRETS["github"]}"]

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["{SECRETS["stripe"]}"]

[sources.reconcile]
api_url = "http://127.0.0.1:{free_port()}"
allow_insecure = true
token = "rk_test_charts"
"""
    )
    return path


async def seed_day(url: str, now: datetime) -> None:
    """A day of stripe traffic: a daily wave of 0-8 events a minute, processed within
    seconds except for a 40-minute backlog 6 hours ago; a run every half hour, some
    finding misses and late arrivals."""
    rng = random.Random(15)
    rows: list[dict[str, Any]] = []
    for minute in range(24 * 60, 0, -1):
        at = now - timedelta(minutes=minute)
        rate = 4 + 4 * math.sin(minute / 1440 * 2 * math.pi * 2)
        backlog = 6 * 60 - 40 <= minute <= 6 * 60
        for _ in range(rng.randint(0, max(0, round(rate)))):
            received = at + timedelta(seconds=rng.uniform(0, 59))
            lag = rng.uniform(300, 900) if backlog else rng.uniform(0.2, 6)
            rows.append(event_row("stripe", received, received + timedelta(seconds=lag), len(rows)))
    async with engine_of(url) as engine:
        await insert_rows(engine, rows)
        for half_hour in range(48, 0, -1):
            missing = rng.choice([0, 0, 0, 1, 2, 4])
            late = rng.choice([0, 0, 1]) if missing else 0
            started = now - timedelta(minutes=30 * half_hour - 7)
            run_id = await insert_run(engine, "stripe", started, missing=missing, late=late)
            # Its coverage: the half hour before it, one failed 5 hours ago.
            async with engine.begin() as conn:
                await coverage.record(
                    conn, source="stripe", start=started - timedelta(minutes=30), end=started,
                    outcome="failed" if half_hour == 10 else "repaired" if missing else "complete",
                    now=started, run_id=run_id, repaired=missing,
                    reason="provider answered 500" if half_hour == 10 else None,
                )  # fmt: skip


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("HOOKD_TEST_ARTIFACTS") or tmp_path / "artifacts")
    where.mkdir(parents=True, exist_ok=True)
    return where


async def test_the_activity_page_draws_a_sources_day_as_svg_charts_in_the_browser(
    tmp_path: Path, sqlite_url: str, record_property: Callable[[str, object], None]
) -> None:
    chromium = require_tool("chromium")
    now = datetime.now(UTC)
    await seed_day(sqlite_url, now)
    env = {
        "HOOKD_CONFIG": str(config(tmp_path)),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_RECONCILE_SCHEDULE": "false",
        "HOOKD_SWEEP_S": "0.5",
    }
    shots = artifacts(tmp_path)
    saved: list[Path] = []
    with HookdServer(env, tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            for seq in range(LIVE_EVENTS):
                headers, body = sample_event("stripe", SECRETS["stripe"], 100 + seq)
                sent = await client.post("/hooks/stripe", content=body, headers=headers)
                assert sent.status_code == 202, sent.text
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                page.set_default_timeout(10_000)
                problems: list[str] = []

                def on_console(message: ConsoleMessage) -> None:
                    if "Content Security Policy" in message.text or "Refused" in message.text:
                        problems.append(message.text)

                page.on("console", on_console)
                await page.goto(server.url + "/admin/login")
                await page.fill("input[name=token]", TOKEN)
                await page.get_by_role("button", name="Log in").click()
                await page.wait_for_url("**/admin")
                # From the sources page, the source's activity link.
                await page.locator('a[href="/admin/sources/stripe/activity"]').click()
                await page.wait_for_url("**/admin/sources/stripe/activity")

                charts = page.locator("svg.chart")
                await expect(charts).to_have_count(3)
                for i in range(3):
                    await expect(charts.nth(i)).to_be_visible()
                    box = await charts.nth(i).bounding_box()
                    assert box is not None and box["width"] > 600 and box["height"] > 100
                # Received and processed, a day of minutes each; the lag lines; 48 runs.
                received = page.locator("svg.chart polyline.series-a")
                await expect(received).to_have_count(1)
                points = await received.get_attribute("points")
                assert points is not None and len(points.split()) == 24 * 60
                await expect(page.locator("svg.chart polyline.series-c").first).to_be_attached()
                assert await page.locator("svg.chart rect.bar-missed").count() > 5
                assert await page.locator("svg.chart rect.bar-late").count() > 0
                # The stylesheet colours the lines (not the browser's default black fill).
                stroke = await received.evaluate("e => getComputedStyle(e).stroke")
                fill = await received.evaluate("e => getComputedStyle(e).fill")
                assert stroke not in ("none", "rgb(0, 0, 0)") and fill == "none"
                # The live events are counted (processed in-process within seconds).
                await expect(page.locator(".legend").first).to_contain_text("received")
                path = shots / "admin-activity-stripe.png"
                await page.screenshot(path=str(path), full_page=True)
                saved.append(path)
                record_property("artifact", str(path))

                # A source that is not reconciled says so instead of a runs chart.
                await page.goto(server.url + "/admin/sources/github/activity")
                await expect(page.locator("svg.chart")).to_have_count(2)
                await expect(page.get_by_text("This source is not reconciled")).to_be_visible()
                path = shots / "admin-activity-github.png"
                await page.screenshot(path=str(path), full_page=True)
                saved.append(path)
                record_property("artifact", str(path))

                # The coverage page's timeline: the checked runs, the failed one, and
                # the part not judged yet.
                await page.goto(server.url + "/admin/sources/stripe/coverage?since=25h")
                timeline = page.locator("svg.timeline")
                await expect(timeline).to_be_visible()
                box = await timeline.bounding_box()
                assert box is not None and box["width"] > 600
                rows = await page.locator("table tbody tr").count()
                await expect(timeline.locator("rect.band")).to_have_count(rows)
                await expect(timeline.locator("rect.cov-failed")).to_have_count(1)
                assert await timeline.locator("rect.cov-checked").count() >= 2
                checked = timeline.locator("rect.cov-checked").first
                colour = await checked.evaluate("e => getComputedStyle(e).fill")
                assert colour not in ("none", "rgb(0, 0, 0)")
                path = shots / "admin-coverage-stripe.png"
                await page.screenshot(path=str(path), full_page=True)
                saved.append(path)
                record_property("artifact", str(path))

                await page.goto(server.url + "/admin")
                path = shots / "admin-sources.png"
                await page.screenshot(path=str(path), full_page=True)
                saved.append(path)
                record_property("artifact", str(path))
                assert problems == [], "the CSP blocked something the pages use"
            finally:
                await browser.close()
    assert all(p.stat().st_size > 10_000 for p in saved)


async def test_failed_runs_have_their_own_colour_and_legend_entry_in_the_browser(
    tmp_path: Path, sqlite_url: str, record_property: Callable[[str, object], None]
) -> None:
    """Seven runs that failed (the provider unreachable), one of them after repairing two
    events, beside runs that found nothing and one that found misses: the failed ones
    are drawn in a colour of their own with a legend entry, not as "found nothing"; the
    coverage timeline's failed holes share that colour."""
    chromium = require_tool("chromium")
    now = datetime.now(UTC)
    async with engine_of(sqlite_url) as engine:
        for hour in range(12, 0, -1):
            started = now - timedelta(hours=hour)
            failed = hour <= 7
            await insert_run(
                engine, "stripe", started, missing=2 if hour == 3 or hour == 10 else 0, late=0,
                status="failed" if failed else "succeeded",
                error="provider_unreachable: connect timeout" if failed else None,
            )  # fmt: skip
            async with engine.begin() as conn:
                await coverage.record(
                    conn, source="stripe", start=started - timedelta(hours=1), end=started,
                    outcome="failed" if failed else "complete", now=started, run_id=None,
                    reason="provider_unreachable" if failed else None,
                )  # fmt: skip
    env = {
        "HOOKD_CONFIG": str(config(tmp_path)),
        "HOOKD_DATABASE_URL": sqlite_url,
        "HOOKD_ADMIN_TOKEN": TOKEN,
        "HOOKD_RECONCILE_SCHEDULE": "false",
    }
    with HookdServer(env, tmp_path) as server:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(10_000)
                await page.goto(server.url + "/admin/login")
                await page.fill("input[name=token]", TOKEN)
                await page.get_by_role("button", name="Log in").click()
                await page.wait_for_url("**/admin")
                await page.goto(server.url + "/admin/sources/stripe/activity")
                runs = page.locator("svg.chart").nth(2)
                await expect(runs.locator("rect.bar-failed")).to_have_count(7)
                # Only the four runs that succeeded without a miss are "found nothing".
                await expect(runs.locator("rect.bar-none")).to_have_count(4)
                await expect(runs.locator("rect.bar-missed")).to_have_count(2)
                title = (
                    await runs.locator("g", has=page.locator("rect.bar-failed"))
                    .first.locator("title")
                    .text_content()
                )
                assert title is not None and "failed" in title and "provider_unreachable" in title
                legend = page.locator(".legend").nth(2)
                await expect(legend.locator(".key.bar-failed")).to_be_visible()
                await expect(legend).to_contain_text("failed")
                await expect(legend).to_contain_text("(7)")
                await expect(legend).to_contain_text("succeeded and found nothing (4)")

                async def fill(locator: Any) -> str:
                    return str(await locator.evaluate("e => getComputedStyle(e).fill"))

                failed = await fill(runs.locator("rect.bar-failed").first)
                nothing = await fill(runs.locator("rect.bar-none").first)
                missed = await fill(runs.locator("rect.bar-missed").first)
                assert failed not in ("none", "rgb(0, 0, 0)", nothing, missed)
                key = await legend.locator(".key.bar-failed").evaluate(
                    "e => getComputedStyle(e).backgroundColor"
                )
                assert key == failed
                path = artifacts(tmp_path) / "admin-activity-failed-runs.png"
                await page.screenshot(path=str(path), full_page=True)
                record_property("artifact", str(path))

                # The coverage timeline draws failed holes in the same colour.
                await page.goto(server.url + "/admin/sources/stripe/coverage?since=13h")
                hole = page.locator("svg.timeline rect.cov-failed").first
                await expect(hole).to_be_visible()
                assert await fill(hole) == failed
            finally:
                await browser.close()
